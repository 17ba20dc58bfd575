package devdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/devdb"
)

func TestStartCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := devdb.Start(ctx, devdb.Options{Fast: true})
	if err == devdb.ErrNoServer {
		t.Skip(err)
	}
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Remove()) }()

	ping := func() {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		require.NoError(t, err)
		defer conn.Close(ctx)
		var one int
		require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
		require.Equal(t, 1, one)
	}
	ping()
	require.NoError(t, c.Crash(ctx))
	_, err = pgx.Connect(ctx, c.URL("postgres"))
	require.Error(t, err, "a crashed server refuses connections")
	require.NoError(t, c.Restart(ctx))
	ping()
}
