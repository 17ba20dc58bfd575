// Command surroundings measures whether the statements around the claim —
// heartbeats, the reaper, the scheduler, stats, the dashboard's and the
// metrics' queries, and the fenced completion — slow down while a long
// transaction pins the xmin horizon (issue 15 §2). It runs a worker pool on a
// migrated database, processes --jobs jobs, times every statement with
// EXPLAIN (ANALYZE, BUFFERS) (writes inside a transaction it rolls back),
// then opens BEGIN; SELECT txid_current(); on another connection, processes
// --jobs more and times them again. It prints a Markdown table (before,
// during, buffers) for docs/performance-log.md ("The claim's surroundings").
//
//	go run ./bench/surroundings --database-url postgres://…/db --jobs 50000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/store"
)

const (
	queue    = "surroundings"
	kind     = "work"
	holdKind = "hold"
	held     = 8 // jobs kept running (heartbeated) through the measurements
)

type statement struct {
	name, sql string
	args      func() []any
}

type timing struct {
	ms      float64
	buffers int64
}

func main() {
	url := flag.String("database-url", os.Getenv("DATABASE_URL"), "migrated database")
	schema := flag.String("schema", "skiplock", "skiplock schema")
	jobs := flag.Int("jobs", 50_000, "jobs processed before each measurement")
	runs := flag.Int("runs", 7, "EXPLAIN ANALYZE runs per statement (the median is reported)")
	flag.Parse()
	if err := run(context.Background(), *url, *schema, *jobs, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "surroundings:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, schema string, jobs, runs int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	release := make(chan struct{})
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, WorkerID: "surroundings",
		Pools: []skiplock.WorkerPool{{Queues: []string{queue}, Concurrency: 32}}})
	if err != nil {
		return err
	}
	if err := skiplock.Handle(c, kind, func(context.Context, *skiplock.Job[json.RawMessage]) error { return nil }); err != nil {
		return err
	}
	if err := skiplock.Handle(c, holdKind, func(ctx context.Context, _ *skiplock.Job[json.RawMessage]) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer func() { close(release); _ = c.Stop(context.Background()) }()
	err = c.ScheduleAdd(ctx, skiplock.Schedule{Name: "surroundings", Every: time.Hour, Queue: queue, Kind: kind})
	if err != nil {
		return err
	}
	for range held {
		if _, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: queue, Kind: holdKind}); err != nil {
			return err
		}
	}
	process := func(n int) error {
		start := c.Stats().Completed
		for done := 0; done < n; done += 5000 {
			ps := make([]skiplock.EnqueueParams, min(5000, n-done))
			for i := range ps {
				ps[i] = skiplock.EnqueueParams{Queue: queue, Kind: kind, Payload: json.RawMessage(`{"n":1}`)}
			}
			if _, err := c.EnqueueMany(ctx, ps); err != nil {
				return err
			}
		}
		for c.Stats().Completed-start < int64(n) {
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	}
	st := store.New(schema)
	stmts, err := statements(ctx, pool, st, schema)
	if err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "processing %d jobs, no pin\n", jobs)
	if err := process(jobs); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	before, err := measureAll(ctx, pool, stmts, runs)
	if err != nil {
		return err
	}
	dead0 := deadTuples(ctx, pool, schema)

	pin, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer pin.Close(context.Background())
	tx, err := pin.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := health.PinHorizon(ctx, tx, schema); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "processing %d jobs, pinned\n", jobs)
	if err := process(jobs); err != nil {
		return err
	}
	during, err := measureAll(ctx, pool, stmts, runs)
	if err != nil {
		return err
	}
	dead1 := deadTuples(ctx, pool, schema)
	_ = tx.Rollback(ctx)

	fmt.Printf("%d jobs processed before each column; dead tuples in jobs: %d before, %d during the pin.\n\n", jobs, dead0, dead1)
	fmt.Println("| statement | before: ms (buffers) | pinned: ms (buffers) | × time |")
	fmt.Println("|---|---|---|---|")
	for i, s := range stmts {
		b, d := before[i], during[i]
		ratio := "–"
		if b.ms > 0 {
			ratio = fmt.Sprintf("%.1f", d.ms/b.ms)
		}
		fmt.Printf("| %s | %.3f (%d) | %.3f (%d) | %s |\n", s.name, b.ms, b.buffers, d.ms, d.buffers, ratio)
	}
	return nil
}

func deadTuples(ctx context.Context, pool *pgxpool.Pool, schema string) int64 {
	s, err := health.JobsTable(ctx, pool, schema)
	if err != nil {
		return -1
	}
	return s.DeadTuples
}

// statements lists what is timed, each with arguments read at run time (the
// held jobs' ids and lease tokens, the schedule's state).
func statements(ctx context.Context, pool *pgxpool.Pool, st *store.Store, schema string) ([]statement, error) {
	hs := func(name string, args ...any) statement {
		q, err := health.Statement(schema, name)
		if err != nil {
			panic(err)
		}
		return statement{name: "health " + name, sql: q, args: func() []any { return args }}
	}
	running := func() (ids, tokens []int64) {
		rows, err := pool.Query(ctx, "SELECT id, lease_token FROM "+st.Table("jobs")+
			" WHERE state = 'running' AND locked_by = 'surroundings' ORDER BY id")
		if err != nil {
			return nil, nil
		}
		for rows.Next() {
			var id, tok int64
			if rows.Scan(&id, &tok) == nil {
				ids, tokens = append(ids, id), append(tokens, tok)
			}
		}
		rows.Close()
		return ids, tokens
	}
	live := health.LiveWindow.Microseconds()
	return []statement{
		{name: "claim from the front (reference, §1)", sql: st.SQL("claim"), args: func() []any {
			return []any{[]string{queue}, nil, 50, "surroundings-explain", int64(30_000_000), nil, nil, nil}
		}},
		{name: "claim after the last claimed job (reference, §1)", sql: st.SQL("claim"), args: func() []any {
			var prio int32
			var runAt time.Time
			var id int64
			err := pool.QueryRow(ctx, "SELECT priority, run_at, id FROM "+st.Table("jobs_done")+
				" WHERE queue = $1 ORDER BY id DESC LIMIT 1", queue).Scan(&prio, &runAt, &id)
			if err != nil {
				return []any{[]string{queue}, nil, 50, "surroundings-explain", int64(30_000_000), nil, nil, nil}
			}
			return []any{[]string{queue}, nil, 50, "surroundings-explain", int64(30_000_000),
				[]int32{prio}, []time.Time{runAt}, []int64{id}}
		}},
		{name: "heartbeat (8 running jobs)", sql: st.SQL("heartbeat"), args: func() []any {
			ids, toks := running()
			return []any{ids, toks, int64(30_000_000), "surroundings", []int64{}, []int64{}}
		}},
		{name: "complete_archive (8 jobs)", sql: st.SQL("complete_archive"), args: func() []any {
			ids, toks := running()
			return []any{ids, toks, "surroundings"}
		}},
		{name: "reap (batch 1000)", sql: st.SQL("reap"), args: func() []any { return []any{1000} }},
		{name: "scheduler: due schedules", sql: st.SQL("scheduler_due"), args: func() []any { return []any{nil, 100} }},
		{name: "scheduler: fire (enqueue with unique key)", sql: "SELECT * FROM " + pgx.Identifier{schema, "enqueue"}.Sanitize() +
			"(queue => $1, kind => $2, unique_key => $3)",
			args: func() []any {
				return []any{queue, kind, "schedule:surroundings:" + time.Now().Format(time.RFC3339Nano)}
			}},
		hs("queue_stats"),
		hs("queue_seen", queue),
		hs("wait_p99"),
		hs("long_runners", 10),
		hs("vacuum_state"),
		hs("xmin_holders", 10),
		hs("horizon_holders", 10),
		hs("workers", live),
		hs("worker_totals", live),
		hs("unhandled_kinds", live),
		hs("dead_letter_size"),
		hs("doctor_stuck", int64(300_000_000)),
		{name: "job list, newest 50 (the dashboard's search)", sql: st.SQL("job_list"), args: func() []any {
			return []any{nil, nil, nil, nil, 50, nil}
		}},
		{name: "job list (queue, running)", sql: st.SQL("job_list"), args: func() []any {
			return []any{queue, nil, "running", nil, 50, nil}
		}},
	}, nil
}

func measureAll(ctx context.Context, pool *pgxpool.Pool, stmts []statement, runs int) ([]timing, error) {
	out := make([]timing, len(stmts))
	for i, s := range stmts {
		var ms []float64
		var buf int64
		for range runs {
			t, err := explain(ctx, pool, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			ms = append(ms, t.ms)
			buf = t.buffers
		}
		slices.Sort(ms)
		out[i] = timing{ms: ms[len(ms)/2], buffers: buf}
	}
	return out, nil
}

// explain runs EXPLAIN (ANALYZE, BUFFERS) of s in a transaction it rolls
// back and returns the execution time and the shared buffers hit and read.
func explain(ctx context.Context, pool *pgxpool.Pool, s statement) (timing, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return timing{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+s.sql, s.args()...).Scan(&plan); err != nil {
		return timing{}, err
	}
	var root []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
		Planning  float64 `json:"Planning Time"`
		Execution float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(plan, &root); err != nil || len(root) == 0 {
		return timing{}, fmt.Errorf("parse plan: %v", err)
	}
	r := root[0]
	if strings.Contains(s.name, "reference") && r.Execution == 0 {
		return timing{}, fmt.Errorf("empty plan")
	}
	return timing{ms: r.Execution, buffers: r.Plan.Hit + r.Plan.Read}, nil
}
