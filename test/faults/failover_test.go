package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/devdb"
	"github.com/skiplock/skiplock/internal/store"
)

// failoverSettings keep two clusters small. fsync is off (a process crash
// keeps what the OS has; the test never crashes the OS) but
// synchronous_commit stays on: with it, the primary acknowledges a commit
// only once the synchronous standby has it.
var failoverSettings = map[string]string{"shared_buffers": "16MB", "fsync": "off", "full_page_writes": "off", "max_connections": "60"}

// failoverEnv starts a primary and a synchronous streaming standby, creates
// and migrates a database on the primary, and returns the test's world on
// the multi-host URL (both hosts, target_session_attrs=read-write): every
// process of the test, producers and workers, uses that URL. maxConns > 0
// caps the test's own pool.
func failoverEnv(t *testing.T, maxConns int32) (e *env, primary, standby *devdb.Cluster) {
	t.Helper()
	ctx := context.Background()
	primary, err := devdb.Start(ctx, devdb.Options{Settings: failoverSettings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Remove() })
	standby, err = primary.StartStandby(ctx, devdb.StandbyOptions{Name: "standby", Synchronous: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Remove() })
	admin, err := pgx.Connect(ctx, primary.URL("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE faults")
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))

	url := devdb.MultiHostURL("faults", primary, standby)
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
	return setupEnv(t, url, pool), primary, standby
}

// producer enqueues jobs until stopped, each with a unique key of its own.
// An enqueue that returned an id is acknowledged; one that returned an
// error may still have committed (the primary died between the commit and
// its answer), so its key is kept and looked up in the audit afterwards.
type producer struct {
	mu         sync.Mutex // guards the fields below
	acked      []int64
	ackedAt    []time.Time
	uncertain  []string
	errs       int
	rolledBack []int64
}

// rollbacks enqueues in transactions it rolls back, until stopped: none of
// those jobs may ever run, failover or not.
func (p *producer) rollbacks(ctx context.Context, e *env, every time.Duration) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if tx, err := e.pool.Begin(cctx); err == nil {
			r, err := e.client.EnqueueTx(cctx, tx, skiplock.EnqueueParams{Kind: "job", Payload: job{Sleep: []int{10}}, MaxAttempts: 20})
			_ = tx.Rollback(context.WithoutCancel(cctx))
			if err == nil {
				p.mu.Lock()
				p.rolledBack = append(p.rolledBack, r.ID)
				p.mu.Unlock()
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

func (p *producer) run(ctx context.Context, e *env, name string, every time.Duration) {
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("%s-%d", name, i)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := e.client.Enqueue(cctx, skiplock.EnqueueParams{Kind: "job", Payload: job{Sleep: []int{120}},
			MaxAttempts: 20, UniqueKey: key})
		cancel()
		p.mu.Lock()
		if err == nil {
			p.acked = append(p.acked, r.ID)
			p.ackedAt = append(p.ackedAt, time.Now())
		} else {
			// Even a cancelled enqueue may have committed.
			p.uncertain = append(p.uncertain, key)
			p.errs++
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

// TestFailover runs producers and workers (two on the Go library, one
// `skiplock work --exec`) on a multi-host URL against a primary with a
// synchronous standby, crashes the primary (immediate: no checkpoint, every
// connection cut) in the middle of the load, promotes the standby a second
// later, as an HA manager would, and lets the run go on. The workers must
// follow on their own (pools and listeners reconnect to the promoted
// standby), and the fault suite's checker then holds every invariant over
// the whole run: no acknowledged enqueue lost, no job run that was never
// committed, nothing from a rolled-back transaction run (a third producer
// rolls back its enqueues), one fenced lease holder at a time, attempts
// within bounds.
// Jobs run twice are the executions the crash cut short (their completion
// never reached the new primary) or whose leases expired during the outage.
func TestFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip("no PostgreSQL server binaries for a private cluster:", err)
	}
	e, primary, standby := failoverEnv(t, 0)
	ws := []*proc{e.worker("a"), e.worker("b"),
		e.execWorker("x", `"`+program(t, "faultworker")+`" child`, "--lease", lease.String(),
			"--poll-interval", poll.String(), "--concurrency", "2", "--drain-timeout", "10s")}
	listeners := func() (int, error) {
		return e.tryCount("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skiplock-listener'")
	}
	waitFor(t, 30*time.Second, "the three listeners", func() bool { n, err := listeners(); return err == nil && n == 3 })

	pctx, stopProducers := context.WithCancel(ctx)
	prods := []*producer{{}, {}}
	var wg sync.WaitGroup
	for i, p := range prods {
		wg.Go(func() { p.run(pctx, e, fmt.Sprintf("p%d", i), 20*time.Millisecond) })
	}
	rb := &producer{}
	wg.Go(func() { rb.rollbacks(pctx, e, 50*time.Millisecond) })
	defer func() { stopProducers(); wg.Wait() }()

	waitFor(t, 30*time.Second, "progress before the failover", func() bool {
		n, err := e.tryCount("SELECT count(*) FROM public.runs WHERE outcome = 'ok'")
		return err == nil && n >= 60
	})
	inflight := e.count("SELECT count(*) FROM public.runs WHERE outcome IS NULL")
	crashAt := time.Now()
	require.NoError(t, primary.Crash(ctx))
	crashDone := time.Now() // every commit after this is the new primary's
	// The HA manager's detection time, longer than the leases: the
	// leases held at the crash expire before the new primary takes writes,
	// so its reapers hand them back and the old holders' late writes meet
	// the fence.
	time.Sleep(lease + time.Second)
	promotedAt := time.Now()
	require.NoError(t, standby.Promote(ctx))
	t.Logf("failover: primary crashed with %d executions in flight; standby promoted %s later (promote took %s)",
		inflight, promotedAt.Sub(crashAt).Round(time.Millisecond), time.Since(promotedAt).Round(time.Millisecond))

	waitFor(t, 30*time.Second, "the listeners to follow the new primary", func() bool { n, err := listeners(); return err == nil && n == 3 })
	var firstDone time.Time
	waitFor(t, 30*time.Second, "a job completed on the new primary", func() bool {
		err := e.pool.QueryRow(ctx, `SELECT min(at) FROM public.audit WHERE at > $1
			AND ((tbl = 'jobs' AND op = 'delete') OR tbl = 'jobs_done')`, crashDone).Scan(&firstDone)
		return err == nil && !firstDone.IsZero()
	})
	time.Sleep(3 * time.Second) // keep producing on the new primary
	stopProducers()
	wg.Wait()
	e.waitDrained(45 * time.Second)

	for _, p := range ws {
		require.False(t, p.exited(), "%s died with the primary: %s", p.app, tail(p.logText(), 2000))
		p.signal(syscall.SIGTERM)
	}
	for _, p := range ws {
		require.True(t, p.wait(15*time.Second), "%s did not drain", p.app)
		require.NoError(t, p.err, "%s exit", p.app)
	}
	for _, p := range ws[:2] {
		log := p.logText()
		require.Contains(t, log, "listener reconnected", "%s did not log its listener's reconnect", p.app)
		require.Contains(t, log, fmt.Sprintf("server=127.0.0.1:%d", standby.Port()), "%s reconnected elsewhere", p.app)
	}

	// What the producers committed: every acknowledged id, plus the
	// uncertain enqueues the audit shows committed (the crash cut their
	// answer, not their commit).
	var committed []int64
	var uncertain []string
	nBefore, nAfter := 0, 0
	for _, p := range prods {
		committed = append(committed, p.acked...)
		for _, at := range p.ackedAt {
			if at.Before(crashDone) {
				nBefore++
			} else {
				nAfter++
			}
		}
		uncertain = append(uncertain, p.uncertain...)
	}
	rows, err := e.pool.Query(ctx, `SELECT DISTINCT job_id FROM public.audit WHERE tbl = 'jobs' AND op = 'insert'
		AND unique_key = ANY($1)`, uncertain)
	require.NoError(t, err)
	cutCommitted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	committed = append(committed, cutCommitted...)
	require.Positive(t, nAfter, "no enqueue was acknowledged by the new primary")

	// A rolled-back enqueue's id can be handed out again by the new
	// primary (the id sequence's WAL of a transaction that never committed
	// need not reach the standby): such an id belongs to the committed job
	// now, not to the rolled-back one.
	isCommitted := map[int64]bool{}
	for _, id := range committed {
		isCommitted[id] = true
	}
	var rolledBack []int64
	reissued := 0
	for _, id := range rb.rolledBack {
		if isCommitted[id] {
			reissued++
			continue
		}
		rolledBack = append(rolledBack, id)
	}
	require.NotEmpty(t, rolledBack, "no enqueue was rolled back")
	r := checkInvariants(t, e, checkOpts{committed: committed, rolledBack: rolledBack})
	require.Equal(t, len(committed), r.Completed, "every committed job completed once")
	t.Logf("failover: %d jobs acknowledged before the crash, %d after; %d enqueues failed during the outage, of which %d had committed (found in the audit) and ran; lost 0",
		nBefore, nAfter, len(uncertain), len(cutCommitted))
	t.Logf("failover: %d enqueues rolled back, run 0 (%d of their ids handed out again by the new primary to committed jobs)",
		len(rolledBack), reissued)
	t.Logf("failover: %d jobs ran more than once (executions cut by the crash or whose lease expired during the outage: rerun under a new lease, the old holder fenced off); %d leases reaped",
		r.Reruns, r.Reaped)
	t.Logf("failover: first job completed on the new primary %s after the crash (%s after the promote command)",
		firstDone.Sub(crashAt).Round(time.Millisecond), firstDone.Sub(promotedAt).Round(time.Millisecond))
}

// TestAsyncFailoverLosesTheTail shows, deterministically, what a failover to
// an asynchronous standby loses and what it does to the fencing tokens, and
// that the runbook's token advance (docs/operations.md, "Failover") restores
// the fence. The standby is stopped, so the primary's last commits never
// reach it (the replication lag of a real async standby, made certain); the
// primary, alone, acknowledges an enqueue and a claim of every job; then it
// crashes and the standby is promoted.
func TestAsyncFailoverLosesTheTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip("no PostgreSQL server binaries for a private cluster:", err)
	}
	primary, err := devdb.Start(ctx, devdb.Options{Settings: failoverSettings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Remove() })
	standby, err := primary.StartStandby(ctx, devdb.StandbyOptions{Name: "async"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Remove() })
	url := devdb.MultiHostURL("postgres", primary, standby)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = skiplock.Migrate(ctx, pool, "skiplock")
	require.NoError(t, err)
	client, err := skiplock.NewClient(pool, skiplock.Config{})
	require.NoError(t, err)
	st := store.New("skiplock")
	count := func(q string) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, q).Scan(&n))
		return n
	}

	const n = 50 // more claims than one WAL record of the token sequence covers (32)
	for range n {
		_, err := client.Enqueue(ctx, skiplock.EnqueueParams{Kind: "job"})
		require.NoError(t, err)
	}
	sconn, err := pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the standby to replay the jobs", func() bool {
		var c int
		return sconn.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs").Scan(&c) == nil && c == n
	})
	require.NoError(t, sconn.Close(ctx))
	require.NoError(t, standby.Stop(ctx))

	// The tail only the old primary ever has.
	late, err := client.Enqueue(ctx, skiplock.EnqueueParams{Kind: "job"})
	require.NoError(t, err, "the primary acknowledges an enqueue its standby never receives")
	// The n jobs the standby has first, then the late one on its own: the
	// tokens follow the order the claim's update reaches its rows in, which
	// for jobs in different generations of the ring (migration 016) is the
	// partitions' order, not the ids'; claimed apart, the n get the same
	// tokens in the same order on both timelines whatever generation the
	// late one landed in.
	res, err := st.Claim(ctx, pool, store.ClaimRequest{Queues: []string{skiplock.DefaultQueue}, Batch: n, WorkerID: "w1", Lease: time.Minute})
	require.NoError(t, err)
	old := res.Jobs
	require.Equal(t, n, len(old))
	res, err = st.Claim(ctx, pool, store.ClaimRequest{Queues: []string{skiplock.DefaultQueue}, Batch: 1, WorkerID: "w1", Lease: time.Minute})
	require.NoError(t, err)
	lateClaim := res.Jobs
	require.Len(t, lateClaim, 1)
	require.Equal(t, late.ID, lateClaim[0].ID)
	old = append(old, lateClaim[0])

	require.NoError(t, primary.Crash(ctx))
	require.NoError(t, standby.Restart(ctx))
	require.NoError(t, standby.Promote(ctx))
	pool.Reset() // drop the connections to the dead primary (each would fail once)

	// Lost: the acknowledged enqueue, and every claim (the jobs are ready
	// again while w1 may still be running them).
	require.Zero(t, count(fmt.Sprintf("SELECT count(*) FROM skiplock.jobs WHERE id = %d", late.ID)), "the acknowledged enqueue is lost")
	require.Equal(t, n, count("SELECT count(*) FROM skiplock.jobs WHERE state = 'ready'"), "the claims are lost")

	// The same worker claims again on the new primary: the sequence hands
	// out the same tokens, so the new leases equal the lost ones, and the
	// fence cannot tell the lost timeline's holder from the current one.
	res, err = st.Claim(ctx, pool, store.ClaimRequest{Queues: []string{skiplock.DefaultQueue}, Batch: n + 1, WorkerID: "w1", Lease: time.Minute})
	require.NoError(t, err)
	again := res.Jobs
	oldToken := map[int64]int64{}
	var staleLeases []store.Lease
	for _, j := range old {
		oldToken[j.ID] = j.LeaseToken
		if j.ID != late.ID {
			staleLeases = append(staleLeases, store.Lease{ID: j.ID, Token: j.LeaseToken})
		}
	}
	same := 0
	for _, j := range again {
		if oldToken[j.ID] == j.LeaseToken {
			same++
		}
	}
	require.Equal(t, n, same, "without the token advance, the new primary reissues the lost leases' tokens")
	held, err := st.Heartbeat(ctx, pool, staleLeases, nil, time.Minute, "w1")
	require.NoError(t, err)
	require.Equal(t, n, len(held), "and the lost timeline's leases pass the fence")

	// The runbook's advance (skiplock failover advance-tokens), then a fresh claim: every new token is above
	// every token the old primary handed out, and the lost leases are fenced
	// off.
	advanced, err := client.LeaseTokensAdvance(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE skiplock.jobs SET state = 'ready', locked_by = NULL, lease_token = NULL, lease_expires_at = NULL")
	require.NoError(t, err) // as the reaper would once the leases expire
	res, err = st.Claim(ctx, pool, store.ClaimRequest{Queues: []string{skiplock.DefaultQueue}, Batch: n + 1, WorkerID: "w1", Lease: time.Minute})
	require.NoError(t, err)
	fresh := res.Jobs
	require.Equal(t, n, len(fresh))
	var maxOld int64
	for _, tok := range oldToken {
		maxOld = max(maxOld, tok)
	}
	for _, j := range fresh {
		require.Greater(t, j.LeaseToken, maxOld, "job %d: a token at or below the old primary's", j.ID)
		require.Greater(t, j.LeaseToken, advanced)
	}
	held, err = st.Heartbeat(ctx, pool, staleLeases, nil, time.Minute, "w1")
	require.NoError(t, err)
	require.Empty(t, held, "after the advance the lost timeline's leases are fenced off")
	t.Logf("async failover: lost 1 acknowledged enqueue and %d claims; %d of %d reissued leases equal to lost ones before the token advance, 0 after",
		n, same, n)
}
