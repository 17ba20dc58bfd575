package river_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/gobuild"
)

// TestMeasureRiverImport is the measurement behind the figures in
// docs/coming-from-river.md, not a check: it runs only when
// SKIPLOCK_IMPORT_MEASURE names a job count (e.g. 1000000). River's client
// inserts the jobs (InsertManyFast, 10,000 at a time: available, a tenth
// scheduled, four kinds, two queues, every priority), then the built CLI
// imports them and its JSON summary is logged.
func TestMeasureRiverImport(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SKIPLOCK_IMPORT_MEASURE"))
	if n <= 0 {
		t.Skip("SKIPLOCK_IMPORT_MEASURE is not set: a measurement, run by hand")
	}
	ctx := context.Background()
	db := dbtest.New(t)
	migrateRiver(t, db.Pool)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kinds := []river.JobArgs{emailArgs{To: "a@example.com", Body: "hello"}, reportArgs{Day: "2026-11-28"}}
	for i := 0; i < n; i += 10000 {
		batch := make([]river.InsertManyParams, 0, 10000)
		for j := i; j < min(i+10000, n); j++ {
			opts := &river.InsertOpts{Queue: []string{"mail", "bulk"}[j%2], Priority: 1 + j%4}
			if j%10 == 0 {
				opts.ScheduledAt = time.Now().Add(time.Hour)
			}
			batch = append(batch, river.InsertManyParams{Args: kinds[j%2], InsertOpts: opts})
		}
		if _, err := rc.InsertManyFast(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("River inserted %d jobs in %s", n, time.Since(start).Round(time.Millisecond))
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "skiplock")
	build := gobuild.Command("../..", bin, "./cmd/skiplock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "import", "river", "--database-url", db.URL, "--schema", db.Schema, "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start = time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("import: %v\n%s", err, stderr.String())
	}
	t.Logf("import of %d River jobs: %s (wall %s)", n, bytes.TrimSpace(stdout.Bytes()), time.Since(start).Round(time.Millisecond))
	var jobs int
	if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.jobs`, db.Schema)).Scan(&jobs); err != nil || jobs != n {
		t.Fatalf("%d jobs in skiplock, want %d (%v)", jobs, n, err)
	}
}
