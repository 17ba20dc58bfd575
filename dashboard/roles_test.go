package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// A read-only dashboard runs on the reader role (skiplock roles grant
// reader): its pages render, none shows a payload, and the database itself
// refuses an action even if the application did not. /schedules and
// /limits are left out: they read payload columns (a schedule's arguments,
// a limit partitioned by a payload field), which the reader is not granted
// (docs/security.md "Roles").
func TestReadOnlyDashboardOnReaderRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "t_reader_" + hex.EncodeToString(b)
	_, err := f.db.Pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = f.db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = f.db.Pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	_, err = f.client.RoleGrant(ctx, skiplock.RoleReader, role)
	require.NoError(t, err)
	u, err := url.Parse(f.db.URL)
	require.NoError(t, err)
	u.User = url.User(role)
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	h, err := New(pool, Options{Schema: f.db.Schema, ReadOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.(*Dashboard).Close() })
	for _, path := range []string{"/", "/queues", "/jobs", "/jobs/" + fmt.Sprint(f.readyID), "/jobs/" + fmt.Sprint(f.deadIDs[0]),
		"/dead", "/workers", "/workflows", "/health"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "127.0.0.1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", path, rec.Body.String())
		require.NotContains(t, rec.Body.String(), marker, path)
	}
	_, err = pool.Exec(ctx, `UPDATE `+f.db.Schema+`.queues SET paused = true`)
	require.ErrorContains(t, err, "permission denied")
}
