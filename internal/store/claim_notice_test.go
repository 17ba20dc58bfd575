package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

	conn, notices := noticeConn(t, db)
	// Warnings reach the client at client_min_messages = notice, the default;
	// set it in case the server's default differs.
	_, err := conn.Exec(ctx, "SET client_min_messages = notice")
	require.NoError(t, err)

	st := store.New("skiplock")
	base := store.ClaimParams{Batch: 10, WorkerID: benchWorker, Lease: time.Minute}
	variants := map[string]store.ClaimParams{}
	plain := base
	plain.Queues = []string{"q"}
	variants["plain"] = plain
	capped := plain
	capped.TenantCap, capped.TenantCursor = 2, map[string]string{}
	variants["capped"] = capped
	roomy := base
	roomy.Queues, roomy.Limits, roomy.LimitRoom = []string{"lq"}, []string{"l"}, &store.LimitRoom{}
	variants["limit with room"] = roomy
	tight := base
	tight.Queues, tight.Limits = []string{"tq"}, []string{"tight"}
	variants["limited"] = tight
	for name, p := range variants {
		// Twice: the second run of a prepared statement may take another
		// plan (the generic one the capped claim forces).
		for i := 0; i < 2; i++ {
			jobs, err := st.Claim(ctx, conn, p)
			require.NoError(t, err, name)
			require.NotEmpty(t, jobs, name)
		}
	}
	require.Empty(t, notices(), "the claims made the server warn")
}

// noticeConn opens a connection that keeps every notice the server sends
// it ("SEVERITY: message"); notices returns them so far. Closed with the test.
func noticeConn(t *testing.T, db *dbtest.DB) (conn *pgx.Conn, notices func() []string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	var mu sync.Mutex
	var got []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, n.Severity+": "+n.Message)
	}
	conn, err = pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	return conn, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}
