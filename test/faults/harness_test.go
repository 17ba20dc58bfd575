package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/devdb"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// Timing shared by the tests: short leases so a fault heals in seconds, and
// safety checks that never depend on timing (only liveness waits do).
const (
	lease     = 2 * time.Second
	heartbeat = 500 * time.Millisecond
	reaper    = 500 * time.Millisecond
	poll      = 500 * time.Millisecond
)

// setupSQL adds the test's own tables to a migrated database: runs (one row
// per execution, written by the workers) and an audit trail of every change
// to skiplock's job tables, written by triggers in the changing transaction
// (so rolled-back work leaves no trace). The audit keeps DB times, the
// application_name of the writer (each worker process sets its own),
// whether the statement was the reaper's, and the lease token the write
// presented for the row when the writer recorded it: the faultworker's
// tracer (testdata/worker) sets skiplock_test.presented to
// {md5(statement): {job id: token}} on its connection before each lease
// write, and the trigger trusts it only for the statement whose text it
// names (see presentedTokens in the worker). For every row version written
// (an insert or an update) it also keeps whether the stored payload was
// sealed (an encryption envelope) and whether the row's text holds a
// plaintext marker (plainMarker, in every payload the tests enqueue); runs
// keep the payload each handler saw.
const setupSQL = `
CREATE TABLE public.runs (
    id          bigserial   PRIMARY KEY,
    job_id      bigint      NOT NULL,
    attempt     int         NOT NULL,
    worker      text        NOT NULL,
    lease_token bigint      NOT NULL,
    pid         int         NOT NULL,
    nonce       bigint      UNIQUE, -- per execution: makes the insert safe to retry
    payload     jsonb,                -- the payload the handler saw (opened, when sealed)
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished    boolean     NOT NULL DEFAULT false,
    outcome     text,
    finished_at timestamptz
);
CREATE TABLE public.audit (
    seq           bigserial   PRIMARY KEY,
    tbl           text        NOT NULL,
    op            text        NOT NULL,
    job_id        bigint      NOT NULL,
    old_state     text,
    new_state     text,
    old_token     bigint,
    new_token     bigint,
    old_locked_by text,
    new_locked_by text,
    old_expires   timestamptz,
    new_expires   timestamptz,
    old_run_at    timestamptz,
    attempts      int,
    max_attempts  int,
    reason        text,
    queue         text        NOT NULL,
    unique_key    text,
    entity        text,
    presented_token bigint,
    sealed        boolean,
    marker        boolean,
    app           text        NOT NULL,
    reaper        boolean     NOT NULL,
    tx_now        timestamptz NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION public.audit_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    o jsonb := CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN to_jsonb(OLD) END;
    n jsonb := CASE WHEN TG_OP IN ('UPDATE', 'INSERT') THEN to_jsonb(NEW) END;
    r jsonb := coalesce(n, o);
    -- jobs is partitioned (migration 016): its row triggers fire on the
    -- partition (jobs_g0..jobs_g2, jobs_keyed); the audit names the table.
    t text := CASE WHEN TG_TABLE_NAME ~ '^jobs_(g[0-9]+|keyed)$' THEN 'jobs' ELSE TG_TABLE_NAME END;
    p jsonb := CASE WHEN t = 'jobs'
                    THEN nullif(current_setting('skiplock_test.presented', true), '')::jsonb END;
BEGIN
    -- The ring's turn moves a ready job from one generation to another (a
    -- delete and an insert of the same row, id and all): storage, not a
    -- change of the job's state, so not a step of its history.
    IF position('rotate_ring' in coalesce(current_query(), '')) > 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO public.audit (tbl, op, job_id, old_state, new_state, old_token, new_token,
        old_locked_by, new_locked_by, old_expires, new_expires, old_run_at, attempts, max_attempts,
        reason, queue, unique_key, entity, presented_token, sealed, marker, app, reaper, tx_now)
    VALUES (t, lower(TG_OP), (r->>'id')::bigint, o->>'state', n->>'state',
        (o->>'lease_token')::bigint, (n->>'lease_token')::bigint, o->>'locked_by', n->>'locked_by',
        (o->>'lease_expires_at')::timestamptz, (n->>'lease_expires_at')::timestamptz,
        (o->>'run_at')::timestamptz, (r->>'attempts')::int, (r->>'max_attempts')::int, r->>'reason',
        coalesce(r->>'queue', ''), r->>'unique_key', r->>'entity',
        (p -> md5(coalesce(current_query(), '')) ->> (r->>'id'))::bigint,
        (n -> 'payload') ? 'skiplock_encrypted', position('` + plainMarker + `' in n::text) > 0,
        coalesce(current_setting('application_name', true), ''),
        position('stopped heartbeating' in coalesce(current_query(), '')) > 0, now());
    RETURN NULL;
END
$$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON skiplock.jobs
    FOR EACH ROW EXECUTE FUNCTION public.audit_jobs();
CREATE TRIGGER audit AFTER INSERT ON skiplock.jobs_dead
    FOR EACH ROW EXECUTE FUNCTION public.audit_jobs();
CREATE TRIGGER audit AFTER INSERT ON skiplock.jobs_done
    FOR EACH ROW EXECUTE FUNCTION public.audit_jobs();
`

// plainMarker starts the marker every payload the tests enqueue carries
// (job.Marker): the audit looks for it in each row version written.
const plainMarker = "fault-plaintext-marker-"

// env is one test's world: a database with skiplock's schema and the test
// tables, a producer client, and the worker processes the test started.
type env struct {
	t      *testing.T
	url    string
	pool   *pgxpool.Pool
	client *skiplock.Client
	// keys is the keyring file of a test that seals payloads (encrypt):
	// client seals with it, and every worker started after is given it.
	keys string

	logDir string
	// workerProgram is the program worker starts: "faultworker" unless a
	// test sets another (the seeded-bug build).
	workerProgram string

	mu       sync.Mutex // guards owners, procs, gen, enqueued and markers
	owners   map[string]func(lockedBy string) bool
	procs    []*proc
	gen      map[string]int
	enqueued map[int64]enqueuedPayload // by job id: what enqueueTo committed
	markers  int                       // the payload markers handed out
}

// enqueuedPayload is what the test enqueued as a job's payload, and whether
// its client sealed it.
type enqueuedPayload struct {
	json   []byte
	sealed bool
}

// newEnv gives the test a fresh database on the shared server.
func newEnv(t *testing.T) *env {
	t.Helper()
	db := dbtest.New(t)
	return setupEnv(t, db.URL, db.Pool)
}

// privateEnv starts a private cluster (for the tests that crash and
// restart the database, so no other test is disturbed), migrates a
// database on it and installs the test tables; maxConns > 0 caps the test's
// own pool. Durable settings (not Options.Fast): with synchronous_commit off
// an immediate shutdown may drop acknowledged commits, which would be the
// database's loss, not skiplock's.
func privateEnv(t *testing.T, maxConns int32) (*env, *devdb.Cluster) {
	t.Helper()
	ctx := context.Background()
	c, err := devdb.Start(ctx, devdb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Remove() })
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE faults")
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	url := c.URL("faults")
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = skiplock.Migrate(ctx, pool, "skiplock")
	require.NoError(t, err)
	return setupEnv(t, url, pool), c
}

// setupEnv installs the test tables into a migrated database and registers
// the cleanup that kills every process the test started (before the
// database is dropped: cleanups run last-in first-out).
func setupEnv(t *testing.T, dbURL string, pool *pgxpool.Pool) *env {
	t.Helper()
	_, err := pool.Exec(context.Background(), setupSQL)
	require.NoError(t, err)
	c, err := skiplock.NewClient(pool, skiplock.Config{})
	require.NoError(t, err)
	e := &env{t: t, url: dbURL, pool: pool, client: c, owners: map[string]func(string) bool{}, gen: map[string]int{},
		enqueued: map[int64]enqueuedPayload{},
		logDir:   t.TempDir()} // before the cleanup below, so the logs outlive it
	t.Cleanup(e.killAll)
	return e
}

// appURL is the database URL with application_name set, which is how the
// audit trigger knows which process wrote a row.
func (e *env) appURL(app string) string {
	u, err := url.Parse(e.url)
	require.NoError(e.t, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// encrypt turns payload encryption on (docs/security.md "Payload
// encryption") the way a user does: a keyring file made as `skiplock keys
// new --file F` makes it, a producer client with Config.Encryption loaded
// from it, and, for every worker started from now on, its path in
// SKIPLOCK_ENCRYPTION_KEYS (faultworker loads it into Config.Encryption;
// `skiplock work` reads it as --encryption-keys' default). Every job
// enqueued from then on is sealed; the checker requires every version of
// its rows to hold an envelope and no plaintext, and each handler to see
// the plaintext enqueued.
func (e *env) encrypt() {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), "keyring.json")
	_, err := skiplock.KeyringAddKey(path, "")
	require.NoError(e.t, err)
	ring, err := skiplock.LoadKeyring(path)
	require.NoError(e.t, err)
	c, err := skiplock.NewClient(e.pool, skiplock.Config{Encryption: ring})
	require.NoError(e.t, err)
	e.client, e.keys = c, path
}

// keysEnv is the environment that hands a worker process the keyring.
func (e *env) keysEnv() []string {
	if e.keys == "" {
		return nil
	}
	return []string{"SKIPLOCK_ENCRYPTION_KEYS=" + e.keys}
}

// job is the payload the workers understand: per attempt, how long the job
// sleeps and what it then does (ok, fail, panic, exit); with Result, a run
// sets a result naming the job, its attempt and its worker (a failing one
// says them in its error). Marker, set by enqueueTo, makes each payload
// unique and findable: plainMarker and a number.
type job struct {
	Sleep  []int    `json:"sleep,omitempty"`
	Mode   []string `json:"mode,omitempty"`
	Result bool     `json:"result,omitempty"`
	Marker string   `json:"marker,omitempty"`
}

// enqueue commits n jobs to the default queue and returns their ids.
func (e *env) enqueue(n int, j job, maxAttempts int) []int64 {
	e.t.Helper()
	return e.enqueueTo(skiplock.DefaultQueue, n, j, maxAttempts)
}

func (e *env) enqueueTo(queue string, n int, j job, maxAttempts int) []int64 {
	e.t.Helper()
	ids := make([]int64, 0, n)
	for range n {
		e.mu.Lock()
		e.markers++
		j.Marker = plainMarker + strconv.Itoa(e.markers)
		e.mu.Unlock()
		raw, err := json.Marshal(j)
		require.NoError(e.t, err)
		r, err := e.client.Enqueue(context.Background(), skiplock.EnqueueParams{Queue: queue, Kind: "job", Payload: raw, MaxAttempts: maxAttempts})
		require.NoError(e.t, err)
		ids = append(ids, r.ID)
		e.mu.Lock()
		e.enqueued[r.ID] = enqueuedPayload{json: raw, sealed: e.keys != ""}
		e.mu.Unlock()
	}
	return ids
}

// awaiter waits for jobs from the test's process, as a web handler's or a
// script's process would: a client of its own over a pool of its own
// (connections named "awaiter", which faults may kill), whose LISTEN
// connection is named skiplock-wait while anything is awaited (none with
// PollOnly). Each caller's Wait calls are recorded for the checker
// (checkOpts.awaits).
type awaiter struct {
	client  *skiplock.Client
	wg      sync.WaitGroup
	calls   []*awaitCall // each written by its caller's goroutine until wg.Wait returns
	reReads atomic.Int64 // look-ups whose "gone" a second read contradicted (the client's warnings)
}

// reReadCounter counts the client's warnings that a second read found jobs
// the first reported gone (wait.go, confirmGone): each is a look-up that
// would have told a caller something untrue.
type reReadCounter struct{ n *atomic.Int64 }

func (r reReadCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("a second found ended or in flight")) {
		r.n.Add(1)
	}
	return len(p), nil
}

func (e *env) awaiter(pollOnly bool) *awaiter {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.url)
	require.NoError(e.t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "awaiter"
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(pool.Close)
	a := &awaiter{}
	c, err := skiplock.NewClient(pool, skiplock.Config{PollOnly: pollOnly, PollInterval: poll,
		Logger: slog.New(slog.NewTextHandler(reReadCounter{&a.reReads}, nil))})
	require.NoError(e.t, err)
	a.client = c
	return a
}

// wait starts a caller that awaits ids with one Wait call.
func (a *awaiter) wait(ctx context.Context, caller string, ids []int64) {
	call := &awaitCall{caller: caller, ids: ids}
	a.calls = append(a.calls, call)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ends, err := a.client.Wait(ctx, ids...)
		call.record(ends, err)
	}()
}

// waitInTurns starts a caller that awaits ids with Wait calls of at most
// turn each: each call ends with its context, and the next awaits the jobs
// the last did not report ended, until none is left or ctx ends. Every
// end is reported to it once, whichever call reported it.
func (a *awaiter) waitInTurns(ctx context.Context, caller string, ids []int64, turn time.Duration) {
	call := &awaitCall{caller: caller, ids: ids}
	a.calls = append(a.calls, call)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		left := ids
		for {
			tctx, cancel := context.WithTimeout(ctx, turn)
			ends, err := a.client.Wait(tctx, left...)
			cancel()
			call.record(ends, err)
			if err == nil || ctx.Err() != nil {
				return
			}
			left = left[:0:0]
			for _, end := range ends {
				if end.State == "" {
					left = append(left, end.ID)
				}
			}
		}
	}()
}

// done waits for every caller to return and gives their calls.
func (a *awaiter) done() []*awaitCall {
	a.wg.Wait()
	return a.calls
}

// record takes what one Wait call returned: the ends it reported (a job
// with no State did not end before the call's context did) and whether it
// returned cleanly.
func (c *awaitCall) record(ends []skiplock.JobEnd, err error) {
	for _, end := range ends {
		if end.State == "" {
			continue
		}
		c.reports = append(c.reports, jobEnd{id: end.ID, state: string(end.State), result: string(end.Result),
			reason: end.Reason, err: end.Error})
	}
	c.returned, c.err = err == nil, ""
	if err != nil {
		c.err = err.Error()
	}
}

// enqueuedPayloads returns a copy of what enqueueTo committed, for the
// checker.
func (e *env) enqueuedPayloads() map[int64]enqueuedPayload {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.enqueued)
}

// proc is one worker process.
type proc struct {
	name, app string
	cmd       *exec.Cmd
	log       string
	stdout    *bytes.Buffer
	done      chan struct{}
	err       error // after done
}

func (e *env) start(name, app, logName string, args []string, extraEnv ...string) *proc {
	e.t.Helper()
	logPath := filepath.Join(e.logDir, logName+".log")
	f, err := os.Create(logPath)
	require.NoError(e.t, err)
	p := &proc{name: name, app: app, log: logPath, stdout: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = f
	p.cmd.Env = append(os.Environ(), append([]string{"FW_DB=" + e.appURL("faultworker-child")}, extraEnv...)...)
	require.NoError(e.t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p
}

// worker starts a faultworker process (the Go library) named name; a
// restarted worker gets a new id (name.2, name.3, ...), as a new process
// would. It claims from the default queue with the test timings.
func (e *env) worker(name string, extra ...string) *proc {
	e.t.Helper()
	e.mu.Lock()
	e.gen[name]++
	id := fmt.Sprintf("fw-%s.%d", name, e.gen[name])
	e.owners[id] = func(lockedBy string) bool { return lockedBy == id }
	e.mu.Unlock()
	prog := e.workerProgram
	if prog == "" {
		prog = "faultworker"
	}
	args := []string{program(e.t, prog), "work", "-db", e.url, "-id", id,
		"-lease", lease.String(), "-heartbeat", heartbeat.String(), "-reaper", reaper.String(), "-poll", poll.String()}
	return e.start(name, id, id, append(args, extra...), e.keysEnv()...)
}

// execWorker starts `skiplock work --exec command`. Its connections carry
// application_name sx-NAME.N, and its WorkerID (hostname:pid:rand) is
// matched to it by pid.
func (e *env) execWorker(name, command string, extra ...string) *proc {
	e.t.Helper()
	e.mu.Lock()
	e.gen["exec:"+name]++
	app := fmt.Sprintf("sx-%s.%d", name, e.gen["exec:"+name])
	e.mu.Unlock()
	args := []string{program(e.t, "skiplock"), "work", "--exec", command}
	if !slices.Contains(extra, "--database-url") { // a test's own URL (a proxy's) replaces the harness's
		args = append(args, "--database-url", e.appURL(app))
	}
	p := e.start(name, app, app, append(args, extra...), e.keysEnv()...)
	pid := ":" + strconv.Itoa(p.cmd.Process.Pid) + ":"
	e.mu.Lock()
	e.owners[app] = func(lockedBy string) bool { return strings.Contains(lockedBy, pid) }
	e.mu.Unlock()
	return p
}

// own registers app as a process whose leases carry locked_by app (for
// tests that claim through the store under a made-up worker id).
func (e *env) own(app string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.owners[app] = func(lockedBy string) bool { return lockedBy == app }
}

// owns reports whether the connection named app belongs to the process
// whose lease is lockedBy.
func (e *env) owns(app, lockedBy string) bool {
	e.mu.Lock()
	f := e.owners[app]
	e.mu.Unlock()
	return f != nil && f(lockedBy)
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit; false on timeout.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill9 kills the process the way the OOM killer would and reaps it.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	p.signal(syscall.SIGKILL)
	require.True(t, p.wait(10*time.Second), "%s did not die", p.name)
}

// stats parses the counters a faultworker prints when it stops.
func (p *proc) stats(t *testing.T) map[string]int64 {
	t.Helper()
	var m map[string]int64
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(p.stdout.Bytes()), &m), "stats of %s: %q", p.name, p.stdout.String())
	return m
}

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// killAll kills what is still running and, if the test failed, shows the
// tail of every process's log. Any data race a worker reported fails the
// test: the workers are built with -race when the tests are.
func (e *env) killAll() {
	e.mu.Lock()
	procs := append([]*proc(nil), e.procs...)
	e.mu.Unlock()
	for _, p := range procs {
		if !p.exited() {
			p.signal(syscall.SIGCONT)
			p.signal(syscall.SIGKILL)
			p.wait(10 * time.Second)
		}
	}
	for _, p := range procs {
		text := p.logText()
		if strings.Contains(text, "DATA RACE") {
			e.t.Errorf("%s (%s) reported a data race:\n%s", p.name, p.app, tail(text, 8000))
		}
		if e.t.Failed() {
			e.t.Logf("---- log of %s (%s) ----\n%s", p.name, p.app, tail(text, 3000))
		}
	}
	// Children of killed `skiplock work --exec` processes are orphans; they
	// end on their own, but do not leave them running past the test.
	rows, err := e.pool.Query(context.Background(), "SELECT DISTINCT pid FROM public.runs WHERE NOT finished AND outcome IS NULL")
	if err == nil {
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil && pid != os.Getpid() && isOurChild(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		rows.Close()
	}
}

// isOurChild reports whether pid runs faultworker's child mode.
func isOurChild(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(b, []byte("faultworker\x00child"))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(e.t, e.pool.QueryRow(ctx, q, args...).Scan(&n), q)
	return n
}

// jobByMarker returns the id of the job in the hot table whose plaintext
// payload carries marker, if there is one.
func (e *env) jobByMarker(marker string) (int64, bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var id int64
	err := e.pool.QueryRow(ctx, `SELECT id FROM skiplock.jobs WHERE payload->>'marker' = $1`, marker).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false
	}
	require.NoError(e.t, err)
	return id, true
}

// tryCount is count for polling while the database may be away.
func (e *env) tryCount(q string, args ...any) (int, error) {
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := e.pool.QueryRow(ctx, q, args...).Scan(&n)
	return n, err
}

// waitDrained waits until the hot table is empty: every job finished.
func (e *env) waitDrained(timeout time.Duration) {
	e.t.Helper()
	waitFor(e.t, timeout, "the queue to drain", func() bool {
		n, err := e.tryCount("SELECT count(*) FROM skiplock.jobs")
		return err == nil && n == 0
	})
}

// inFlight returns the unfinished runs of the process whose worker id is
// id (Go workers) at this moment.
func (e *env) inFlight(worker string) int {
	return e.count("SELECT count(*) FROM public.runs WHERE worker = $1 AND outcome IS NULL", worker)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// payloadMode is how a scenario that runs in both modes (eachPayloadMode)
// enqueues: plain payloads, or sealed ones (env.encrypt), and how many jobs.
type payloadMode struct {
	sealed bool
	jobs   int
}

// eachPayloadMode runs scenario twice, as parallel subtests: "plain" with
// plainJobs jobs, and "sealed", payload encryption on for the producer and
// every worker, with sealedJobs (fewer: the same faults on a shorter queue,
// to keep the tier's wall time). The scenario makes its env and calls
// m.apply on it before it enqueues or starts a worker.
func eachPayloadMode(t *testing.T, plainJobs, sealedJobs int, scenario func(t *testing.T, m payloadMode)) {
	for _, m := range []payloadMode{{sealed: false, jobs: plainJobs}, {sealed: true, jobs: sealedJobs}} {
		name := "plain"
		if m.sealed {
			name = "sealed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			scenario(t, m)
		})
	}
}

// apply turns encryption on in e for the sealed mode.
func (m payloadMode) apply(e *env) {
	if m.sealed {
		e.encrypt()
	}
}

// requireChecked asserts that the checker's payload checks had something to
// check: every run's payload was compared with what was enqueued, and the
// rows written were all sealed (sealed mode) or held the plaintext marker
// the audit looks for (plain mode: the control that shows the audit would
// see plaintext).
func (m payloadMode) requireChecked(t *testing.T, r *report) {
	t.Helper()
	require.Equal(t, r.Runs, r.PayloadRuns, "runs whose payload was compared")
	if m.sealed {
		require.Positive(t, r.SealedWrites, "row versions written sealed")
		require.Zero(t, r.PlainWrites, "row versions written with plaintext")
	} else {
		require.Positive(t, r.PlainWrites, "row versions written with the plaintext marker")
		require.Zero(t, r.SealedWrites)
	}
}
