package dbtest

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/devdb"
)

// The fallback for machines with no server: a private cluster, started
// once and found again (same URL) by the next caller.
func TestPrivateServer(t *testing.T) {
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip(err)
	}
	u1, err := privateServer()
	if err != nil {
		t.Fatal(err)
	}
	u2, err := privateServer()
	if err != nil {
		t.Fatal(err)
	}
	if u1 != u2 {
		t.Fatalf("second call started another server: %s then %s", u1, u2)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u1)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

// A test database is a fresh copy of the migrated template.
func TestNewIsMigratedAndPrivate(t *testing.T) {
	a, b := New(t), New(t)
	if a.URL == b.URL {
		t.Fatal("two tests share a database")
	}
	var n int
	if err := a.Pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock.jobs").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pool.Exec(context.Background(), "INSERT INTO skiplock.jobs (queue, kind) VALUES ('q', 'k')"); err != nil {
		t.Fatal(err)
	}
	if err := b.Pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock.jobs").Scan(&n); err != nil || n != 0 {
		t.Fatalf("b sees %d jobs (%v)", n, err)
	}
}

// A passed test's database is gone from under its name as soon as the test
// ends, and dropped in the background soon after.
func TestPassedTestsDatabaseIsDropped(t *testing.T) {
	var name string
	t.Run("uses a database", func(t *testing.T) {
		db := New(t)
		if err := db.Pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exists := func(n string) bool {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", n).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if exists(name) {
		t.Fatalf("database %s is still there after its test passed", name)
	}
	deadline := time.Now().Add(time.Minute)
	for exists(droppingPrefix + name) {
		if time.Now().After(deadline) {
			t.Fatalf("database %s%s was never dropped", droppingPrefix, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A test database's name says whose it is, and leaves room for discard's
// prefix within PostgreSQL's 63 bytes.
func TestDBNameCarriesTheTestsName(t *testing.T) {
	n := dbName("TestWait/two clients")
	if !regexp.MustCompile(`^t_[0-9a-f]{12}_testwait_two_clients$`).MatchString(n) {
		t.Errorf("dbName: %q", n)
	}
	long := dbName(strings.Repeat("TestX/", 30))
	if len(droppingPrefix+long) > 63 || len(long) < 50 || !strings.HasPrefix(long[15:], "testx_testx") {
		t.Errorf("dbName of a long name: %q (%d bytes)", long, len(long))
	}
	if a, b := dbName("TestA"), dbName("TestA"); a == b {
		t.Error("two runs of one test got one database name")
	}
}
