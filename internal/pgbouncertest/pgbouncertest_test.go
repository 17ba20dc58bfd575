package pgbouncertest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/pgbouncertest"
)

// TestTransactionMode proves the helper runs a real transaction-mode
// pooler: a session's backend changes between statements, and pgx's
// per-connection prepared statements collide there, the failure skiplock
// must avoid.
func TestTransactionMode(t *testing.T) {
	db := dbtest.NewEmpty(t)
	b := pgbouncertest.Start(t)
	ctx := context.Background()
	u := b.URL(t, db.URL)

	// Two clients share the server connections: what one prepares the
	// other meets.
	c1, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect through pgbouncer: %v\n%s", err, b.Log())
	}
	defer c1.Close(ctx)
	c2, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	var collided bool
	for i := 0; i < 20 && !collided; i++ {
		for _, c := range []*pgx.Conn{c1, c2} {
			var n int
			if err := c.QueryRow(ctx, "SELECT $1::int + 1", i).Scan(&n); err != nil {
				collided = true
				t.Logf("default statement cache through the pooler: %v", err)
				break
			}
		}
	}
	if !collided {
		t.Fatal("two pgx connections with the statement cache never collided: is pool_mode transaction?")
	}
}
