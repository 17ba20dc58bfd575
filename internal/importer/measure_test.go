package importer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// TestMeasureAsynqImport is the measurement behind the figures in
// docs/coming-from-asynq.md, not a check: it runs only when
// SKIPLOCK_IMPORT_MEASURE_ASYNQ names a task count (e.g. 100000). asynq's
// client enqueues the tasks (pending, a tenth scheduled, two queues) into a
// private Redis, then the built CLI imports them and its JSON summary is
// logged.
func TestMeasureAsynqImport(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SKIPLOCK_IMPORT_MEASURE_ASYNQ"))
	if n <= 0 {
		t.Skip("SKIPLOCK_IMPORT_MEASURE_ASYNQ is not set: a measurement, run by hand")
	}
	ctx := context.Background()
	addr := startRedis(t)
	db := dbtest.New(t)
	ac := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer ac.Close()
	start := time.Now()
	for i := range n {
		opts := []asynq.Option{asynq.Queue([]string{"default", "critical"}[i%2])}
		if i%10 == 0 {
			opts = append(opts, asynq.ProcessIn(time.Hour))
		}
		if _, err := ac.Enqueue(asynq.NewTask("email:send", []byte(fmt.Sprintf(`{"to": "u%d@example.com", "n": %d}`, i, i))), opts...); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("asynq enqueued %d tasks in %s", n, time.Since(start).Round(time.Millisecond))
	bin := buildCLI(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "import", "asynq", "--redis-url", "redis://"+addr, "--database-url", db.URL, "--schema", db.Schema, "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start = time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("import: %v\n%s", err, stderr.String())
	}
	t.Logf("import of %d asynq tasks: %s (wall %s)", n, bytes.TrimSpace(stdout.Bytes()), time.Since(start).Round(time.Millisecond))
	var jobs int
	if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.jobs`, db.Schema)).Scan(&jobs); err != nil || jobs != n {
		t.Fatalf("%d jobs in skiplock, want %d (%v)", jobs, n, err)
	}
}
