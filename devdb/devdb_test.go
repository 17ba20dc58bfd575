package devdb_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// The review's F5, made a test: the throwaway cluster trusted every local
// user (initdb -A trust on 127.0.0.1), so the OS user nobody connected as
// superuser and ran a shell command with COPY ... TO PROGRAM. Now the URL
// carries a generated password and nothing gets in without it: not this
// process over TCP, and not nobody over TCP or through the socket
// directory (0700). Run as root, the part as nobody uses setpriv.
func TestClusterRefusesOtherUsers(t *testing.T) {
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

	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err, "the URL it hands out works")
	require.NoError(t, conn.Close(ctx))

	u, err := url.Parse(c.URL("postgres"))
	require.NoError(t, err)
	pw, ok := u.User.Password()
	require.True(t, ok, "the URL carries a password")
	require.GreaterOrEqual(t, len(pw), 32)
	u.User = url.User("postgres")
	noPassword := u.String()
	_, err = pgx.Connect(ctx, noPassword+"&connect_timeout=5")
	require.Error(t, err, "no password, no connection")
	require.Contains(t, err.Error(), "password")

	info, err := os.Stat(c.SocketDir())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm(), "the socket directory is private")

	if os.Getuid() != 0 {
		t.Log("not root: the part as another OS user is skipped")
		return
	}
	bin, err := devdb.BinDir()
	require.NoError(t, err)
	psql := filepath.Join(bin, "psql")
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	// What the review ran as nobody, over TCP and through the socket.
	for _, target := range []string{noPassword, "host=" + c.SocketDir() + " port=" + strconv.Itoa(c.Port()) + " user=postgres dbname=postgres"} {
		cmd := exec.CommandContext(ctx, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
			psql, "-w", target, "-c", "COPY (SELECT 1) TO PROGRAM 'id'")
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "nobody connected to %s: %s", target, out)
		msg := string(out)
		t.Logf("as nobody, %s: %s", target, strings.TrimSpace(msg))
		require.True(t, strings.Contains(msg, "password") || strings.Contains(msg, "Permission denied"),
			"refused for want of a password or by the socket directory's mode: %s", msg)
	}
}
