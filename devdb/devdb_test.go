package devdb_test

import (
	"context"
	"strconv"
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

// small is what tests that start several clusters use: little memory, no
// fsync (a process crash keeps what the OS has), synchronous_commit left on
// so a synchronous standby is waited for.
var small = map[string]string{"shared_buffers": "16MB", "fsync": "off", "full_page_writes": "off", "max_connections": "40"}

// TestStandbyFailover builds a primary and a synchronous streaming standby,
// checks that a commit acknowledged by the primary is on the standby,
// crashes the primary, promotes the standby and finds it, writable, through
// the multi-host URL.
func TestStandbyFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := devdb.Start(ctx, devdb.Options{Settings: small})
	if err == devdb.ErrNoServer {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Remove()) })

	_, err = p.StartStandby(ctx, devdb.StandbyOptions{Name: "Bad-Name"})
	require.ErrorContains(t, err, "StandbyOptions.Name")

	s, err := p.StartStandby(ctx, devdb.StandbyOptions{Name: "s1", Synchronous: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Remove()) })

	query := func(url, q string) (string, error) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return "", err
		}
		defer conn.Close(ctx)
		var v string
		return v, conn.QueryRow(ctx, q).Scan(&v)
	}
	multi := devdb.MultiHostURL("postgres", s, p) // the standby first: read-write must skip it
	port, err := query(multi, "SELECT current_setting('port')")
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(p.Port()), port, "the multi-host URL reaches the primary")
	_, err = query(p.URL("postgres"), "CREATE TABLE t AS SELECT 42 AS v")
	require.ErrorIs(t, err, pgx.ErrNoRows) // CREATE TABLE AS returns no row, but it committed
	sync, err := query(p.URL("postgres"), "SELECT sync_state FROM pg_stat_replication WHERE application_name = 's1'")
	require.NoError(t, err)
	require.Equal(t, "sync", sync)
	rec, err := query(s.URL("postgres"), "SELECT pg_is_in_recovery()::text")
	require.NoError(t, err)
	require.Equal(t, "true", rec)

	require.NoError(t, p.Crash(ctx))
	_, err = query(multi, "SELECT 1::text")
	require.Error(t, err, "no read-write server before the promotion")
	require.NoError(t, s.Promote(ctx))
	port, err = query(multi, "SELECT current_setting('port')")
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(s.Port()), port, "after the promotion the multi-host URL reaches the old standby")
	v, err := query(multi, "SELECT v::text FROM t")
	require.NoError(t, err)
	require.Equal(t, "42", v, "the commit acknowledged before the crash survived")
	// The promoted standby waits for no standby of its own.
	_, err = query(multi, "INSERT INTO t VALUES (43) RETURNING v::text")
	require.NoError(t, err)
}

func TestFreePort(t *testing.T) {
	a, err := devdb.FreePort()
	require.NoError(t, err)
	require.Positive(t, a)
}
