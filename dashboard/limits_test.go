package dashboard

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// The limits page shows each limit with its use: a full concurrency limit
// (1 of 1 running) holding a due job back, and an idle rate limit; never a
// payload, though a partition may read one of its fields.
func TestLimitsPageShowsUse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ctx := context.Background()
	require.NoError(t, f.client.LimitSet(ctx, skiplock.Limit{Name: "mail-one", Queue: "mail", Concurrency: 1}))
	require.NoError(t, f.client.LimitSet(ctx, skiplock.Limit{Name: "sync-rate", Kind: "sync",
		Partition: "arg:customer", Rate: 10, Per: time.Minute}))
	_, err := f.db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, state, locked_by, lease_token, lease_expires_at, attempts, attempted_at, payload)
		VALUES ('mail', 'email.send', 'running', 'w', 1, now() + interval '1 hour', 1, now(), jsonb_build_object('email', $1::text))`, marker)
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, run_at, payload)
		VALUES ('mail', 'email.send', now() - interval '2 minutes', jsonb_build_object('email', $1::text)),
		       ('default', 'sync', now(), jsonb_build_object('customer', $1::text))`, marker)
	require.NoError(t, err)

	code, body := f.get("/limits")
	require.Equal(t, http.StatusOK, code, body)
	for _, want := range []string{`id="limits-table"`, "mail-one", "queue mail", "1 running", "1 / 1",
		"oldest due job waiting 2m", "sync-rate", "kind sync", "arg:customer", "10 starts per 1m0s", "0 / 10",
		`href="/limits" class="active"`} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, marker, "the limits page shows a payload")
}
