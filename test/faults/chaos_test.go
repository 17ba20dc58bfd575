package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/devdb"
)

// TestChaos is a time-boxed, Jepsen-style run: producers enqueue for the
// whole duration through every path (Go API transactions that commit and
// that roll back, the SQL function from a plain connection, EnqueueMany's
// COPY), Go API and `skiplock work --exec` workers consume, each worker
// through its own TCP proxy (proxy_test.go), and every 2–6 s a random fault
// strikes: kill -9 of a worker (a replacement starts), SIGSTOP of a worker
// past its lease (then SIGCONT), a network stall of a worker past its lease
// (its proxy holds every byte, the process keeps running), a reset of every
// connection of a worker (its proxy drops them), pg_terminate_backend of a
// worker's pool connections, of the listeners or of the producers, or an
// immediate restart of the (private) database. With SKIPLOCK_CHAOS_FAILOVER
// set, the database has a synchronous streaming standby and most of those
// restarts (8 faults in 100) are failovers instead: the primary crashes, the
// standby is promoted and a new standby is built (see failover). About a quarter of the jobs
// carry a unique key (from a small set, so enqueues collide with jobs in
// flight) and a quarter an entity key (so claims must serialize them), and
// the checker also verifies, from the audit, that no two jobs with one unique
// key were ever live at once and no two jobs of one entity ever running at
// once. Then the producers stop, the queue drains and the checker verifies
// every invariant over every committed and rolled-back id.
//
// It runs only when SKIPLOCK_CHAOS is a duration (make chaos, make
// chaos-long). SKIPLOCK_CHAOS_SEED replays a run's random choices (the fault
// schedule and the payloads; the interleaving is the machine's).
// SKIPLOCK_CHAOS_REPORT names a file that receives the summary.
func TestChaos(t *testing.T) {
	spec := os.Getenv("SKIPLOCK_CHAOS")
	if spec == "" {
		t.Skip("set SKIPLOCK_CHAOS to a duration (e.g. 2m) to run the chaos test")
	}
	dur, err := time.ParseDuration(spec)
	require.NoError(t, err, "SKIPLOCK_CHAOS")
	require.Positive(t, dur, "SKIPLOCK_CHAOS")
	seed := time.Now().UnixNano()
	if s := os.Getenv("SKIPLOCK_CHAOS_SEED"); s != "" {
		seed, err = strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "SKIPLOCK_CHAOS_SEED")
	}
	const drainTimeout = 5 * time.Minute
	if dl, ok := t.Deadline(); ok && time.Until(dl) < dur+drainTimeout+time.Minute {
		t.Fatalf("SKIPLOCK_CHAOS=%s needs a test timeout of at least %s (go test -timeout)", dur, dur+drainTimeout+time.Minute)
	}
	t.Logf("chaos: duration %s, seed %d (replay with SKIPLOCK_CHAOS_SEED=%d)", dur, seed, seed)
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip("no PostgreSQL server binaries for a private cluster:", err)
	}

	ch := newChaos(t, seed)
	ch.startConsumers()
	ch.runProducers(dur)
	ch.drain(drainTimeout)
	ch.check(dur)
}

// Timing of the chaos run.
const (
	chaosGoConcurrency   = 8
	chaosExecConcurrency = 3
	chaosMaxAttempts     = 25
)

// chaosSQL adds, next to the harness's tables, a record of which job ids
// each EnqueueMany batch inserted (EnqueueMany returns only a count): a
// trigger copies the payload's tag, in the enqueueing transaction.
const chaosSQL = `
CREATE TABLE public.chaos_tags (job_id bigint NOT NULL, tag text NOT NULL);
CREATE INDEX ON public.chaos_tags (tag);
CREATE FUNCTION public.chaos_tag() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Not again for a job the ring's turn moves between generations.
    IF position('rotate_ring' in coalesce(current_query(), '')) > 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO public.chaos_tags (job_id, tag) VALUES (NEW.id, NEW.payload->>'tag');
    RETURN NULL;
END
$$;
CREATE TRIGGER chaos_tag AFTER INSERT ON skiplock.jobs
    FOR EACH ROW WHEN (NEW.payload ? 'tag') EXECUTE FUNCTION public.chaos_tag();
`

// chaosJob is the payload: the workers read sleep (ms); tag marks the jobs
// of one EnqueueMany batch.
type chaosJob struct {
	Sleep []int  `json:"sleep"`
	Tag   string `json:"tag,omitempty"`
}

// randomJob: mostly 0–50 ms, one in 200 runs 1–3 s.
func randomJob(rng *rand.Rand) chaosJob {
	if rng.IntN(200) == 0 {
		return chaosJob{Sleep: []int{1000 + rng.IntN(2001)}}
	}
	return chaosJob{Sleep: []int{rng.IntN(51)}}
}

// The keys of the chaos jobs: few enough that enqueues collide with jobs in
// flight (unique keys) and claims find another job of the entity running.
const (
	chaosUniqueKeys = 40
	chaosEntities   = 8
)

// randomParams is a chaos job's enqueue: a quarter carry a unique key and,
// independently, a quarter an entity key.
func randomParams(rng *rand.Rand, j chaosJob) skiplock.EnqueueParams {
	p := skiplock.EnqueueParams{Kind: "job", Payload: j, MaxAttempts: chaosMaxAttempts}
	if rng.IntN(4) == 0 {
		p.UniqueKey = fmt.Sprintf("u-%d", rng.IntN(chaosUniqueKeys))
	}
	if rng.IntN(4) == 0 {
		p.Entity = fmt.Sprintf("e-%d", rng.IntN(chaosEntities))
	}
	return p
}

// consumer is one worker slot; its process is replaced when it dies.
type consumer struct {
	name    string
	exec    bool
	p       *proc
	px      *proxy    // every connection of its processes goes through it
	lockBy  string    // LIKE pattern matching the locked_by of its leases
	stopped time.Time // SIGSTOP: when to SIGCONT; zero while running
}

// ledger is what the producers know about their jobs.
type ledger struct {
	mu          sync.Mutex
	committed   []int64
	rolledBack  []int64
	why         map[int64]string  // rolled-back id -> producer and the error that ended its transaction
	unknown     [][]int64         // ids per commit whose outcome is unknown
	bulkOK      map[string]int64  // EnqueueMany batch tag -> count it reported
	bulkUnknown map[string]int    // tag -> batch size, for calls that failed ambiguously
	errs        map[string]int    // producer -> errors (expected while faults strike)
	firstErr    map[string]string // producer -> an example
	txs         map[string]int    // producer -> transactions it finished
	duplicates  int               // enqueues with a unique key that returned a job in flight
}

func (l *ledger) fail(who string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs[who]++
	if _, ok := l.firstErr[who]; !ok {
		l.firstErr[who] = err.Error()
	}
}

// settle records the ids of one transaction given how its end went:
// committed, rolled back (by the client, or cut off before COMMIT was
// sent), or unknown (the connection died with COMMIT on the wire).
func (l *ledger) settle(who string, ids []int64, commitErr error, rolledBack bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.txs[who]++
	if l.why == nil {
		l.why = map[int64]string{}
	}
	note := func(how string) {
		for _, id := range ids {
			l.why[id] = who + " " + how
		}
	}
	switch {
	case rolledBack:
		l.rolledBack = append(l.rolledBack, ids...)
		note(fmt.Sprintf("rolled back (%d ids, at %s)", len(ids), time.Now().Format("15:04:05.000")))
	case commitErr == nil:
		l.committed = append(l.committed, ids...)
	case errors.Is(commitErr, pgx.ErrTxCommitRollback) || notSent(commitErr):
		// The server rolled back, or COMMIT never left the client.
		l.rolledBack = append(l.rolledBack, ids...)
		note(fmt.Sprintf("COMMIT failed as not committed (%T: %v, at %s)", commitErr, commitErr, time.Now().Format("15:04:05.000")))
	default:
		l.unknown = append(l.unknown, ids)
	}
}

// notSent reports whether err proves nothing reached the server: the
// connection was never made. pgconn.SafeToRetry is not enough: when the
// connection dies while pgx reads COMMIT's reply, pgx reports "conn
// closed" with SafeToRetry() true, though the database may well have
// committed (TestCommitReplyLost shows it). Anything else is unknown and
// is settled from the database after the run.
func notSent(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

type faultCounts struct {
	kill9, sigstop, restarts, failovers      int
	connFaults, connsKilled, listenersKilled int
	producerConnsKilled                      int
	stalls, drops, connsDropped              int // network faults (proxy)
	hits                                     int // faults that struck a process (or, restarts, any) with a job in flight
	hitsBy                                   map[string]int
	unexpectedExits                          int
}

type chaos struct {
	restartTimes []string // wall-clock crash and restart times, for the evidence log
	t            *testing.T
	e            *env
	cluster      *devdb.Cluster // the primary
	// standby is the primary's synchronous standby when the run fails over
	// (SKIPLOCK_CHAOS_FAILOVER), else nil.
	standby *devdb.Cluster
	rng     *rand.Rand
	seed    int64
	url     string

	cons    []*consumer
	execCmd string

	prodPool   *pgxpool.Pool
	prodClient *skiplock.Client
	l          *ledger
	f          faultCounts
}

func newChaos(t *testing.T, seed int64) *chaos {
	ctx := context.Background()
	var e *env
	var c, standby *devdb.Cluster
	if os.Getenv("SKIPLOCK_CHAOS_FAILOVER") != "" {
		e, c, standby = failoverEnv(t, 4)
	} else {
		e, c = privateEnv(t, 4)
	}
	url, pool := e.url, e.pool
	_, err := pool.Exec(ctx, chaosSQL)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, wfEffectsTable)
	require.NoError(t, err)

	// The producers' own pool, named so a fault can cut it.
	pcfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pcfg.ConnConfig.RuntimeParams["application_name"] = "chaos-producer"
	pcfg.MaxConns = 6
	ppool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(ppool.Close)
	pc, err := skiplock.NewClient(ppool, skiplock.Config{})
	require.NoError(t, err)

	return &chaos{t: t, e: e, cluster: c, standby: standby, rng: rand.New(rand.NewPCG(uint64(seed), 0x5eed)), seed: seed, url: url,
		execCmd: `"` + program(t, "faultworker") + `" child`, prodPool: ppool, prodClient: pc,
		l: &ledger{bulkOK: map[string]int64{}, bulkUnknown: map[string]int{}, errs: map[string]int{},
			firstErr: map[string]string{}, txs: map[string]int{}},
		f: faultCounts{hitsBy: map[string]int{}}}
}

// startConsumers starts two Go API workers and one `skiplock work --exec`,
// each connected through a proxy of its own (the exec worker's children,
// which only record runs, connect directly), and waits for their listeners.
func (ch *chaos) startConsumers() {
	program(ch.t, "skiplock") // build before the clock starts
	ch.cons = []*consumer{{name: "a"}, {name: "b"}, {name: "x", exec: true}}
	for _, c := range ch.cons {
		c.px = newProxy(ch.t, fmt.Sprintf("127.0.0.1:%d", ch.cluster.Port()))
		ch.launch(c)
	}
	waitFor(ch.t, 30*time.Second, "the listeners of the 3 workers", func() bool {
		n, err := ch.e.tryCount("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'skiplock-listener'")
		return err == nil && n == len(ch.cons)
	})
	for _, c := range ch.cons {
		require.Positive(ch.t, c.px.Open(), "%s does not connect through its proxy", c.p.app)
	}
}

// launch starts the consumer's process with its proxy's address for the
// database (a later -db overrides the harness's; a --database-url replaces it).
func (ch *chaos) launch(c *consumer) {
	c.stopped = time.Time{}
	if c.exec {
		// The harness names the process sx-NAME.N, N its next generation;
		// its application_name must be in the proxied URL too.
		ch.e.mu.Lock()
		app := fmt.Sprintf("sx-%s.%d", c.name, ch.e.gen["exec:"+c.name]+1)
		ch.e.mu.Unlock()
		c.p = ch.e.execWorker(c.name, ch.execCmd, "--lease", lease.String(), "--poll-interval", poll.String(),
			"--concurrency", strconv.Itoa(chaosExecConcurrency), "--drain-timeout", "10s",
			"--database-url", c.px.url(ch.e.appURL(app)))
		require.Equal(ch.t, app, c.p.app, "the exec worker's application_name")
		c.lockBy = "%:" + strconv.Itoa(c.p.cmd.Process.Pid) + ":%"
		return
	}
	c.p = ch.e.worker(c.name, "-concurrency", strconv.Itoa(chaosGoConcurrency), "-wf-queue", chaosWorkflowQueue, "-db", c.px.url(ch.e.url))
	c.lockBy = c.p.app
}

// inFlight counts the jobs a consumer holds a lease on and has started
// (its run recorded, not yet finished) at this moment; "%" counts all.
func (ch *chaos) inFlight(lockBy string) int {
	for range 5 {
		n, err := ch.e.tryCount(`SELECT count(*) FROM skiplock.jobs j
			JOIN public.runs r ON r.job_id = j.id AND r.lease_token = j.lease_token
			WHERE j.state = 'running' AND r.outcome IS NULL AND j.locked_by LIKE $1`, lockBy)
		if err == nil {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0
}

// terminate kills the backends whose application_name matches pattern.
func (ch *chaos) terminate(pattern string) int {
	for range 5 {
		n, err := ch.e.tryCount(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE $1 AND pid <> pg_backend_pid()) AS k`, pattern)
		if err == nil {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0
}

// supervise restarts consumers that died on their own (a supervisor's
// job) and resumes those whose SIGSTOP is over.
func (ch *chaos) supervise() {
	for _, c := range ch.cons {
		if !c.stopped.IsZero() && time.Now().After(c.stopped) {
			c.p.signal(syscall.SIGCONT)
			c.stopped = time.Time{}
		}
		if c.p.exited() {
			ch.f.unexpectedExits++
			ch.t.Logf("chaos: %s (%s) exited on its own (%v); restarting it. Log tail:\n%s", c.name, c.p.app, c.p.err, tail(c.p.logText(), 1500))
			ch.launch(c)
		}
	}
}

func (ch *chaos) hit(kind string, inflight int) {
	if inflight > 0 {
		ch.f.hits++
		ch.f.hitsBy[kind]++
	}
}

// fault strikes once, at random.
func (ch *chaos) fault() string {
	rng := ch.rng
	c := ch.cons[rng.IntN(len(ch.cons))]
	switch x := rng.IntN(100); {
	case x < 20: // kill -9, and a replacement, as a supervisor would start
		n := ch.inFlight(c.lockBy)
		c.p.kill9(ch.t)
		ch.f.kill9++
		ch.hit("kill -9", n)
		old := c.p.app
		ch.launch(c)
		return fmt.Sprintf("kill -9 %s (%d in flight), replaced by %s", old, n, c.p.app)
	case x < 36: // SIGSTOP past the lease
		if !c.stopped.IsZero() {
			return ""
		}
		n := ch.inFlight(c.lockBy)
		d := lease + time.Duration(500+rng.IntN(1500))*time.Millisecond
		c.p.signal(syscall.SIGSTOP)
		c.stopped = time.Now().Add(d)
		ch.f.sigstop++
		ch.hit("SIGSTOP", n)
		return fmt.Sprintf("SIGSTOP %s for %s (%d in flight)", c.p.app, d, n)
	case x < 52: // the worker's pool connections
		n := ch.inFlight(c.lockBy)
		k := ch.terminate(c.p.app)
		ch.f.connFaults++
		ch.f.connsKilled += k
		ch.hit("terminate", n)
		return fmt.Sprintf("terminated %d connections of %s (%d in flight)", k, c.p.app, n)
	case x < 64: // every listener
		n := ch.inFlight("%")
		k := ch.terminate("skiplock-listener")
		ch.f.connFaults++
		ch.f.connsKilled += k
		ch.f.listenersKilled += k
		ch.hit("terminate", n)
		return fmt.Sprintf("terminated %d listeners (%d in flight)", k, n)
	case x < 70: // the producers, mid-transaction or mid-COMMIT
		k := ch.terminate("chaos-%")
		ch.f.connFaults++
		ch.f.connsKilled += k
		ch.f.producerConnsKilled += k
		return fmt.Sprintf("terminated %d producer connections", k)
	case x < 80: // a network partition past the lease: nothing delivered, nothing closed
		if c.px.Stalled() {
			return ""
		}
		n := ch.inFlight(c.lockBy)
		d := lease + time.Duration(500+rng.IntN(1500))*time.Millisecond
		c.px.Stall(d)
		ch.f.stalls++
		ch.hit("stall", n)
		return fmt.Sprintf("stalled the network of %s for %s (%d in flight)", c.p.app, d, n)
	case x < 90: // a network reset of every connection of the worker
		n := ch.inFlight(c.lockBy)
		k := c.px.DropAll()
		ch.f.drops++
		ch.f.connsDropped += k
		ch.hit("drop", n)
		return fmt.Sprintf("reset %d connections of %s in its proxy (%d in flight)", k, c.p.app, n)
	case ch.standby != nil && x < 98: // failover to the synchronous standby
		return ch.failover()
	default: // immediate shutdown of the database, down 0.5–3 s
		n := ch.inFlight("%")
		down := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		ctx := context.Background()
		crashAt := time.Now()
		require.NoError(ch.t, ch.cluster.Crash(ctx))
		time.Sleep(down)
		require.NoError(ch.t, ch.cluster.Restart(ctx))
		ch.restartTimes = append(ch.restartTimes, crashAt.Format("15:04:05.000")+"–"+time.Now().Format("15:04:05.000"))
		ch.f.restarts++
		ch.hit("restart", n)
		return fmt.Sprintf("database crashed (immediate), down %s (%d in flight)", down.Round(time.Millisecond), n)
	}
}

// failover crashes the primary (immediate), promotes its synchronous
// standby after 0.5–3 s (an HA manager's detection time), moves the
// workers' proxies to it (a VIP move; producers and the exec workers'
// children follow through their multi-host URL), advances the lease
// tokens as the runbook's post-promotion hook does, and builds a new
// synchronous standby on the dead primary's port, so the multi-host URL
// still names both members and the next failover can go back.
func (ch *chaos) failover() string {
	ctx := context.Background()
	n := ch.inFlight("%")
	down := time.Duration(500+ch.rng.IntN(2500)) * time.Millisecond
	old, next := ch.cluster, ch.standby
	crashAt := time.Now()
	require.NoError(ch.t, old.Crash(ctx))
	time.Sleep(down)
	require.NoError(ch.t, next.Promote(ctx))
	for _, c := range ch.cons {
		c.px.SetTarget(fmt.Sprintf("127.0.0.1:%d", next.Port()))
	}
	ch.cluster = next
	_, err := ch.prodClient.LeaseTokensAdvance(ctx)
	for i := 0; err != nil && i < 50; i++ { // the producers' pool may hand out a connection to the dead primary first
		time.Sleep(100 * time.Millisecond)
		_, err = ch.prodClient.LeaseTokensAdvance(ctx)
	}
	require.NoError(ch.t, err)
	port := old.Port()
	require.NoError(ch.t, old.Remove())
	ch.f.failovers++
	s, err := next.StartStandby(ctx, devdb.StandbyOptions{Name: fmt.Sprintf("standby%d", ch.f.failovers), Synchronous: true, Port: port})
	require.NoError(ch.t, err)
	ch.t.Cleanup(func() { _ = s.Remove() })
	ch.standby = s
	ch.restartTimes = append(ch.restartTimes, "failover "+crashAt.Format("15:04:05.000")+"–"+time.Now().Format("15:04:05.000"))
	ch.hit("failover", n)
	return fmt.Sprintf("failover: primary crashed (immediate), standby promoted %s later, new standby streaming (%d in flight)",
		down.Round(time.Millisecond), n)
}

// runProducers runs the producers for dur while the faults strike, then
// stops them.
func (ch *chaos) runProducers(dur time.Duration) {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	producers := []struct {
		name string
		fn   func(ctx context.Context, rng *rand.Rand)
	}{
		{"api-commit", ch.apiProducer("api-commit", false, 25*time.Millisecond)},
		{"api-rollback", ch.apiProducer("api-rollback", true, 100*time.Millisecond)},
		{"sql", ch.sqlProducer(40 * time.Millisecond)},
		{"bulk", ch.bulkProducer(time.Second)},
		{"workflow", ch.workflowProducer(500 * time.Millisecond)},
	}
	for i, p := range producers {
		wg.Add(1)
		rng := rand.New(rand.NewPCG(uint64(ch.seed), uint64(i+1)))
		go func() {
			defer wg.Done()
			p.fn(ctx, rng)
		}()
	}

	start := time.Now()
	next := start.Add(ch.nextFaultIn())
	lastLog := start
	for time.Since(start) < dur {
		ch.supervise()
		if time.Now().After(next) {
			if what := ch.fault(); what != "" {
				ch.t.Logf("chaos %s: %s", time.Since(start).Round(time.Millisecond), what)
			}
			next = time.Now().Add(ch.nextFaultIn())
		}
		if time.Since(lastLog) >= 15*time.Second {
			lastLog = time.Now()
			backlog, _ := ch.e.tryCount("SELECT count(*) FROM skiplock.jobs")
			ch.l.mu.Lock()
			ch.t.Logf("chaos %s: committed %d, rolled back %d, unknown %d transactions; backlog %d; %d faults hit in-flight jobs",
				time.Since(start).Round(time.Second), len(ch.l.committed), len(ch.l.rolledBack), len(ch.l.unknown), backlog, ch.f.hits)
			ch.l.mu.Unlock()
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	wg.Wait()
}

func (ch *chaos) nextFaultIn() time.Duration {
	return time.Duration(2000+ch.rng.IntN(4001)) * time.Millisecond
}

// pace sleeps d, or less if ctx ends; false when it ended.
func pace(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// apiProducer enqueues 1–3 jobs per transaction with the Go API and commits
// (or, rollback, rolls back) every interval. Operations run on their own
// context: stopping the producers must not turn a commit into an unknown.
func (ch *chaos) apiProducer(who string, rollback bool, every time.Duration) func(context.Context, *rand.Rand) {
	return func(ctx context.Context, rng *rand.Rand) {
		for pace(ctx, every) {
			func() {
				octx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				tx, err := ch.prodPool.Begin(octx)
				if err != nil {
					ch.l.fail(who, err)
					return
				}
				ch.finishTx(octx, who, tx, 1+rng.IntN(3), rollback, func() (int64, bool, error) {
					r, err := ch.prodClient.EnqueueTx(octx, tx, randomParams(rng, randomJob(rng)))
					return r.ID, r.Inserted, err
				})
			}()
		}
	}
}

// chaosWorkflowQueue holds the chaos workflows' tasks, served by a second
// pool of the Go workers only (the exec worker cannot run them).
const chaosWorkflowQueue = "chaos_wf"

// workflowProducer enqueues a workflow every interval: a root that fans out
// three leaves at run time (each naps 100 ms on a timer) and a join, every
// task a checkpointed step, a StepTx and a CompleteTx (the fault worker's
// wfStep). Its jobs are the tasks' jobs, found at the end from the
// workflow tables (a workflow exists only if its enqueue committed).
func (ch *chaos) workflowProducer(every time.Duration) func(context.Context, *rand.Rand) {
	const who = "workflow"
	return func(ctx context.Context, rng *rand.Rand) {
		for pace(ctx, every) {
			octx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := ch.prodClient.EnqueueWorkflow(octx, skiplock.Workflow{Name: "chaos", Tasks: []skiplock.Task{{
				Name: "split", Queue: chaosWorkflowQueue, Kind: "wfstep", MaxAttempts: chaosMaxAttempts,
				Args: map[string]any{"sleep": rng.IntN(30), "fanout": 3, "nap": 100},
			}}})
			cancel()
			ch.l.mu.Lock()
			ch.l.txs[who]++
			ch.l.mu.Unlock()
			if err != nil {
				ch.l.fail(who, err)
			}
		}
	}
}

// finishTx enqueues n jobs in tx with enqueue, then rolls tx back (when
// rollback is set, or an enqueue failed) or commits it, and records the
// ids this transaction inserted in the ledger with how it ended. An
// enqueue whose unique key matched a job in flight inserted nothing: the
// id it returns is another transaction's job.
func (ch *chaos) finishTx(ctx context.Context, who string, tx pgx.Tx, n int, rollback bool, enqueue func() (int64, bool, error)) {
	var ids []int64
	for range n {
		id, inserted, err := enqueue()
		if err != nil {
			ch.l.fail(who, err)
			_ = tx.Rollback(ctx)
			ch.l.settle(who, ids, nil, true) // COMMIT never sent
			return
		}
		if !inserted {
			ch.l.mu.Lock()
			ch.l.duplicates++
			ch.l.mu.Unlock()
			continue
		}
		ids = append(ids, id)
	}
	if rollback {
		_ = tx.Rollback(ctx)
		ch.l.settle(who, ids, nil, true)
		return
	}
	err := tx.Commit(ctx)
	if err != nil {
		ch.l.fail(who, err)
	}
	ch.l.settle(who, ids, err, false)
}

// sqlProducer calls skiplock.enqueue from a plain pgx connection (not the
// client's pool), 1–2 jobs per transaction, one transaction in ten rolled
// back; it reconnects when the connection dies.
func (ch *chaos) sqlProducer(every time.Duration) func(context.Context, *rand.Rand) {
	const who = "sql"
	return func(ctx context.Context, rng *rand.Rand) {
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}()
		for pace(ctx, every) {
			func() {
				octx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if conn == nil || conn.IsClosed() {
					cfg, err := pgx.ParseConfig(ch.url)
					if err != nil {
						ch.l.fail(who, err)
						return
					}
					cfg.ConnectTimeout = 2 * time.Second
					cfg.RuntimeParams["application_name"] = "chaos-sql"
					if conn, err = pgx.ConnectConfig(octx, cfg); err != nil {
						conn = nil
						ch.l.fail(who, err)
						return
					}
				}
				tx, err := conn.Begin(octx)
				if err != nil {
					ch.l.fail(who, err)
					_ = conn.Close(octx)
					return
				}
				ch.finishTx(octx, who, tx, 1+rng.IntN(2), rng.IntN(10) == 0, func() (int64, bool, error) {
					// Entity keys only: skiplock.enqueue returns an id, not
					// whether it inserted, so unique keys stay with the Go
					// producers, which can tell.
					p := randomParams(rng, randomJob(rng))
					payload, _ := json.Marshal(p.Payload)
					var id int64
					err := tx.QueryRow(octx, `SELECT skiplock.enqueue(queue => 'default', kind => 'job',
						payload => $1::jsonb, max_attempts => $2::int, entity => NULLIF($3, ''))`,
						string(payload), chaosMaxAttempts, p.Entity).Scan(&id)
					inserted := err == nil
					return id, inserted, err
				})
			}()
		}
	}
}

// bulkProducer enqueues a batch of 20–60 jobs through EnqueueMany (COPY)
// every interval. Each batch carries a tag; its ids are read from
// chaos_tags after the run. A failed call whose failure does not prove
// nothing was sent is resolved the same way.
func (ch *chaos) bulkProducer(every time.Duration) func(context.Context, *rand.Rand) {
	const who = "bulk"
	return func(ctx context.Context, rng *rand.Rand) {
		for batch := 0; pace(ctx, every); batch++ {
			tag := fmt.Sprintf("bulk-%d-%d", ch.seed, batch)
			ps := make([]skiplock.EnqueueParams, 20+rng.IntN(41))
			for i := range ps {
				j := randomJob(rng)
				j.Tag = tag
				ps[i] = randomParams(rng, j)
			}
			octx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n, err := ch.prodClient.EnqueueMany(octx, ps)
			cancel()
			ch.l.mu.Lock()
			ch.l.txs[who]++
			switch {
			case err == nil:
				ch.l.bulkOK[tag] = n
			case notSent(err): // no connection: nothing was sent
			default:
				ch.l.bulkUnknown[tag] = len(ps)
			}
			ch.l.mu.Unlock()
			if err != nil {
				ch.l.fail(who, err)
			}
		}
	}
}

// drain resumes stopped and stalled workers, keeps the consumers alive
// until the queue is empty, then stops them with SIGTERM.
func (ch *chaos) drain(timeout time.Duration) {
	t := ch.t
	for _, c := range ch.cons {
		c.px.Resume()
		if !c.stopped.IsZero() {
			c.p.signal(syscall.SIGCONT)
			c.stopped = time.Time{}
		}
	}
	began := time.Now()
	for {
		ch.supervise()
		n, err := ch.e.tryCount("SELECT count(*) FROM skiplock.jobs")
		if err == nil && n == 0 {
			break
		}
		if time.Since(began) > timeout {
			t.Fatalf("chaos: the queue did not drain within %s (%d jobs left, err %v)", timeout, n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("chaos: drained %s after the producers stopped", time.Since(began).Round(time.Millisecond))
	time.Sleep(2 * poll) // anything that should not exist gets a chance to run
	for _, c := range ch.cons {
		c.p.signal(syscall.SIGTERM)
	}
	for _, c := range ch.cons {
		if !c.p.wait(30 * time.Second) {
			t.Errorf("chaos: %s did not stop after SIGTERM", c.p.app)
			continue
		}
		if c.p.err != nil {
			t.Errorf("chaos: %s exited with %v after SIGTERM:\n%s", c.p.app, c.p.err, tail(c.p.logText(), 2000))
		}
	}
}

// check resolves the unknown outcomes, runs the checker over every
// committed and rolled-back id and writes the summary.
func (ch *chaos) check(dur time.Duration) {
	t, e, l := ch.t, ch.e, ch.l
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()

	// The audit row of a job's insert is written in the enqueueing
	// transaction: it exists if and only if that transaction committed (the
	// jobs tables alone cannot tell: completed jobs are deleted).
	var unknownIDs []int64
	for _, ids := range l.unknown {
		unknownIDs = append(unknownIDs, ids...)
	}
	inserted := map[int64]bool{}
	rows, err := e.pool.Query(ctx, "SELECT DISTINCT job_id FROM public.audit WHERE tbl = 'jobs' AND op = 'insert' AND job_id = ANY($1)", unknownIDs)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		inserted[id] = true
	}
	require.NoError(t, rows.Err())
	unknownCommitted, unknownNot := 0, 0
	committed := append([]int64(nil), l.committed...)
	rolledBack := append([]int64(nil), l.rolledBack...)
	for _, ids := range l.unknown {
		for _, id := range ids {
			if inserted[id] {
				committed = append(committed, id)
				unknownCommitted++
			} else {
				rolledBack = append(rolledBack, id)
				unknownNot++
			}
		}
	}

	// EnqueueMany batches: a successful call's batch must all be there.
	byTag := map[string][]int64{}
	rows, err = e.pool.Query(ctx, "SELECT tag, job_id FROM public.chaos_tags")
	require.NoError(t, err)
	for rows.Next() {
		var tag string
		var id int64
		require.NoError(t, rows.Scan(&tag, &id))
		byTag[tag] = append(byTag[tag], id)
	}
	require.NoError(t, rows.Err())
	bulkJobs, bulkUnknownCommitted, bulkUnknownNot := 0, 0, 0
	for tag, ids := range byTag {
		n, ok := l.bulkOK[tag]
		_, unknown := l.bulkUnknown[tag]
		switch {
		case ok:
			if int64(len(ids)) != n {
				t.Errorf("EnqueueMany batch %s reported %d jobs inserted, %d are recorded", tag, n, len(ids))
			}
		case unknown:
			bulkUnknownCommitted++
		default:
			t.Errorf("EnqueueMany batch %s was inserted (%d jobs) though its call failed before sending anything", tag, len(ids))
		}
		committed = append(committed, ids...)
		bulkJobs += len(ids)
	}
	for tag, n := range l.bulkOK {
		if _, ok := byTag[tag]; !ok && n > 0 {
			t.Errorf("EnqueueMany batch %s reported %d jobs inserted, none is recorded", tag, n)
		}
	}
	for tag := range l.bulkUnknown {
		if _, ok := byTag[tag]; !ok {
			bulkUnknownNot++
		}
	}

	// The workflow producer's task jobs are committed jobs too, and they
	// take their ids from the same sequence: counted before the ids handed
	// out again below, or a rolled-back id the sequence gave a task job
	// after a crash reads as a rolled-back job that ran (a task put to
	// sleep by its timer runs twice).
	wfJobs := taskJobs(t, e)
	committed = append(committed, wfJobs...)

	// After a crash PostgreSQL may hand out again sequence values that only
	// uncommitted transactions had used: such an id is rolled back once and
	// committed later, and it is the committed job.
	isCommitted := map[int64]bool{}
	for _, id := range committed {
		isCommitted[id] = true
	}
	reissued := 0
	kept := rolledBack[:0]
	for _, id := range rolledBack {
		if isCommitted[id] {
			reissued++
			continue
		}
		kept = append(kept, id)
	}
	rolledBack = kept
	t.Logf("chaos producers: %d transactions %v; errors %v", sum(l.txs), l.txs, l.errs)
	for who, msg := range l.firstErr {
		t.Logf("chaos producer %s, first error: %s", who, msg)
	}

	// Evidence for any rolled-back id the audit shows inserted: which
	// producer gave it up and how, and every insert of that id (two inserts
	// would be a sequence value handed out again after a crash).
	rows, err = e.pool.Query(ctx, `SELECT job_id, count(*), string_agg(app || ' tx_now=' || to_char(tx_now, 'HH24:MI:SS.MS') ||
		' at=' || to_char(at, 'HH24:MI:SS.MS'), '; ' ORDER BY seq)
		FROM public.audit WHERE tbl = 'jobs' AND op = 'insert' AND job_id = ANY($1) GROUP BY job_id ORDER BY job_id`, rolledBack)
	require.NoError(t, err)
	for rows.Next() {
		var id, n int64
		var inserts string
		require.NoError(t, rows.Scan(&id, &n, &inserts))
		t.Logf("chaos evidence: job %d was given up by %s, but the audit holds %d insert(s): %s", id, l.why[id], n, inserts)
	}
	require.NoError(t, rows.Err())
	t.Logf("chaos: database restarts at %v", ch.restartTimes)

	checkStart := time.Now()
	r := checkInvariants(t, e, checkOpts{committed: committed, rolledBack: rolledBack})
	checkTook := time.Since(checkStart).Round(time.Millisecond)
	wfCheckStart := time.Now()
	wv := workflowViolations(t, e)
	wfCheckTook := time.Since(wfCheckStart).Round(time.Millisecond)
	t.Logf("chaos: the checker took %s, the workflow checker %s", checkTook, wfCheckTook)
	kinds := r.kinds()
	countV := func(ks ...string) int {
		n := 0
		for _, k := range ks {
			n += kinds[k]
		}
		return n
	}
	lost := countV(vLost, vNeverInserted, vLeftBehind)
	rolledRun := countV(vRolledBackRan, vUncommittedRan, vUncommittedInAudit)
	overlap := countV(vClaimOverlapsLease, vClaimWhileHeld, vRunOverlap)
	rolledRuns := 0
	for _, id := range rolledBack {
		rolledRuns += r.RunsPerJob[id]
	}
	if rolledRuns > 0 && rolledRun == 0 {
		rolledRun = rolledRuns
	}
	keyed := e.count("SELECT count(*) FROM public.audit WHERE tbl = 'jobs' AND op = 'insert' AND unique_key IS NOT NULL")
	entities := e.count("SELECT count(*) FROM public.audit WHERE tbl = 'jobs' AND op = 'insert' AND entity IS NOT NULL")
	entityReaped := e.count("SELECT count(*) FROM public.audit WHERE tbl = 'jobs' AND reaper AND entity IS NOT NULL")
	runs := e.count("SELECT count(*) FROM public.runs")
	execRuns := e.count("SELECT count(*) FROM public.runs WHERE worker NOT LIKE 'fw-%'")

	summary := fmt.Sprintf("chaos %s seed %d: committed %d (bulk %d), rolled back %d, unknown %d transactions "+
		"(resolved from the audit, in jobs: %d committed, %d not; EnqueueMany batches %d committed, %d not); "+
		"ids reissued after a crash %d; completed %d, dead-lettered %d %v; lost %d; rolled-back jobs run %d; "+
		"runs %d (%d by --exec workers), duplicate runs %d (%d jobs ran more than once), reaped leases %d; overlapping valid leases %d; "+
		"jobs with a unique key %d (enqueues that found one in flight %d), two live at once %d; jobs with an entity %d (leases reaped %d), two running at once %d; "+
		"holder writes checked per lease token %d; violations %d %v; "+
		"faults: %d kill -9, %d SIGSTOP, %d network stalls, %d network resets (%d connections), %d restarts, %d failovers, "+
		"%d killed connections in %d strikes (%d listeners, %d producer) "+
		"(%d faults hit in-flight jobs %v); workers that died on their own %d; checker %s, workflow checker %s",
		dur, ch.seed, r.Jobs, bulkJobs, len(rolledBack), len(l.unknown)+len(l.bulkUnknown),
		unknownCommitted, unknownNot, bulkUnknownCommitted, bulkUnknownNot,
		reissued, r.Completed, r.Dead, r.DeadReasons, lost, rolledRun,
		runs, execRuns, r.Runs-len(r.RunsPerJob), r.Reruns, r.Reaped, overlap,
		keyed, l.duplicates, kinds[vUniqueKeyTwice], entities, entityReaped, kinds[vEntityOverlap],
		r.TokenWrites, len(r.violations), kinds,
		ch.f.kill9, ch.f.sigstop, ch.f.stalls, ch.f.drops, ch.f.connsDropped, ch.f.restarts, ch.f.failovers, ch.f.connsKilled, ch.f.connFaults, ch.f.listenersKilled, ch.f.producerConnsKilled,
		ch.f.hits, ch.f.hitsBy, ch.f.unexpectedExits, checkTook, wfCheckTook)
	t.Log(summary)
	if path := os.Getenv("SKIPLOCK_CHAOS_REPORT"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(summary+"\n"), 0o644))
	}
	workflows := e.count("SELECT count(*) FROM skiplock.workflows")
	t.Logf("chaos workflows: %d workflows, %d task jobs, %d runs put to sleep by a timer; workflow violations %v",
		workflows, len(wfJobs), e.count("SELECT count(*) FROM public.runs WHERE outcome = 'sleep'"), wv)
	require.Positive(t, workflows, "no workflow was enqueued")
	require.Empty(t, wv, "workflow invariants")
	require.Positive(t, r.Jobs, "the producers committed nothing")
	require.Equal(t, r.Jobs, r.Completed+r.Dead, "every committed job is completed or dead-lettered")
	require.Positive(t, keyed, "no committed job had a unique key: the unique-key invariant was not exercised")
	require.Positive(t, entities, "no committed job had an entity: the entity invariant was not exercised")
	require.Positive(t, r.TokenWrites, "no holder write recorded its lease token: fencing was checked per process only")
	if ch.f.hits == 0 {
		t.Errorf("no fault struck a worker with a job in flight: the run proved nothing about in-flight jobs")
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
