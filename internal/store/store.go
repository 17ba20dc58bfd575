// Package store holds all of skiplock's hot-path SQL and the write-side
// operations (dead-letter replay and purge, the jobs_done partition DDL);
// read-side figures are in internal/health. Each concern lives in one .sql
// file under sql/, split into named statements ("-- name: x"), and is
// rendered once per schema; the Go here is one small wrapper per query.
package store

import (
	"context"
	"embed"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/sqlfile"
)

//go:embed sql/*.sql
var files embed.FS

var raw = sqlfile.MustParse(files, "sql")

// Querier is what a statement that only reads its result rows runs on: a
// pgx pool, connection or transaction, or a user's database/sql
// transaction behind the root package's SQLTx adapter (skiplock.Tx has the
// same two methods).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DBTX is what a query runs on: a pool, a connection or a transaction.
// SendBatch pipelines statements in one round trip (the claim).
type DBTX interface {
	Querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store is the query set rendered for one schema.
type Store struct {
	Schema string
	q      map[string]string

	// noSummarize is set once this process's role turned out unable to
	// run summarize_done (a reader, or a schema older than the function):
	// JobsFinished then looks up without it, and SummarizeDone asks no more.
	noSummarize atomic.Bool
	// summarizedAt is when JobsFinished last summarized (UnixNano).
	summarizedAt atomic.Int64
}

// seedBug is set only in a build with the skiplock_seedbug tag (seedbug.go),
// which the fault suite uses to prove its checker fails when the lease
// fence is gone. No other build can set it.
var seedBug bool

// leaseFence is the condition every lease holder's write carries (lease.sql).
// The token alone implies state = 'running' (jobs_lease_check).
var leaseFence = regexp.MustCompile(`AND j\.lease_token = (l\.token|\$\d+) AND j\.locked_by = (\$\d+)`)

// noFence is what the seeded bug puts in the fence's place: the same
// parameters (so the statement's arguments still match), no condition.
const noFence = "AND (j.lease_token = ${1} OR j.locked_by = ${2} OR true)"

// New renders every query for schema (already validated by the caller).
func New(schema string) *Store {
	var edit func(string) string
	if seedBug {
		edit = func(v string) string { return leaseFence.ReplaceAllString(v, noFence) }
	}
	return &Store{Schema: schema, q: sqlfile.Render(raw, schema, edit)}
}

// SQL returns a rendered statement by name; it panics on an unknown name,
// which is a programming error caught by any test that runs the query.
func (s *Store) SQL(name string) string {
	v, ok := s.q[name]
	if !ok {
		panic("store: no query named " + name)
	}
	return v
}

// Table returns the quoted, schema-qualified name of one of skiplock's tables.
func (s *Store) Table(name string) string { return pgx.Identifier{s.Schema, name}.Sanitize() }

// Channel is the NOTIFY channel for ready jobs of this installation.
func (s *Store) Channel() string { return s.Schema + ".jobs" }

// CancelChannel is the NOTIFY channel for cancellations of running jobs.
func (s *Store) CancelChannel() string { return s.Schema + ".cancel" }

// WaitersChannel is the NOTIFY channel on which a waiter that starts
// listening (listen_done) tells worker processes to announce the ends
// they write from now on.
func (s *Store) WaitersChannel() string { return s.Schema + ".waiters" }

// DoneChannel is the NOTIFY channel of finished jobs' ids (notify_done),
// which waiters listen on (ListenDone).
func (s *Store) DoneChannel() string { return s.Schema + ".done" }

// ListenDone subscribes conn to the finished jobs' channel and names the
// session skiplock-wait (WaitersListening).
func (s *Store) ListenDone(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, s.SQL("listen_done"))
	return err
}

// UnlistenDone undoes ListenDone on a connection that stays up.
func (s *Store) UnlistenDone(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, s.SQL("unlisten_done"))
	return err
}

// WaitersListening reports whether a waiter's LISTEN connection
// (Client.Wait) is open on this database.
func (s *Store) WaitersListening(ctx context.Context, db DBTX) (bool, error) {
	var yes bool
	err := db.QueryRow(ctx, s.SQL("waiters_listening")).Scan(&yes)
	return yes, err
}

// DonePayloads joins ids into notify_done's payloads, each under
// PostgreSQL's 8,000-byte limit.
func DonePayloads(ids []int64) []string {
	const maxPayload = 7900
	var out []string
	var b []byte
	for _, id := range ids {
		if len(b) > maxPayload-21 {
			out = append(out, string(b))
			b = b[:0]
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	if len(b) > 0 {
		out = append(out, string(b))
	}
	return out
}

// Micros converts a duration for the "* interval '1 microsecond'" idiom.
func Micros(d time.Duration) int64 { return d.Microseconds() }

// DirectSession reports whether conn reaches one server session directly:
// the backend serving a statement is the one the connection was given at
// startup. Through a pooler (PgBouncer and the like) it is not, and
// session state (LISTEN, session advisory locks) cannot be relied on.
func (s *Store) DirectSession(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	// The simple protocol leaves no prepared statement behind on whichever
	// server session a pooler lent.
	if err := conn.QueryRow(ctx, s.SQL("backend_pid"), pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return false, err
	}
	return pid == conn.PgConn().PID(), nil
}

// Now reads the database clock (the transaction's start time when db is a
// transaction).
func (s *Store) Now(ctx context.Context, db DBTX) (time.Time, error) {
	var now time.Time
	err := db.QueryRow(ctx, s.SQL("now")).Scan(&now)
	return now, err
}

// CopyClock reads what EnqueueMany's COPY cannot compute per row: the
// database clock and the ring generation plain jobs go to now.
func (s *Store) CopyClock(ctx context.Context, db DBTX) (time.Time, int16, error) {
	var now time.Time
	var gen int16
	err := db.QueryRow(ctx, s.SQL("copy_clock")).Scan(&now, &gen)
	return now, gen, err
}

// Listen subscribes conn to the installation's notifications: ready jobs
// (Channel) and cancellations (CancelChannel).
func (s *Store) Listen(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, s.SQL("listen"))
	return err
}

// Unlisten undoes Listen on a connection that stays up.
func (s *Store) Unlisten(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, s.SQL("unlisten"))
	return err
}

// NotifySelfTest sends payload on the jobs channel: the listener's check
// that notifications reach its session.
func (s *Store) NotifySelfTest(ctx context.Context, conn *pgx.Conn, payload string) error {
	_, err := conn.Exec(ctx, s.SQL("notify_self_test"), payload)
	return err
}
