package dashboard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// TestJobPagesReadTheReplica: with Options.Replica the job search, a job's
// page and the dead-letter groups read through the replica (a never-started
// Client over its pool), while actions go to the primary. The "replica"
// here is another database, so what a page shows says where it read.
func TestJobPagesReadTheReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, replica := dbtest.New(t), dbtest.New(t)
	h, err := New(primary.Pool, Options{Schema: primary.Schema, Replica: replica.Pool,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		_ = h.(*Dashboard).Close()
	})
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	onPrimary, err := skiplock.NewClient(primary.Pool, skiplock.Config{Schema: primary.Schema})
	require.NoError(t, err)
	onReplica, err := skiplock.NewClient(replica.Pool, skiplock.Config{Schema: replica.Schema})
	require.NoError(t, err)

	p, err := onPrimary.Enqueue(ctx, skiplock.EnqueueParams{Kind: "kind.on.primary"})
	require.NoError(t, err)
	r, err := onReplica.Enqueue(ctx, skiplock.EnqueueParams{Kind: "kind.on.replica"})
	require.NoError(t, err)
	dead, err := onReplica.Enqueue(ctx, skiplock.EnqueueParams{Kind: "dead.on.replica"})
	require.NoError(t, err)
	_, err = onReplica.JobCancel(ctx, dead.ID)
	require.NoError(t, err)

	code, body := get(fmt.Sprintf("/jobs/%d", r.ID))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "kind.on.replica")
	require.NotContains(t, body, "kind.on.primary")

	code, body = get("/jobs")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "kind.on.replica")
	require.NotContains(t, body, "kind.on.primary", "the search reads the replica")

	code, body = get("/dead")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "dead.on.replica", "the dead-letter groups read the replica")

	// An action goes to the primary: cancelling the primary's job there.
	resp, err := http.PostForm(srv.URL+fmt.Sprintf("/jobs/%d/cancel", p.ID), nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	rec, err := onPrimary.JobGet(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateDead, rec.State)
}
