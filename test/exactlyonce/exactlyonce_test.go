// Package exactlyonce checks the promise of CompleteTx: a handler that does
// its database writes and its job's completion in one transaction applies
// them exactly once, while worker processes are killed with SIGKILL at random
// points, restarted, and frozen with SIGSTOP past their lease (so the reaper
// hands their jobs to another worker and the frozen one resumes holding a
// stale lease).
//
// The business table has no unique constraint on purpose: a constraint would
// turn a double application into an error and hide it. The test counts rows.
//
// EXACTLYONCE_JOBS (default 300) and EXACTLYONCE_KILLS (default 10) scale it.
package exactlyonce

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/gobuild"
)

var workerBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("exactlyonce: the fault tier (make test-faults); skipped with -short")
		return 0
	}
	dir, err := os.MkdirTemp("", "skiplock-exactlyonce-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	workerBin = filepath.Join(dir, "worker")
	if b, err := gobuild.Command("", workerBin, "./testdata/worker").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "exactlyonce: go build ./testdata/worker: %v\n%s", err, b)
		return 1
	}
	return m.Run()
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}

// fleet is the worker processes: slot i runs incarnation after incarnation.
type fleet struct {
	t     *testing.T
	url   string
	logs  *dbtest.LogBuffer
	procs []*exec.Cmd
	runs  []int
}

func (f *fleet) start(slot int) {
	f.t.Helper()
	f.runs[slot]++
	cmd := exec.Command(workerBin)
	cmd.Env = append(os.Environ(), "EO_DATABASE_URL="+f.url, fmt.Sprintf("EO_WORKER_ID=w%d.%d", slot, f.runs[slot]))
	cmd.Stderr = f.logs
	require.NoError(f.t, cmd.Start())
	f.procs[slot] = cmd
}

func (f *fleet) kill(slot int) {
	f.t.Helper()
	require.NoError(f.t, f.procs[slot].Process.Signal(syscall.SIGKILL))
	_ = f.procs[slot].Wait()
}

func (f *fleet) signal(slot int, sig syscall.Signal) {
	f.t.Helper()
	require.NoError(f.t, f.procs[slot].Process.Signal(sig))
}

func TestExactlyOnceUnderKillsAndFrozenWorkers(t *testing.T) {
	jobs := envInt(t, "EXACTLYONCE_JOBS", 300)
	kills := envInt(t, "EXACTLYONCE_KILLS", 10)
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		CREATE TABLE effects (n int NOT NULL, job_id bigint NOT NULL, worker text NOT NULL, token bigint NOT NULL);
		CREATE TABLE lease_lost (n int NOT NULL, worker text NOT NULL, token bigint NOT NULL)`)
	require.NoError(t, err)

	c, err := skiplock.NewClient(db.Pool, skiplock.Config{})
	require.NoError(t, err)
	ps := make([]skiplock.EnqueueParams, jobs)
	for i := range ps {
		ps[i] = skiplock.EnqueueParams{Kind: "eo.write", Payload: map[string]int{"n": i}, MaxAttempts: 50}
	}
	n, err := c.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	require.EqualValues(t, jobs, n)

	const slots = 3
	f := &fleet{t: t, url: db.URL, logs: &dbtest.LogBuffer{}, procs: make([]*exec.Cmd, slots), runs: make([]int, slots)}
	t.Cleanup(func() {
		for _, p := range f.procs {
			if p != nil && p.ProcessState == nil {
				_ = p.Process.Signal(syscall.SIGCONT)
				_ = p.Process.Kill()
				_ = p.Wait()
			}
		}
		if t.Failed() {
			t.Logf("worker logs:\n%s", f.logs.String())
		}
	})
	started := time.Now()
	for i := range slots {
		f.start(i)
	}
	remaining := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs").Scan(&n))
		return n
	}

	// Kill -9 a random worker every 80–200 ms and restart it at once; halfway
	// through, freeze a worker that holds running jobs for three leases, then
	// let it resume. The freeze must cost it its leases, or the test would
	// prove nothing about stale holders.
	var frozen []frozenLease
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(80+rand.IntN(120)) * time.Millisecond)
		slot := rand.IntN(slots)
		f.kill(slot)
		f.start(slot)
		if k == kills/2 {
			frozen = f.freezeBusy(ctx, db.Pool, slot)
		}
	}
	t.Logf("faults done after %s: %d kills, a freeze of %d leases; %d jobs left", time.Since(started).Round(time.Millisecond), kills, len(frozen), remaining())

	require.Eventually(t, func() bool { return remaining() == 0 }, 45*time.Second, 50*time.Millisecond,
		"the queue drains once the faults stop")
	// A worker restarted a moment ago may not handle SIGTERM yet: wait
	// until each has registered (it starts after installing its handler).
	for i := range slots {
		id := fmt.Sprintf("w%d.%d", i, f.runs[i])
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.workers WHERE id = $1", id).Scan(&n))
			return n == 1
		}, 15*time.Second, 20*time.Millisecond, "worker %s to start", id)
	}
	for i := range slots {
		f.signal(i, syscall.SIGTERM)
		require.NoError(t, f.procs[i].Wait(), "worker %d exits cleanly on SIGTERM", i)
	}

	var minRows, maxRows, withRows int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT min(c), max(c), count(*) FILTER (WHERE c > 0) FROM (
			SELECT g.n, count(e.n) AS c
			FROM generate_series(0, $1 - 1) AS g(n) LEFT JOIN effects AS e ON e.n = g.n
			GROUP BY g.n) AS per_job`, jobs).Scan(&minRows, &maxRows, &withRows))
	var dups []string
	rows, err := db.Pool.Query(ctx, `SELECT n, string_agg(worker || '#' || token, ', ') FROM effects GROUP BY n HAVING count(*) > 1 LIMIT 10`)
	require.NoError(t, err)
	for rows.Next() {
		var n int
		var who string
		require.NoError(t, rows.Scan(&n, &who))
		dups = append(dups, fmt.Sprintf("job n=%d applied by %s", n, who))
	}
	require.NoError(t, rows.Err())
	var dead, leaseLost, reclaimed int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs_dead").Scan(&dead))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM lease_lost").Scan(&leaseLost))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM effects e JOIN lease_lost l ON l.n = e.n").Scan(&reclaimed))
	// The frozen worker lost its leases: the jobs it held were applied
	// under other leases (and, above, exactly once).
	lostByFreeze := 0
	for _, l := range frozen {
		var others int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM effects WHERE job_id = $1 AND token <> $2", l.job, l.token).Scan(&others))
		lostByFreeze += others
	}
	t.Logf("%d jobs, %d kills, %s: business rows per job min=%d max=%d; the freeze cost %d of %d leases; %d stale completions refused (ErrLeaseLost)",
		jobs, kills, time.Since(started).Round(time.Millisecond), minRows, maxRows, lostByFreeze, len(frozen), leaseLost)

	require.Empty(t, dups, "no job applied twice")
	require.Equal(t, 1, minRows, "every job applied at least once")
	require.Equal(t, 1, maxRows, "no job applied more than once")
	require.Equal(t, jobs, withRows)
	require.Zero(t, dead, "nothing dead-lettered")
	require.NotEmpty(t, frozen, "no worker held a job to freeze")
	require.Positive(t, lostByFreeze, "the frozen worker lost no lease: the freeze proved nothing")
	require.Equal(t, leaseLost, reclaimed, "every job whose stale completion was refused was applied by its new owner")
	var takenOver int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM lease_lost l
		WHERE (SELECT count(*) FROM effects e WHERE e.n = l.n AND (e.worker, e.token) <> (l.worker, l.token)) = 1`).Scan(&takenOver))
	require.Equal(t, leaseLost, takenOver, "each refused stale completion's job was applied once, by another lease")
}

// frozenLease is a lease a frozen worker held.
type frozenLease struct{ job, token int64 }

// freezeBusy SIGSTOPs for three leases a worker that holds running jobs
// (the one after slot, or the next busy one, waiting for one to be busy:
// restarted workers need a moment to claim), then resumes it, and returns
// the leases it held when it was frozen.
func (f *fleet) freezeBusy(ctx context.Context, pool *pgxpool.Pool, after int) []frozenLease {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for i := range len(f.procs) {
			slot := (after + 1 + i) % len(f.procs)
			id := fmt.Sprintf("w%d.%d", slot, f.runs[slot])
			f.signal(slot, syscall.SIGSTOP)
			var held []frozenLease
			rows, err := pool.Query(ctx, "SELECT id, lease_token FROM skiplock.jobs WHERE state = 'running' AND locked_by = $1", id)
			require.NoError(f.t, err)
			for rows.Next() {
				var l frozenLease
				require.NoError(f.t, rows.Scan(&l.job, &l.token))
				held = append(held, l)
			}
			require.NoError(f.t, rows.Err())
			if len(held) == 0 {
				f.signal(slot, syscall.SIGCONT)
				continue
			}
			time.Sleep(3 * time.Second)
			f.signal(slot, syscall.SIGCONT)
			f.t.Logf("froze %s for 3s holding %d leases", id, len(held))
			return held
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
