package importer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/gobuild"
)

// startRedis starts a private redis-server on a free loopback port for the
// test (no persistence) and returns its address. It skips the test when
// the binary is absent: .ci/install-redis.sh installs it in CI.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server; .ci/install-redis.sh): the asynq import tests need a real Redis")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for i := 0; ; i++ {
		if rdb.Ping(context.Background()).Err() == nil {
			return addr
		}
		if i > 100 {
			t.Fatal("redis-server did not answer within 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// buildCLI builds the skiplock binary once per test binary.
var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// TestMain removes the CLI buildCLI built once the package's tests are done:
// a 53 MB binary under the temp directory, left behind by every run before.
func TestMain(m *testing.M) {
	code := m.Run()
	if cliPath != "" {
		_ = os.RemoveAll(filepath.Dir(cliPath))
	}
	os.Exit(code)
}

// buildCLI builds the skiplock CLI once per test binary.
func buildCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := osMkdirTemp()
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "skiplock")
		out, err := gobuild.Command("", cliPath, "github.com/skiplock/skiplock/cmd/skiplock").CombinedOutput()
		if err != nil {
			cliErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

// runCounter is a skiplock worker over queues that counts the runs of each
// imported job by the source's id in its metadata (ns: "asynq" or "river").
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
	seen chan struct{}
	c    *skiplock.Client
}

func startCounter(t *testing.T, db *dbtest.DB, ns string, queues []string, onRun func(*skiplock.Job[json.RawMessage])) *runCounter {
	t.Helper()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema,
		Pools: []skiplock.WorkerPool{{Queues: queues, Concurrency: 8}}, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rc := &runCounter{runs: map[string]int{}, seen: make(chan struct{}, 1), c: c}
	err = skiplock.HandleFallback(c, func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
		src, _ := j.Metadata[ns].(map[string]any)
		id := fmt.Sprint(src["id"])
		if onRun != nil {
			onRun(j)
		}
		rc.mu.Lock()
		rc.runs[id]++
		rc.mu.Unlock()
		select {
		case rc.seen <- struct{}{}:
		default:
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return rc
}

// waitRuns waits until n distinct jobs ran (or the deadline passes) and
// returns the runs by id.
func (rc *runCounter) waitRuns(t *testing.T, n int, within time.Duration) map[string]int {
	t.Helper()
	deadline := time.After(within)
	for {
		rc.mu.Lock()
		got := len(rc.runs)
		rc.mu.Unlock()
		if got >= n {
			break
		}
		select {
		case <-rc.seen:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("after %s: %d of %d jobs ran", within, got, n)
		}
	}
	time.Sleep(300 * time.Millisecond) // a second run of any of them would show now
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]int, len(rc.runs))
	for k, v := range rc.runs {
		out[k] = v
	}
	return out
}

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "skiplock-import-cli-") }
