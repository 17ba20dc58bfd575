package importer_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/importer"
)

// importedJob is one skiplock job as the import wrote it.
type importedJob struct {
	queue, kind, payload, uniqueKey string
	maxAttempts                     int
	runAt                           time.Time
	meta                            map[string]any
}

// importedJobs reads every job in flight by the source id in its metadata
// (a test harness's own query: it reads skiplock's table directly).
func importedJobs(t *testing.T, db *dbtest.DB, ns string) map[string][]importedJob {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), fmt.Sprintf(
		`SELECT queue, kind, payload::text, coalesce(unique_key, ''), max_attempts, run_at, metadata::text FROM %q.jobs`, db.Schema))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]importedJob{}
	for rows.Next() {
		var j importedJob
		var meta string
		if err := rows.Scan(&j.queue, &j.kind, &j.payload, &j.uniqueKey, &j.maxAttempts, &j.runAt, &meta); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(meta), &m); err != nil {
			t.Fatal(err)
		}
		j.meta, _ = m[ns].(map[string]any)
		id := fmt.Sprint(j.meta["id"])
		out[id] = append(out[id], j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("payload %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Errorf("payload: got %s, want %s", gb, wb)
	}
}

func newClient(t *testing.T, db *dbtest.DB) *skiplock.Client {
	t.Helper()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAsynqImport enqueues tasks with asynq's own client in every movable
// state (pending, scheduled, retry made by an asynq server, archived by
// asynq's inspector), imports them, and checks each field, the Redis side
// and one run of each job by a skiplock worker.
func TestAsynqImport(t *testing.T) {
	ctx := context.Background()
	addr := startRedis(t)
	db := dbtest.New(t)
	ropt := asynq.RedisClientOpt{Addr: addr}
	ac := asynq.NewClient(ropt)
	defer ac.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	binary := []byte{0xff, 0x00, 0x01, 'x'}
	scheduledAt := time.Now().Add(3 * time.Second)
	enqueue := func(task *asynq.Task, opts ...asynq.Option) {
		t.Helper()
		if _, err := ac.Enqueue(task, opts...); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(asynq.NewTask("email:send", []byte(`{"to": "ann@example.com", "n": 1}`)), asynq.Queue("critical"), asynq.MaxRetry(5), asynq.TaskID("t-json"))
	enqueue(asynq.NewTask("blob:store", binary), asynq.TaskID("t-bytes"))
	enqueue(asynq.NewTask("report:build", nil), asynq.ProcessAt(scheduledAt), asynq.TaskID("t-sched"))
	enqueue(asynq.NewTask("email:send", []byte(`[1, 2]`)), asynq.TaskID("t-array"))
	enqueue(asynq.NewTask("dedupe:me", []byte(`{"k": 1}`)), asynq.Unique(time.Hour), asynq.TaskID("t-unique"))
	enqueue(asynq.NewTask("old:job", []byte(`{}`)), asynq.TaskID("t-archived"))
	enqueue(asynq.NewTask("has space", []byte(`{}`)), asynq.TaskID("t-invalid"))
	enqueue(asynq.NewTask("flaky", []byte(`{"x": true}`)), asynq.Queue("flaky"), asynq.MaxRetry(3), asynq.TaskID("t-retry"))

	insp := asynq.NewInspector(ropt)
	defer insp.Close()
	if err := insp.ArchiveTask("default", "t-archived"); err != nil {
		t.Fatal(err)
	}
	// An asynq server fails "flaky" once: asynq itself puts it in retry.
	srv := asynq.NewServer(ropt, asynq.Config{Queues: map[string]int{"flaky": 1}, Concurrency: 1,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return 2 * time.Second },
		LogLevel:       asynq.ErrorLevel})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return errors.New("flaky: boom") })); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		info, err := insp.GetTaskInfo("flaky", "t-retry")
		if err == nil && info.State == asynq.TaskStateRetry {
			break
		}
		if i > 200 {
			t.Fatal("asynq did not move the failing task to retry within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv.Shutdown()

	client := newClient(t, db)
	opts := importer.AsynqOptions{Redis: rdb, Dest: db.Pool, Client: client, BatchSize: 3, DryRun: true}
	dry, err := importer.Asynq(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if dry.MovedTotal != 7 || dry.Moved["pending"]["email:send"] != 2 || dry.Moved["retry"]["flaky"] != 1 ||
		dry.Moved["scheduled"]["report:build"] != 1 || dry.Left["archived"] != 1 {
		t.Fatalf("dry run: %+v", dry)
	}
	if n := len(importedJobs(t, db, "asynq")); n != 0 {
		t.Fatalf("dry run wrote %d jobs", n)
	}

	opts.DryRun = false
	sum, err := importer.Asynq(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.MovedTotal != 6 || sum.Left["invalid: kind"] != 1 || sum.Left["archived"] != 1 {
		t.Fatalf("summary: %+v", sum)
	}
	jobs := importedJobs(t, db, "asynq")
	for _, id := range []string{"t-json", "t-bytes", "t-sched", "t-array", "t-unique", "t-retry"} {
		if len(jobs[id]) != 1 {
			t.Fatalf("task %s: %d jobs, want 1", id, len(jobs[id]))
		}
		j := jobs[id][0]
		if j.uniqueKey != "asynq:"+id {
			t.Errorf("%s: unique key %q", id, j.uniqueKey)
		}
	}
	if j := jobs["t-json"][0]; j.queue != "critical" || j.kind != "email:send" || j.maxAttempts != 6 {
		t.Errorf("t-json: %+v", j)
	} else {
		jsonEqual(t, j.payload, `{"to": "ann@example.com", "n": 1}`)
	}
	jsonEqual(t, jobs["t-bytes"][0].payload, fmt.Sprintf(`{"$asynq_bytes": %q}`, base64.StdEncoding.EncodeToString(binary)))
	jsonEqual(t, jobs["t-array"][0].payload, fmt.Sprintf(`{"$asynq_bytes": %q}`, base64.StdEncoding.EncodeToString([]byte(`[1, 2]`))))
	if j := jobs["t-sched"][0]; j.runAt.Unix() != scheduledAt.Unix() || j.payload != "{}" {
		t.Errorf("t-sched: run_at %s (want %s), payload %s", j.runAt, scheduledAt, j.payload)
	}
	if j := jobs["t-retry"][0]; j.queue != "flaky" || j.maxAttempts != 3 || j.meta["retried"] != float64(1) ||
		j.meta["last_error"] != "flaky: boom" || j.meta["state"] != "retry" || !j.runAt.After(time.Now().Add(-5*time.Second)) {
		t.Errorf("t-retry: %+v", j)
	}

	// Redis: the moved tasks and their uniqueness lock are gone, nothing is
	// held, the archived task and the refused one are where they were.
	for _, k := range []string{"asynq:{critical}:t:t-json", "asynq:{default}:t:t-bytes", "asynq:{default}:t:t-unique",
		"asynq:{flaky}:t:t-retry", "asynq:{default}:skiplock_import"} {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s still exists", k)
		}
	}
	if keys := rdb.Keys(ctx, "asynq:{default}:unique:*").Val(); len(keys) != 0 {
		t.Errorf("uniqueness lock left: %v", keys)
	}
	if ids := rdb.LRange(ctx, "asynq:{default}:pending", 0, -1).Val(); len(ids) != 1 || ids[0] != "t-invalid" {
		t.Errorf("default pending after the import: %v, want the refused task only", ids)
	}
	if n := rdb.ZCard(ctx, "asynq:{default}:archived").Val(); n != 1 {
		t.Errorf("archived: %d, want 1 (not asked for)", n)
	}

	// A re-run finds nothing new; --archived then takes the archived task.
	again, err := importer.Asynq(ctx, opts)
	if err != nil || again.MovedTotal != 0 {
		t.Fatalf("re-run: %+v, %v", again, err)
	}
	opts.Archived = true
	arch, err := importer.Asynq(ctx, opts)
	if err != nil || arch.Moved["archived"]["old:job"] != 1 || arch.MovedTotal != 1 {
		t.Fatalf("--archived: %+v, %v", arch, err)
	}

	// A skiplock worker runs each imported job once; the binary payload
	// decodes back to its bytes.
	var gotBytes []byte
	rc := startCounter(t, db, "asynq", []string{"default", "critical", "flaky"}, func(j *skiplock.Job[json.RawMessage]) {
		if j.Kind == "blob:store" {
			var p struct {
				B []byte `json:"$asynq_bytes"`
			}
			_ = json.Unmarshal(j.Args, &p)
			gotBytes = p.B
		}
	})
	runs := rc.waitRuns(t, 7, 30*time.Second)
	for id, n := range runs {
		if n != 1 {
			t.Errorf("task %s ran %d times", id, n)
		}
	}
	if !bytes.Equal(gotBytes, binary) {
		t.Errorf("binary payload: got %x, want %x", gotBytes, binary)
	}
}

// TestAsynqImportCrash kills the import (the built CLI) with SIGKILL at
// random points, re-runs it, and checks per task that it became exactly one
// job that ran exactly once, with a skiplock worker completing jobs all
// along (so a task imported twice would show as a second run even after
// the first job finished).
func TestAsynqImportCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and kills it repeatedly")
	}
	ctx := context.Background()
	addr := startRedis(t)
	db := dbtest.New(t)
	bin := buildCLI(t)
	ac := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer ac.Close()
	const n = 400
	for i := range n {
		opts := []asynq.Option{asynq.TaskID(fmt.Sprintf("c-%d", i)), asynq.Queue([]string{"default", "low"}[i%2])}
		if i%3 == 0 {
			opts = append(opts, asynq.ProcessIn(time.Second))
		}
		if _, err := ac.Enqueue(asynq.NewTask("crash:test", []byte(fmt.Sprintf(`{"i": %d}`, i))), opts...); err != nil {
			t.Fatal(err)
		}
	}
	rc := startCounter(t, db, "asynq", []string{"default", "low"}, nil)
	args := []string{"import", "asynq", "--redis-url", "redis://" + addr, "--database-url", db.URL, "--schema", db.Schema,
		"--batch", "7", "--json"}
	probe := redis.NewClient(&redis.Options{Addr: addr})
	defer probe.Close()
	kills, midway, held := 0, 0, int64(0)
	// Each kill waits a random time after the start, from a base that grows
	// by a quarter whenever a kill found nothing imported yet: a fixed schedule
	// (20 ms plus up to 40 ms more per run, twelve runs) landed every kill
	// before the CLI had connected on a loaded machine, and proved nothing.
	// The kills go on until four landed midway, or thirty were made.
	base := 20 * time.Millisecond
	for run := 0; ; run++ {
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if run < 30 && midway < 4 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run %d: %v\n%s", run, err, stderr.String())
				}
				goto finished
			case <-time.After(base + time.Duration(rand.IntN(40+40*min(run, 12)))*time.Millisecond):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-done
				kills++
				left := int64(0)
				for _, q := range []string{"default", "low"} {
					p := "asynq:{" + q + "}:"
					left += probe.LLen(ctx, p+"pending").Val() + probe.ZCard(ctx, p+"scheduled").Val()
					held += probe.HLen(ctx, p+"skiplock_import").Val()
				}
				if left > 0 && left < n {
					midway++
				}
				if left == n {
					base += base / 4
				}
				continue
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("last run: %v\n%s", err, stderr.String())
		}
		break
	}
finished:
	t.Logf("%d kills before a run finished, %d of them midway through the tasks, %d tasks held at a kill", kills, midway, held)
	if midway == 0 {
		t.Error("no kill landed midway through the import: the test proved nothing")
	}
	runs := rc.waitRuns(t, n, 60*time.Second)
	for i := range n {
		if id := fmt.Sprintf("c-%d", i); runs[id] != 1 {
			t.Errorf("task %s ran %d times", id, runs[id])
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for _, q := range []string{"default", "low"} {
		p := "asynq:{" + q + "}:"
		if l, z, h := rdb.LLen(ctx, p+"pending").Val(), rdb.ZCard(ctx, p+"scheduled").Val(), rdb.HLen(ctx, p+"skiplock_import").Val(); l+z+h != 0 {
			t.Errorf("queue %s: %d pending, %d scheduled, %d held left in Redis", q, l, z, h)
		}
		if keys := rdb.Keys(ctx, p+"t:*").Val(); len(keys) != 0 {
			t.Errorf("queue %s: %d task hashes left", q, len(keys))
		}
	}
}
