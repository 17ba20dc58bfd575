// Package dbtest gives tests real PostgreSQL databases: a template database
// migrated once per migration set, and a fresh copy per test.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/devdb"
	"github.com/skiplock/skiplock/internal/migrations"
	"github.com/skiplock/skiplock/internal/sqlfile"
)

// DB is one test's database.
type DB struct {
	URL    string
	Pool   *pgxpool.Pool
	Schema string
}

var (
	once     sync.Once
	adminURL string
	onceErr  error
	tmplOnce sync.Once
	tmplName string
	tmplErr  error
)

// AdminURL returns the URL of a maintenance connection to the test server.
func AdminURL(t testing.TB) string {
	t.Helper()
	once.Do(func() { adminURL, onceErr = discover() })
	if onceErr != nil {
		t.Fatalf("dbtest: %v", onceErr)
	}
	return adminURL
}

// discover finds the test server: TEST_DATABASE_URL, else a server on
// 127.0.0.1:5432, else a private cluster started from the installed server
// binaries (package devdb) and shared by every test process of this user.
func discover() (string, error) {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u, nil
	}
	u := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=2"
	if reachable(u) {
		return u, nil
	}
	priv, err := privateServer()
	if err != nil {
		return "", fmt.Errorf("no PostgreSQL: set TEST_DATABASE_URL, run one on 127.0.0.1:5432, or install the server binaries (%v)", err)
	}
	return priv, nil
}

func reachable(u string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

// privateServer starts (once per machine and user) a throwaway cluster under
// the temp directory and leaves it running for the next test process; a
// file lock serialises the packages `go test ./...` runs in parallel.
func privateServer() (string, error) {
	base := filepath.Join(os.TempDir(), fmt.Sprintf("skiplock-dbtest-%d", os.Getuid()))
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(base, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	portFile, urlFile := filepath.Join(base, "port"), filepath.Join(base, "url")
	// The URL carries the cluster's password (devdb trusts nobody): the
	// file is readable by this user only.
	if b, err := os.ReadFile(urlFile); err == nil {
		if u := strings.TrimSpace(string(b)); reachable(u) {
			return u, nil
		}
	}
	port := 0
	if b, err := os.ReadFile(portFile); err == nil {
		port, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(base, "data"), Port: port, Fast: true})
	if err != nil && port != 0 {
		// The saved port may be taken by now: pick a new one.
		c, err = devdb.Start(ctx, devdb.Options{Dir: filepath.Join(base, "data"), Fast: true})
	}
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(portFile, []byte(strconv.Itoa(c.Port())), 0o600); err != nil {
		return "", err
	}
	u := c.URL("postgres") + "&connect_timeout=2"
	if err := os.WriteFile(urlFile, []byte(u), 0o600); err != nil {
		return "", err
	}
	return u, nil
}

func withDB(u, db string) string {
	p, _ := url.Parse(u)
	p.Path = "/" + db
	return p.String()
}

func template(t testing.TB) string {
	t.Helper()
	admin := AdminURL(t)
	tmplOnce.Do(func() {
		h := sha256.New()
		for _, m := range migrations.All() {
			h.Write([]byte(m.Up))
		}
		for _, f := range migrations.Functions() {
			h.Write([]byte(f.SQL))
		}
		tmplName = "skiplock_tmpl_" + hex.EncodeToString(h.Sum(nil))[:12]
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			tmplErr = err
			return
		}
		defer conn.Close(ctx)
		if _, err = conn.Exec(ctx, "SELECT pg_advisory_lock(727172)"); err != nil {
			tmplErr = err
			return
		}
		defer conn.Exec(ctx, "SELECT pg_advisory_unlock(727172)")
		var exists bool
		if err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tmplName).Scan(&exists); err != nil {
			tmplErr = err
			return
		}
		sweep(conn, admin)
		if exists {
			return
		}
		building := tmplName + "_build"
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)")
		if _, err = conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
			tmplErr = err
			return
		}
		tc, err := pgx.Connect(ctx, withDB(admin, building))
		if err != nil {
			tmplErr = err
			return
		}
		err = pgx.BeginFunc(ctx, tc, func(tx pgx.Tx) error {
			_, err := migrations.UpTx(ctx, tx, "skiplock", 0)
			return err
		})
		tc.Close(ctx)
		if err != nil {
			tmplErr = err
			return
		}
		_, tmplErr = conn.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+tmplName)
	})
	if tmplErr != nil {
		t.Fatalf("dbtest: template: %v", tmplErr)
	}
	return tmplName
}

// New returns a fresh migrated database (schema "skiplock"), dropped when
// the test passes and kept (its URL logged) when it fails.
func New(t testing.TB) *DB { return create(t, template(t)) }

// NewEmpty returns a fresh database with no migrations applied.
func NewEmpty(t testing.TB) *DB { return create(t, "template0") }

func create(t testing.TB, tmpl string) *DB {
	t.Helper()
	admin := AdminURL(t)
	ctx := context.Background()
	name := dbName(t.Name())
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer conn.Close(ctx)
	for i := 0; ; i++ {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl)
		if err == nil || i >= 50 || !strings.Contains(err.Error(), "being accessed by other users") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("dbtest: create database: %v", err)
	}
	u := withDB(admin, name)
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg.MaxConns = 20
	TrimIdle(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		if t.Failed() {
			t.Logf("dbtest: kept database %s", u)
			return
		}
		discard(admin, name)
	})
	return &DB{URL: u, Pool: pool, Schema: "skiplock"}
}

// dbName is a test database's name: t_, 12 random hex digits, and the
// test's name in lower case with every run of other characters than
// letters and digits as one underscore, cut to 54 bytes (discard's
// dropping_ prefix and the name within PostgreSQL's 63). The
// test's name tells whose connections pg_stat_activity shows when a run
// nears the server's max_connections; sweep and discard go by the
// dropping_ prefix, not by this name.
func dbName(test string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b) + "_"
	under := false
	for _, r := range strings.ToLower(test) {
		if len(name) >= 63-len(droppingPrefix) {
			break
		}
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		switch {
		case ok:
			name += string(r)
			under = false
		case !under:
			name += "_"
			under = true
		}
	}
	return strings.TrimRight(name, "_")
}

// TrimIdle makes a test's pool close the connections it has not used for
// a second, within half a second: pgxpool keeps an idle connection for 30
// minutes by default, so a test that once ran a burst of claims, or three
// client "processes" of 8 connections each, held them all to its end (24
// idle connections for 20 s in one test), and the suite's parallel tests
// together reached the 100 connections of a fresh machine's server
// ("sorry, too many clients already", twice in clean-clone CI runs).
func TrimIdle(cfg *pgxpool.Config) {
	cfg.MaxConnIdleTime = time.Second
	cfg.HealthCheckPeriod = 500 * time.Millisecond
}

// droppingPrefix marks a database that a passed test gave up: nothing uses
// it any more, and any process may drop it.
const droppingPrefix = "dropping_"

// discard gets rid of a passed test's database without making the test
// wait for DROP DATABASE, which takes a second or more on a busy server
// with fsync on (PostgreSQL 15 waits for every backend to release the
// database's files): a parallel test would hold its slot that long. The
// database is renamed dropping_<name> at once (milliseconds), and the DROP
// is sent without waiting for its answer (dropLater). When the rename
// cannot be done (a session is still connected), or enough drops run
// already, it is dropped here, as before.
func discard(admin, name string) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	for i := 0; i < 20; i++ {
		_, err = c.Exec(ctx, "ALTER DATABASE "+name+" RENAME TO "+droppingPrefix+name)
		if err == nil {
			if !dropsInFlight(c) {
				dropLater(admin, droppingPrefix+name)
				return
			}
			name = droppingPrefix + name
			break
		}
		if !strings.Contains(err.Error(), "being accessed by other users") {
			break
		}
		time.Sleep(25 * time.Millisecond) // the pool's backends are still exiting
	}
	_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

// maxDropsInFlight bounds the drops no test waits for: each holds a
// snapshot while it runs, which the tests that look for the oldest
// snapshot on the server (the pin checks) must not find too often.
const maxDropsInFlight = 2

// dropsInFlight reports whether maxDropsInFlight drops sent by dropLater
// (from any process) are still running: then the test drops its own.
func dropsInFlight(c *pgx.Conn) bool {
	var n int
	err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND starts_with(query, 'DROP DATABASE IF EXISTS `+droppingPrefix+`')`).Scan(&n)
	return err != nil || n >= maxDropsInFlight
}

// dropLater sends DROP DATABASE name on a connection of its own and closes
// the connection without reading the answer: the server runs the statement
// to its end all the same (it does not watch the client's socket while it
// works), and no goroutine of the test process waits for it (the packages'
// goleak checks would count one). A drop that does not happen leaves the
// database to the next sweep.
func dropLater(admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	f := c.PgConn().Frontend()
	f.Send(&pgproto3.Query{String: "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"})
	if err := f.Flush(); err != nil {
		_ = c.Close(ctx)
		return
	}
	_ = c.PgConn().Conn().Close() // no Terminate: the server would end the statement
}

// sweep drops, without waiting, the databases that passed tests gave up
// and whose drop never happened (a server restart, say); once per process.
func sweep(conn *pgx.Conn, admin string) {
	rows, err := conn.Query(context.Background(), "SELECT datname FROM pg_database WHERE starts_with(datname, $1) LIMIT 20", droppingPrefix)
	if err != nil {
		return
	}
	names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, name := range names {
		dropLater(admin, name)
	}
}

//go:embed sql/*.sql
var probeFiles embed.FS

// probeSQL holds the statements of NoticeConn and JITConn (sql/probe.sql).
var probeSQL = sqlfile.MustParse(probeFiles, "sql")

// Pin opens a connection to the test database and leaves a transaction
// open on it that holds an xid, as an idle report or a forgotten session
// does: the vacuum horizon of the database stays where it is (vacuum
// removes nothing deleted since) until the connection closes, with the test
// or when the caller closes it.
func (d *DB) Pin(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	if _, err := conn.Exec(ctx, probeSQL["pin_horizon"]); err != nil {
		t.Fatal(err)
	}
	return conn
}

// NoticeConn opens a connection to the test database that keeps every
// notice the server sends it ("SEVERITY: message", client_min_messages at
// notice); notices returns them so far. It is closed with the test.
func (d *DB) NoticeConn(t testing.TB) (conn *pgx.Conn, notices func() []string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, n.Severity+": "+n.Message)
	}
	if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	if _, err := conn.Exec(ctx, probeSQL["notices_to_client"]); err != nil {
		t.Fatal(err)
	}
	return conn, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// JITConn opens a connection on which the server would JIT-compile every
// statement it runs (the JIT costs at zero) and sends each statement's plan
// back as a notice (auto_explain at log_level notice). compiled reports
// whether the last statement whose plan contains marker was compiled; it
// fails the test when no such plan came back. The test is skipped on a
// server without a JIT provider.
func (d *DB) JITConn(t testing.TB) (conn *pgx.Conn, compiled func(marker string) bool) {
	t.Helper()
	ctx := context.Background()
	var available bool
	if err := d.Pool.QueryRow(ctx, probeSQL["jit_available"]).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if !available {
		t.Skip("this server has no JIT provider (postgresql's llvm JIT package): nothing is ever compiled")
	}
	conn, notices := d.NoticeConn(t)
	for _, name := range []string{"load_auto_explain", "compile_and_explain_everything"} {
		if _, err := conn.Exec(ctx, probeSQL[name]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return conn, func(marker string) bool {
		t.Helper()
		plans := notices()
		for i := len(plans) - 1; i >= 0; i-- {
			if strings.Contains(plans[i], marker) {
				return strings.Contains(plans[i], "\nJIT:")
			}
		}
		t.Fatalf("no plan of a statement marked %q among %d notices", marker, len(plans))
		return false
	}
}
