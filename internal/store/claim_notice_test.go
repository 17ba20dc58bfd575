package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// No claim variant makes the server warn. A warning is logged in the
// server's log for every claim, hundreds a second on a busy pool: the claim
// pipelines once used SET LOCAL outside a transaction block, and each claim
// wrote two "SET LOCAL can only be used in transaction blocks" lines.
func TestClaimsSendNoNotices(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant)
		SELECT 'q', 'k', 't' || (g % 7) FROM generate_series(1, 200) AS g`)
	seed(t, db, `INSERT INTO skiplock.limits (name, queue, concurrency) VALUES ('l', 'lq', 1000), ('tight', 'tq', 15)`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind) SELECT q, 'k' FROM unnest(ARRAY['lq', 'tq']) AS q, generate_series(1, 20)`)

	conn, notices := db.NoticeConn(t)

	st := store.New("skiplock")
	base := store.ClaimRequest{Batch: 10, WorkerID: benchWorker, Lease: time.Minute}
	variants := map[string]store.ClaimRequest{}
	plain := base
	plain.Queues = []string{"q"}
	variants["plain"] = plain
	capped := plain
	capped.Strategy, capped.TenantCap, capped.TenantCursor = store.ClaimCapped, 2, map[string]string{}
	variants["capped"] = capped
	roomy := base
	roomy.Strategy, roomy.Queues, roomy.Limits = store.ClaimWithinRoom, []string{"lq"}, []string{"l"}
	variants["limit with room"] = roomy
	tight := base
	tight.Strategy, tight.Queues, tight.Limits = store.ClaimLimited, []string{"tq"}, []string{"tight"}
	variants["limited"] = tight
	for name, p := range variants {
		// Twice: the second run of a prepared statement may take another
		// plan (the generic one the capped claim forces).
		for i := 0; i < 2; i++ {
			jobs, err := claimJobs(ctx, st, conn, p)
			require.NoError(t, err, name)
			require.NotEmpty(t, jobs, name)
		}
	}
	require.Empty(t, notices(), "the claims made the server warn")
}
