package skiplock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// newRole creates a login role of the test server, granted kind in db's
// schema by skiplock.RoleGrant, and returns a pool connected as that role.
// The role is dropped at the end of the test.
func newRole(t *testing.T, db *dbtest.DB, kind skiplock.RoleKind) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + string(kind) + "_" + hex.EncodeToString(b)
	_, err := db.Pool.Exec(ctx, `CREATE ROLE `+name+` LOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() {
		// The role's privileges in the test database go first, then the role.
		_, _ = db.Pool.Exec(context.Background(), `DROP OWNED BY `+name)
		_, _ = db.Pool.Exec(context.Background(), `DROP ROLE `+name)
	})
	owner := newClient(t, db.Pool, skiplock.Config{})
	stmts, err := owner.RoleGrant(ctx, kind, name)
	require.NoError(t, err)
	require.NotEmpty(t, stmts)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.User(name)
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func requireSQLState(t *testing.T, code string, err error, msgAndArgs ...any) {
	t.Helper()
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "want SQLSTATE %s, got %v", code, err)
	require.Equal(t, code, pe.Code, msgAndArgs...)
}

// Issue 38 §2: the review found that a role given what enqueue needs could
// also INSERT into the tables past every validation, and raise the payload
// limit for its session with SET skiplock.max_payload_bytes. A producer role
// enqueues and signals through the functions and nothing else.
func TestProducerRoleOnlyEnqueuesAndSignals(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	producer := newRole(t, db, skiplock.RoleProducer)

	// Through the SQL function and through the Go API.
	var id int64
	require.NoError(t, producer.QueryRow(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'k', payload => '{"a": 1}')`).Scan(&id))
	c := newClient(t, producer, skiplock.Config{})
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Payload: map[string]int{"a": 2}})
	require.NoError(t, err)
	require.True(t, r.Inserted)
	tx, err := producer.Begin(ctx)
	require.NoError(t, err)
	_, err = c.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "k", UniqueKey: "u1"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	// A signal to a job in flight.
	_, err = producer.Exec(ctx, `SELECT skiplock.signal(name => 'go', job_id => $1)`, id)
	require.NoError(t, err)
	require.Equal(t, 3, countJobs(t, db.Pool, "true"))

	// The finding: an INSERT past validation (priority and max_attempts
	// 2^31-1, run_at 1900) was accepted. Now every write to a table is
	// refused (42501, insufficient_privilege), and so is reading them.
	for _, stmt := range []string{
		`INSERT INTO skiplock.jobs (queue, kind, priority, max_attempts, run_at) VALUES ('default', 'k', 2147483647, 2147483647, '1900-01-01')`,
		`INSERT INTO skiplock.jobs_keyed (queue, kind) VALUES ('default', 'k')`,
		`INSERT INTO skiplock.jobs_g0 (queue, kind) VALUES ('default', 'k')`,
		`UPDATE skiplock.jobs SET priority = 2147483647`,
		`DELETE FROM skiplock.jobs`,
		`INSERT INTO skiplock.signals (name, job_id) VALUES ('go', 1)`,
		`UPDATE skiplock.settings SET max_payload_bytes = 100000000`,
		`SELECT payload FROM skiplock.jobs`,
		`SELECT * FROM skiplock.jobs_dead`,
		`SELECT skiplock.rotate_ring(10)`,
		`SELECT skiplock.drop_done_partitions(interval '0')`,
		`SELECT skiplock.summarize_done()`,
		`CREATE TABLE skiplock.mine (x int)`,
	} {
		_, err := producer.Exec(ctx, stmt)
		requireSQLState(t, "42501", err, stmt)
	}
	require.Equal(t, 3, countJobs(t, db.Pool, "true"))

	// The finding: SET skiplock.max_payload_bytes raised the limit for the
	// session. It is ignored now: the limit is the settings table's.
	big := `{"a": "` + strings.Repeat("x", skiplock.DefaultMaxPayloadBytes) + `"}`
	conn, err := producer.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET skiplock.max_payload_bytes = '100000000'`)
	require.NoError(t, err, "a custom setting can still be SET; it no longer means anything")
	_, err = conn.Exec(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'k', payload => $1::jsonb)`, big)
	requireSQLState(t, "22023", err)
	require.Contains(t, err.Error(), "skiplock: payload: ")
	require.Contains(t, err.Error(), "exceeds the limit of 1048576 bytes")
	// Validation holds too: the SQL function runs as the owner but
	// validates what the producer gives it.
	_, err = conn.Exec(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'k', priority => 2147483647)`)
	requireSQLState(t, "22023", err)
	// A sealed payload passed split (what Go's Enqueue does: its key id
	// and the bytes) is held to the same limit, as the whole envelope the
	// two make, and its payload must be the key id only.
	stub := `{"skiplock_encrypted": "v1.k1"}`
	_, err = conn.Exec(ctx, `SELECT skiplock.enqueue_one('default', 'k', $1::jsonb, 0, NULL, NULL, NULL, NULL, NULL, false,
		p_sealed => $2::bytea)`, stub, make([]byte, skiplock.DefaultMaxPayloadBytes))
	requireSQLState(t, "22023", err)
	require.Contains(t, err.Error(), "exceeds the limit of 1048576 bytes")
	_, err = conn.Exec(ctx, `SELECT skiplock.enqueue_one('default', 'k', '{"a": 1}', 0, NULL, NULL, NULL, NULL, NULL, false,
		p_sealed => '\x0102'::bytea)`)
	requireSQLState(t, "22023", err)
	require.Contains(t, err.Error(), `skiplock: payload: with sealed bytes, must be {"skiplock_encrypted": "v1.KEYID"}`)
	// Nor can a function of the producer's stand in for one the body names:
	// the search_path of the functions that run as the owner is pinned.
	for _, fn := range []string{"enqueue_job", "enqueue_one"} {
		var path []string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT p.proconfig FROM pg_proc AS p
			WHERE p.oid = ('skiplock.' || $1)::regproc AND p.prosecdef`, fn).Scan(&path))
		require.Equal(t, []string{"search_path=pg_catalog, pg_temp"}, path, fn)
	}

	// The owner raises the limit for everyone; then the payload fits.
	_, err = db.Pool.Exec(ctx, `UPDATE skiplock.settings SET max_payload_bytes = 2 * 1048576`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'k', payload => $1::jsonb)`, big)
	require.NoError(t, err)
}

// A worker role runs jobs and the maintenance a started client runs (the
// ring's turn, the finished-job partitions) without owning anything, and
// cannot change the limits.
func TestWorkerRoleRunsJobs(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	worker := newRole(t, db, skiplock.RoleWorker)

	c := newClient(t, worker, skiplock.Config{PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	done := make(chan int64, 4)
	require.NoError(t, skiplock.Handle(c, "k", func(ctx context.Context, j *skiplock.Job[map[string]int]) error {
		done <- j.ID
		return nil
	}))
	for i := 0; i < 3; i++ {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Payload: map[string]int{"i": i}})
		require.NoError(t, err)
	}
	require.NoError(t, c.Start(ctx))
	waitNoJobs(t, db.Pool)
	require.NoError(t, c.Stop(ctx))
	require.Len(t, done, 3)
	require.EqualValues(t, 3, c.Stats().Completed)

	for _, stmt := range []string{
		`SELECT skiplock.rotate_ring(10)`,
		`SELECT skiplock.ensure_done_partitions(2)`,
		`SELECT skiplock.drop_done_partitions(interval '30 days')`,
		`SELECT skiplock.summarize_done()`,
	} {
		_, err := worker.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	for _, stmt := range []string{
		`UPDATE skiplock.settings SET max_payload_bytes = 100000000`,
		`DELETE FROM skiplock.schema_migrations`,
		`DROP TABLE skiplock.jobs_dead`,
	} {
		_, err := worker.Exec(ctx, stmt)
		requireSQLState(t, "42501", err, stmt)
	}
}

// A reader role (the dashboard's read-only mode, stats) reads the jobs and
// the health views but not payloads or outputs, and writes nothing.
func TestReaderRoleCannotReadPayloads(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	owner := newClient(t, db.Pool, skiplock.Config{})
	_, err := owner.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Payload: map[string]string{"email": "ann@example.com"}})
	require.NoError(t, err)
	reader := newRole(t, db, skiplock.RoleReader)

	var n int
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs WHERE kind = 'k' AND state = 'ready'`).Scan(&n))
	require.Equal(t, 1, n)
	rows, err := reader.Query(ctx, `SELECT * FROM skiplock.queue_stats`)
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, rows.Err())
	for _, stmt := range []string{
		`SELECT payload FROM skiplock.jobs`,
		`SELECT * FROM skiplock.jobs`,
		`SELECT payload FROM skiplock.jobs_dead`,
		`SELECT sealed FROM skiplock.jobs`,
		`SELECT sealed FROM skiplock.jobs_done`,
		`SELECT sealed FROM skiplock.jobs_dead`,
		`SELECT payload FROM skiplock.signals`,
		`SELECT output FROM skiplock.job_steps`,
		`SELECT output FROM skiplock.workflow_tasks`,
		`SELECT skiplock.enqueue(queue => 'default', kind => 'k')`,
		`UPDATE skiplock.jobs SET priority = 5`,
		`SELECT skiplock.summarize_done()`,
	} {
		_, err := reader.Exec(ctx, stmt)
		requireSQLState(t, "42501", err, stmt)
	}
	// It may not summarize jobs_done's index (summarize_done, first in a
	// look-up's pipeline), and still reads how jobs ended: the look-up
	// finds that out once and goes on without it.
	var doneID int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload, result)
		VALUES (900000001, 0, 1, now(), now(), now(), 'default', 'k', '{}', '"ok"') RETURNING id`).Scan(&doneID))
	rc := newClient(t, reader, skiplock.Config{})
	for range 2 {
		end, err := rc.JobResult(ctx, doneID)
		require.NoError(t, err)
		require.Equal(t, skiplock.JobStateCompleted, end.State)
		require.JSONEq(t, `"ok"`, string(end.Result))
	}
	ends, err := rc.Wait(ctx, doneID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateCompleted, ends[0].State)
	// Granted by hand, it sees them.
	_, err = db.Pool.Exec(ctx, `GRANT SELECT (payload) ON skiplock.jobs TO `+pgUser(t, reader))
	require.NoError(t, err)
	var email string
	require.NoError(t, reader.QueryRow(ctx, `SELECT payload->>'email' FROM skiplock.jobs`).Scan(&email))
	require.Equal(t, "ann@example.com", email)
}

// An unknown kind or role is refused, naming the field.
func TestRoleGrantRefusesUnknown(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	_, err := c.RoleGrant(ctx, "superuser", "postgres")
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "kind", fe.Field)
	_, err = c.RoleGrant(ctx, skiplock.RoleProducer, "no_such_role_x9")
	requireSQLState(t, "22023", err)
	require.Contains(t, err.Error(), "skiplock: grantee: no role no_such_role_x9")
}

func pgUser(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	return pool.Config().ConnConfig.User
}
