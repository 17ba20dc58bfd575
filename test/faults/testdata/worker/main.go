// Command faultworker is the worker process of the fault-injection tests in
// test/faults. It has two modes:
//
//	faultworker work  -db URL -id NAME [flags]   a skiplock worker (the Go library)
//	faultworker child                            one `skiplock work --exec` job
//
// Both record every execution in the table runs of the same database: a row
// is inserted (in its own transaction) before the work starts and updated
// after it, so the tests can count executions per job and see which ones
// were interrupted; the row keeps the payload the handler saw. With
// SKIPLOCK_ENCRYPTION_KEYS naming a keyring file (as for `skiplock work`),
// the worker opens sealed payloads with it (Config.Encryption). What a job
// does is in its payload:
//
//	{"sleep": [ms per attempt...], "mode": ["ok"|"fail"|"panic"|"exit"...], "result": bool}
//
// The last element of each list applies to every later attempt. With
// "result", a successful run sets a result naming the job, the attempt and
// the worker (SetResult), and a failing one says them in its error: the
// awaits' check tells one run's end from another's.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: faultworker work|child [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "work":
		err = work(os.Args[2:])
	case "child":
		err = child()
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultworker:", err)
		os.Exit(1)
	}
}

// spec is a job's payload: what each attempt does.
type spec struct {
	Sleep  []int    `json:"sleep"`
	Mode   []string `json:"mode"`
	Result bool     `json:"result"`
}

// runResult is what a run with "result" sets.
type runResult struct {
	Job     int64  `json:"job"`
	Attempt int    `json:"attempt"`
	Worker  string `json:"worker"`
}

func (s spec) at(attempt int) (time.Duration, string) {
	pick := func(n int) int { return min(max(attempt-1, 0), n-1) }
	d, mode := time.Duration(0), "ok"
	if len(s.Sleep) > 0 {
		d = time.Duration(s.Sleep[pick(len(s.Sleep))]) * time.Millisecond
	}
	if len(s.Mode) > 0 {
		mode = s.Mode[pick(len(s.Mode))]
	}
	return d, mode
}

// persist retries fn while the database is unreachable (a restart, a killed
// connection), for at most 15s or until ctx is done.
func persist(ctx context.Context, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := fn(qctx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startRun records that an execution starts. The nonce makes the retry of
// an insert whose commit was cut off (a database crash right after COMMIT)
// land on the same row instead of recording one execution twice.
// payload is the job's payload as the handler got it, recorded for the
// checker to compare with what was enqueued.
func startRun(ctx context.Context, pool *pgxpool.Pool, id int64, attempt int, worker string, token int64, payload []byte) (int64, error) {
	var run int64
	nonce := rand.Int64()
	err := persist(ctx, func(ctx context.Context) error {
		return pool.QueryRow(ctx, `INSERT INTO public.runs (job_id, attempt, worker, lease_token, pid, nonce, payload)
			VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)
			ON CONFLICT (nonce) DO UPDATE SET nonce = EXCLUDED.nonce RETURNING id`,
			id, attempt, worker, token, os.Getpid(), nonce, string(payload)).Scan(&run)
	})
	return run, err
}

func endRun(ctx context.Context, pool *pgxpool.Pool, run int64, outcome string) error {
	return persist(ctx, func(ctx context.Context) error {
		_, err := pool.Exec(ctx, `UPDATE public.runs SET finished = ($2 = 'ok'), outcome = $2,
			finished_at = clock_timestamp() WHERE id = $1`, run, outcome)
		return err
	})
}

func work(args []string) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	db := fs.String("db", os.Getenv("FW_DB"), "database URL")
	id := fs.String("id", "", "worker id (also the application_name of its connections)")
	queue := fs.String("queue", "default", "queue")
	concurrency := fs.Int("concurrency", 4, "concurrency")
	batch := fs.Int("batch", 0, "batch size")
	lease := fs.Duration("lease", 2*time.Second, "lease")
	heartbeat := fs.Duration("heartbeat", 500*time.Millisecond, "heartbeat interval")
	reaper := fs.Duration("reaper", 500*time.Millisecond, "reaper interval (negative: off)")
	poll := fs.Duration("poll", 500*time.Millisecond, "poll interval")
	backoff := fs.Duration("backoff", 200*time.Millisecond, "retry delay")
	drain := fs.Duration("drain", 10*time.Second, "drain timeout at SIGTERM")
	archive := fs.Bool("archive", false, "archive completed jobs into jobs_done")
	tenantCap := fs.Int("tenant-cap", 0, "the pool's tenant cap (0: plain claim order)")
	wfQueue := fs.String("wf-queue", "", "a queue of workflow tasks served by a second pool of 3 (empty: none)")
	keys := fs.String("encryption-keys", os.Getenv("SKIPLOCK_ENCRYPTION_KEYS"), "keyring file: open sealed payloads")
	self := fs.Int("self", 0, "jobs this worker enqueues itself after Start, one at a time (Enqueue hands them to its idle pool)")
	selfMarker := fs.String("self-marker", "", "the marker of self-enqueued jobs, followed by each one's index")
	selfSleep := fs.Int("self-sleep", 400, "each self-enqueued job's sleep (ms)")
	selfGap := fs.Duration("self-gap", 30*time.Millisecond, "the pause between self-enqueued jobs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ring *skiplock.Keyring
	if *keys != "" {
		var err error
		if ring, err = skiplock.LoadKeyring(*keys); err != nil {
			return err
		}
	}
	if *db == "" || *id == "" {
		return errors.New("-db and -id are required")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(*db)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(*concurrency + 6)
	if *wfQueue != "" {
		cfg.MaxConns += 4
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = *id
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	cfg.ConnConfig.Tracer = tokenTracer{} // the audit learns each lease write's token (trace.go)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pools := []skiplock.WorkerPool{{Queues: []string{*queue}, Concurrency: *concurrency, BatchSize: *batch, TenantCap: *tenantCap}}
	if *wfQueue != "" {
		pools = append(pools, skiplock.WorkerPool{Queues: []string{*wfQueue}, Concurrency: 3})
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{
		Logger: log, WorkerID: *id, LeaseDuration: *lease, HeartbeatInterval: *heartbeat,
		ReaperInterval: *reaper, PollInterval: *poll, ArchiveCompleted: *archive,
		Backoff:    func(int) time.Duration { return *backoff },
		Pools:      pools,
		Encryption: ring,
	})
	if err != nil {
		return err
	}
	err = skiplock.Handle(c, "job", func(ctx context.Context, j *skiplock.Job[spec]) error {
		run, err := startRun(ctx, pool, j.ID, j.Attempt, j.WorkerID, j.LeaseToken, j.Payload)
		if err != nil {
			return fmt.Errorf("record run: %w", err)
		}
		d, mode := j.Args.at(j.Attempt)
		switch mode {
		case "exit": // the process dies mid-job, as on an OOM kill
			time.Sleep(d)
			os.Exit(3)
		case "kill":
			time.Sleep(d)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			cause := context.Cause(ctx)
			_ = endRun(context.WithoutCancel(ctx), pool, run, "ctx: "+cause.Error())
			return cause
		}
		switch mode {
		case "panic":
			_ = endRun(ctx, pool, run, "panic")
			panic(fmt.Sprintf("poison job %d", j.ID))
		case "fail":
			_ = endRun(ctx, pool, run, "fail")
			if j.Args.Result {
				return fmt.Errorf("failing on purpose: job %d, attempt %d, %s", j.ID, j.Attempt, j.WorkerID)
			}
			return errors.New("failing on purpose")
		}
		if err := endRun(ctx, pool, run, "ok"); err != nil {
			return fmt.Errorf("record run end: %w", err)
		}
		if j.Args.Result {
			return skiplock.SetResult(ctx, runResult{Job: j.ID, Attempt: j.Attempt, Worker: j.WorkerID})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := skiplock.Handle(c, "wfstep", func(ctx context.Context, j *skiplock.Job[wfSpec]) error {
		return wfStep(ctx, c, pool, j)
	}); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := c.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "faultworker: started", *id)
	if *self > 0 {
		go enqueueSelf(ctx, c, *selfMarker, *self, *selfSleep, *selfGap)
	}
	<-sigs
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, *drain)
		defer cancel()
		stopped <- c.Stop(sctx)
	}()
	select {
	case err = <-stopped:
	case <-sigs:
		err = c.StopAndCancel(ctx)
	}
	st := c.Stats()
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"claimed": st.Claimed, "completed": st.Completed, "failed": st.Failed,
		"dead": st.DeadLettered, "lease_lost": st.LeaseLost,
	})
	return err
}

// child runs one job for `skiplock work --exec`: the payload on stdin, the
// job in SKIPLOCK_* variables, the database in FW_DB.
func child() error {
	ctx := context.Background()
	var s spec
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	id, _ := strconv.ParseInt(os.Getenv("SKIPLOCK_JOB_ID"), 10, 64)
	attempt, _ := strconv.Atoi(os.Getenv("SKIPLOCK_JOB_ATTEMPT"))
	token, _ := strconv.ParseInt(os.Getenv("SKIPLOCK_JOB_LEASE_TOKEN"), 10, 64)
	cfg, err := pgxpool.ParseConfig(os.Getenv("FW_DB"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["application_name"] = "faultworker-child"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	run, err := startRun(ctx, pool, id, attempt, os.Getenv("SKIPLOCK_WORKER_ID"), token, body)
	if err != nil {
		return err
	}
	d, mode := s.at(attempt)
	time.Sleep(d)
	switch mode {
	case "fail":
		_ = endRun(ctx, pool, run, "fail")
		return errors.New("failing on purpose")
	case "exit":
		os.Exit(3)
	}
	return endRun(ctx, pool, run, "ok")
}

// wfSpec is the payload of a workflow task of the fault tests
// (TestKill9MidWorkflow): how long to pause between its steps, and, for the
// task that fans out, how many leaves to add (with a join after them).
type wfSpec struct {
	Sleep    int  `json:"sleep"`
	Fanout   int  `json:"fanout"`
	Value    int  `json:"value"`
	Leaves   int  `json:"leaves"`             // the join: how many leaves' outputs to sum
	Nap      int  `json:"nap,omitempty"`      // ms: Sleep "nap" after step one (the fan-out passes it to its leaves)
	Wait     bool `json:"wait,omitempty"`     // wait for the signal "go" before the fan-out
	Callback bool `json:"callback,omitempty"` // a batch's callback: record its counts
}

// parked ends the record of a run that a timer ("sleep") or a signal wait
// ("wait") put back in the table; a run that failed (its connection killed,
// say) keeps no outcome, as a run cut by a fault does.
func parked(ctx context.Context, pool *pgxpool.Pool, run int64, err error) {
	switch m := err.Error(); {
	case strings.HasPrefix(m, "snoozed for "):
		_ = endRun(context.WithoutCancel(ctx), pool, run, "sleep")
	case strings.HasPrefix(m, "waiting for signal "):
		_ = endRun(context.WithoutCancel(ctx), pool, run, "wait")
	}
}

// wfStep is one workflow task: a checkpointed step (at least once; it
// records whether it ran although its checkpoint existed, which must never
// happen), a timer (Nap: each run past it records when it woke), a signal
// wait (Wait: each run past it records the payload it received), a StepTx
// (exactly once), then, in one transaction, the fan-out, the task's output,
// a final effect (a batch's callback: with the batch's counts) and the
// completion (CompleteTx). Every effect goes to public.wf_effects, so the
// test can count them per task.
func wfStep(ctx context.Context, c *skiplock.Client, pool *pgxpool.Pool, j *skiplock.Job[wfSpec]) error {
	run, err := startRun(ctx, pool, j.ID, j.Attempt, j.WorkerID, j.LeaseToken, j.Payload)
	if err != nil {
		return fmt.Errorf("record run: %w", err)
	}
	info, err := skiplock.CurrentTask(ctx)
	if err != nil {
		return err
	}
	pause := func() error {
		select {
		case <-time.After(time.Duration(j.Args.Sleep) * time.Millisecond):
			return nil
		case <-ctx.Done():
			cause := context.Cause(ctx)
			_ = endRun(context.WithoutCancel(ctx), pool, run, "ctx: "+cause.Error())
			return cause
		}
	}
	if _, err := skiplock.Step(ctx, "one", func(ctx context.Context) (int, error) {
		// A violation is the lease holder running a step whose checkpoint
		// exists; a worker that lost its lease (frozen past it) may still be
		// inside a step the job's new owner recorded meanwhile.
		var recorded int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.job_steps WHERE job_id = $1 AND name = 'one'
			AND EXISTS (SELECT 1 FROM skiplock.jobs WHERE id = $1 AND lease_token = $2)`, j.ID, j.LeaseToken).Scan(&recorded); err != nil {
			return 0, err
		}
		_, err := pool.Exec(ctx, "INSERT INTO public.wf_effects (job_id, task_id, step, replayed) VALUES ($1, $2, 'one', $3)",
			j.ID, info.TaskID, recorded > 0)
		return 1, err
	}); err != nil {
		return err
	}
	if err := pause(); err != nil {
		return err
	}
	if j.Args.Nap > 0 {
		if err := skiplock.Sleep(ctx, "nap", time.Duration(j.Args.Nap)*time.Millisecond); err != nil {
			parked(ctx, pool, run, err)
			return err
		}
		if _, err := pool.Exec(ctx, "INSERT INTO public.wf_effects (job_id, task_id, step, value) VALUES ($1, $2, 'woke', $3)",
			j.ID, info.TaskID, j.Args.Nap); err != nil {
			return err
		}
	}
	if j.Args.Wait {
		payload, err := skiplock.WaitSignal(ctx, "go", 2*time.Minute)
		if err != nil {
			parked(ctx, pool, run, err)
			return err
		}
		var got struct {
			N int `json:"n"`
		}
		if err := json.Unmarshal(payload, &got); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, "INSERT INTO public.wf_effects (job_id, task_id, step, value) VALUES ($1, $2, 'got', $3)",
			j.ID, info.TaskID, got.N); err != nil {
			return err
		}
	}
	if _, err := skiplock.StepTx(ctx, "two", func(ctx context.Context, tx skiplock.Tx) (int, error) {
		_, err := tx.Exec(ctx, "INSERT INTO public.wf_effects (job_id, task_id, step) VALUES ($1, $2, 'two')", j.ID, info.TaskID)
		return 2, err
	}); err != nil {
		return err
	}
	if err := pause(); err != nil {
		return err
	}
	out := j.Args.Value
	var leaves []skiplock.Task
	var names []string
	for i := range j.Args.Fanout {
		name := fmt.Sprintf("leaf-%d", i)
		names = append(names, name)
		leaves = append(leaves, skiplock.Task{Name: name, Queue: j.Queue, Kind: "wfstep", DependsOn: []string{info.Name},
			Args: wfSpec{Sleep: j.Args.Sleep, Value: i + 1, Nap: j.Args.Nap}})
	}
	if len(leaves) > 0 {
		leaves = append(leaves, skiplock.Task{Name: "join", Queue: j.Queue, Kind: "wfstep", DependsOn: names,
			Args: wfSpec{Sleep: j.Args.Sleep, Leaves: len(names)}})
	}
	for i := range j.Args.Leaves {
		v, err := skiplock.TaskOutput[int](ctx, fmt.Sprintf("leaf-%d", i))
		if err != nil {
			return err
		}
		out += v
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if len(leaves) > 0 {
		if err := skiplock.AddTasksTx(ctx, tx, leaves...); err != nil {
			return err
		}
	}
	if err := skiplock.SetOutputTx(ctx, tx, out); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO public.wf_effects (job_id, task_id, step) VALUES ($1, $2, 'done')", j.ID, info.TaskID); err != nil {
		return err
	}
	if j.Args.Callback {
		// Every member finished before the callback was enqueued: the
		// counts are final. Recorded once per completion of the callback.
		n, err := skiplock.BatchResult(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO public.wf_effects (job_id, task_id, step, value) VALUES ($1, $2, 'callback', $3)",
			j.ID, info.TaskID, n.Completed*1000+n.Dead+n.Cancelled); err != nil {
			return err
		}
	}
	// The run is recorded as successful in the completing transaction: if
	// the commit's reply is lost (the database crashed after committing),
	// the record and the completion still agree.
	if _, err := tx.Exec(ctx, `UPDATE public.runs SET finished = true, outcome = 'ok', finished_at = clock_timestamp()
		WHERE id = $1`, run); err != nil {
		return err
	}
	if err := skiplock.CompleteTx(ctx, c, tx, j); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// selfJob is the test's job payload (faults.job) for a job a worker
// enqueues itself: its sleep and its plaintext marker.
type selfJob struct {
	Sleep  []int  `json:"sleep,omitempty"`
	Marker string `json:"marker,omitempty"`
}

// enqueueSelf enqueues n jobs one at a time through this worker's own
// client, as a process that both enqueues and works: while its pool waits
// idle, each is claimed for it in the enqueue's transaction and handed off.
// Each committed job is logged (its id and index, and the hand-offs so far)
// for the test, which rebuilds its payload from the index: its marker is
// marker and the index.
func enqueueSelf(ctx context.Context, c *skiplock.Client, marker string, n, sleepMS int, gap time.Duration) {
	for i := range n {
		raw, _ := json.Marshal(selfJob{Sleep: []int{sleepMS}, Marker: marker + strconv.Itoa(i)})
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "job", Payload: json.RawMessage(raw), MaxAttempts: 10})
		if err != nil {
			fmt.Fprintln(os.Stderr, "faultworker: self enqueue failed:", err)
		} else {
			fmt.Fprintf(os.Stderr, "faultworker: enqueued %d self %d handed %d\n", r.ID, i, c.Stats().HandedOff)
		}
		time.Sleep(gap)
	}
}
