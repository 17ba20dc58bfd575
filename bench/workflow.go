package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bench/measure"
	"github.com/skiplock/skiplock/internal/store"
)

// Shape is a parsed workflow shape: "fanout:N" is a root task, N leaves
// that depend on it and a join that depends on every leaf (N+2 tasks).
type Shape struct {
	Fanout int
}

// Tasks is the number of tasks of one workflow of this shape.
func (s Shape) Tasks() int { return s.Fanout + 2 }

// String renders s as ParseShape accepts it.
func (s Shape) String() string { return "fanout:" + strconv.Itoa(s.Fanout) }

// MaxFanout bounds a benchmark workflow's fan-out.
const MaxFanout = 10_000

// ParseShape parses "fanout:N" (1 ≤ N ≤ MaxFanout).
func ParseShape(s string) (Shape, error) {
	n, ok := strings.CutPrefix(strings.TrimSpace(s), "fanout:")
	if !ok {
		return Shape{}, optErr("workflow", `must be "fanout:N" (a root, N leaves, a join), got %q`, s)
	}
	f, err := strconv.Atoi(n)
	if err != nil || f < 1 || f > MaxFanout {
		return Shape{}, optErr("workflow", "fanout must be between 1 and %d, got %q", MaxFanout, n)
	}
	return Shape{Fanout: f}, nil
}

// DefaultWorkflowTasks is how many tasks a workflow benchmark runs unless
// Jobs says otherwise.
const DefaultWorkflowTasks = 24_000

// WorkflowOptions configures RunWorkflow. Zero values take the defaults.
type WorkflowOptions struct {
	// Shape is "fanout:N". Required.
	Shape string
	// Tasks is about how many tasks run in all: Tasks ÷ (N+2) workflows,
	// at least one. Default DefaultWorkflowTasks.
	Tasks int
	// Workers and Batch as in Options (32, 50).
	Workers int
	Batch   int
	// Schema holds skiplock's tables (migrated). Default "skiplock".
	Schema string
	// Progress receives a progress line every second; nil discards them.
	Progress io.Writer
	// DeleteCompleted as in Options.
	DeleteCompleted bool
	// ListenURL as in Options.
	ListenURL string
}

func (o WorkflowOptions) withDefaults() WorkflowOptions {
	if o.Tasks == 0 {
		o.Tasks = DefaultWorkflowTasks
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Schema == "" {
		o.Schema = "skiplock"
	}
	return o
}

// Validate checks o (after defaults) and returns an *OptionError naming the
// first invalid option.
func (o WorkflowOptions) Validate() error {
	_, err := o.withDefaults().validate()
	return err
}

func (o WorkflowOptions) validate() (Shape, error) {
	switch {
	case o.Tasks < 1 || o.Tasks > 10_000_000:
		return Shape{}, optErr("jobs", "must be between 1 and 10000000 tasks, got %d", o.Tasks)
	case o.Workers < 1 || o.Workers > 10000:
		return Shape{}, optErr("workers", "must be between 1 and 10000, got %d", o.Workers)
	case o.Batch < 1 || o.Batch > 1000:
		return Shape{}, optErr("batch", "must be between 1 and 1000, got %d", o.Batch)
	}
	if err := validateSchema(o.Schema); err != nil {
		return Shape{}, err
	}
	return ParseShape(o.Shape)
}

// WorkflowResult is what RunWorkflow measured. tasks_per_s, workflows_per_s,
// statements_per_task and wal_bytes_per_task are the figures PRODUCT §5
// names; jobs_per_s (= tasks_per_s), claim and dead-tuple figures sit beside
// them as in Result.
type WorkflowResult struct {
	Queue     string `json:"queue"`
	Workflow  string `json:"workflow"`
	Workflows int    `json:"workflows"`
	Tasks     int    `json:"tasks"`
	Workers   int    `json:"workers"`
	Batch     int    `json:"batch"`
	Handler   string `json:"handler"`

	// SeedSeconds times enqueueing every workflow (one EnqueueWorkflow,
	// one round trip, each); only roots become jobs then.
	SeedSeconds       float64 `json:"seed_seconds"`
	SeedWorkflowsPerS float64 `json:"seed_workflows_per_s"`

	// Seconds is the drain: from Start until every task completed.
	Seconds       float64 `json:"seconds"`
	TasksPerS     float64 `json:"tasks_per_s"`
	JobsPerS      float64 `json:"jobs_per_s"`
	WorkflowsPerS float64 `json:"workflows_per_s"`

	ClaimP50MS float64 `json:"claim_p50_ms"`
	ClaimP99MS float64 `json:"claim_p99_ms"`
	Claims     int64   `json:"claims"`

	// WALBytesPerTask covers the whole life (enqueue of the workflow →
	// every task completed); server-wide.
	WALBytesPerTask float64 `json:"wal_bytes_per_task"`
	WALBytesPerJob  float64 `json:"wal_bytes_per_job"`
	// StatementsPerTask is the drain's round trips per task; the
	// enqueue's one round trip per workflow is SeedStatementsPerTask.
	StatementsPerTask     float64     `json:"statements_per_task"`
	SeedStatementsPerTask float64     `json:"seed_statements_per_task"`
	Statements            []Statement `json:"statements"`

	DeadTuplesAfter int64 `json:"dead_tuples_after"`
	Failed          int64 `json:"failed"`
}

// RunWorkflow runs many workflows of one shape at once with no-op tasks on
// pool's database: enqueue them, drain them with one pool of Workers, and
// report tasks and workflows per second, statements and WAL per task. It
// cleans up its workflows, jobs and worker row however it ends.
func RunWorkflow(ctx context.Context, pool *pgxpool.Pool, o WorkflowOptions) (WorkflowResult, error) {
	o = o.withDefaults()
	shape, err := o.validate()
	if err != nil {
		return WorkflowResult{}, err
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	st := store.New(o.Schema)
	if err := checkSchema(ctx, pool, st); err != nil {
		return WorkflowResult{}, err
	}
	tr := newTracer(st)
	queue, workerID := names()
	bp, err := ownPool(ctx, pool, tr, 8, queue)
	if err != nil {
		return WorkflowResult{}, err
	}
	defer bp.Close()
	nwf := max(1, o.Tasks/shape.Tasks())
	tasks := nwf * shape.Tasks()
	res := WorkflowResult{Queue: queue, Workflow: shape.String(), Workflows: nwf, Tasks: tasks, Workers: o.Workers,
		Batch: o.Batch, Handler: "noop"}
	c, err := skiplock.NewClient(bp, skiplock.Config{
		Schema: o.Schema, Logger: orQuiet(nil, progress), WorkerID: workerID, ShutdownTimeout: 30 * time.Second,
		DeleteCompleted: o.DeleteCompleted, ListenURL: o.ListenURL,
		Pools: []skiplock.WorkerPool{{Name: "bench", Queues: []string{queue}, Concurrency: o.Workers, BatchSize: o.Batch}},
	})
	if err != nil {
		return res, err
	}
	if err := skiplock.Handle(c, benchKind, func(context.Context, *skiplock.Job[json.RawMessage]) error { return nil }); err != nil {
		return res, err
	}
	defer cleanup(pool, st, queue, workerID)
	defer cleanupWorkflows(pool, st, queue)

	wf := benchWorkflow(queue, shape)
	lsn0, err := walLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	tr.Start()
	seedStart := time.Now()
	last := seedStart
	for i := range nwf {
		if _, err := c.EnqueueWorkflow(ctx, wf); err != nil {
			return res, fmt.Errorf("bench: enqueue workflow: %w", err)
		}
		if time.Since(last) >= time.Second || i == nwf-1 {
			last = time.Now()
			fmt.Fprintf(progress, "bench: enqueued %d/%d workflows\n", i+1, nwf)
		}
	}
	res.SeedSeconds = time.Since(seedStart).Seconds()
	res.SeedWorkflowsPerS = float64(nwf) / res.SeedSeconds
	seedCounts := tr.Stop()

	tr.Start()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	_, err = waitDone(ctx, c, nil, tasks, start, progress)
	res.Seconds = time.Since(start).Seconds()
	if err != nil {
		_ = c.StopAndCancel(context.WithoutCancel(ctx))
		return res, err
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err = c.Stop(stopCtx)
	cancel()
	if err != nil {
		return res, err
	}
	counts := tr.Stop()
	lsn1, err := walLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	bp.Close()
	waitBackendsGone(ctx, pool, queue)
	if res.DeadTuplesAfter, _, err = deadTuples(ctx, pool, st); err != nil {
		return res, err
	}
	wal, err := lsnDiff(ctx, pool, lsn1, lsn0)
	if err != nil {
		return res, err
	}
	n := float64(tasks)
	res.TasksPerS = n / res.Seconds
	res.JobsPerS = res.TasksPerS
	res.WorkflowsPerS = float64(nwf) / res.Seconds
	res.ClaimP50MS, res.ClaimP99MS, res.Claims = tr.Timed.QuantileMS(0.50), tr.Timed.QuantileMS(0.99), int64(tr.Timed.Count())
	res.WALBytesPerTask = float64(wal) / n
	res.WALBytesPerJob = res.WALBytesPerTask
	var total, seedTotal int64
	for _, v := range counts {
		total += v
	}
	for _, v := range seedCounts {
		seedTotal += v
	}
	res.StatementsPerTask = float64(total) / n
	res.SeedStatementsPerTask = float64(seedTotal) / n
	res.Statements = measure.SortedCounts(counts)
	res.Failed = c.Stats().Failed
	return res, nil
}

// benchWorkflow is one workflow of shape: root → N leaves → join, all
// no-op tasks in queue. The workflow's name is the queue's, so cleanup
// finds its workflows.
func benchWorkflow(queue string, s Shape) skiplock.Workflow {
	ts := make([]skiplock.Task, 0, s.Tasks())
	ts = append(ts, skiplock.Task{Name: "root", Queue: queue, Kind: benchKind})
	leaves := make([]string, s.Fanout)
	for i := range leaves {
		leaves[i] = "leaf-" + strconv.Itoa(i)
		ts = append(ts, skiplock.Task{Name: leaves[i], Queue: queue, Kind: benchKind, DependsOn: []string{"root"}})
	}
	ts = append(ts, skiplock.Task{Name: "join", Queue: queue, Kind: benchKind, DependsOn: leaves})
	return skiplock.Workflow{Name: queue, Tasks: ts}
}

// cleanupWorkflows deletes the run's workflows with their tasks and edges
// (a run cut short leaves running ones, which workflow cancel can end).
func cleanupWorkflows(pool *pgxpool.Pool, st *store.Store, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = st.DeleteWorkflowsNamed(ctx, pool, queue)
}
