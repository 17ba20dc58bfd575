package faults

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The programs the tests run, each built once per test binary (on first
// use, so a test that needs only one does not wait for the other): the
// skiplock CLI for `skiplock work --exec`, and faultworker
// (testdata/worker), a worker process on the Go library that records each
// execution. They are built with -race when the tests are: worker processes
// are where concurrency bugs would surface.
var (
	binDir  string
	binOnce = map[string]*sync.Once{"skiplock": {}, "faultworker": {}, "faultworker-seedbug": {}}
	binErr  = map[string]error{}
	binPkg  = map[string]string{"skiplock": "./cmd/skiplock", "faultworker": "./test/faults/testdata/worker",
		"faultworker-seedbug": "./test/faults/testdata/worker"}
	// faultworker-seedbug is faultworker built with the lease fence removed
	// (internal/store/seedbug.go), for TestSeededBugIsCaught.
	binTags  = map[string]string{"faultworker-seedbug": "skiplock_seedbug"}
	binMu    sync.Mutex // guards binErr
	buildEnv = os.Environ()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("faults: the fault tier (make test-faults); skipped with -short")
		return 0
	}
	dir, err := os.MkdirTemp("", "skiplock-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	return m.Run()
}

// program returns the path of a built program ("skiplock" or
// "faultworker"), building it on first use.
func program(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(binDir, name)
	binOnce[name].Do(func() {
		args := []string{"build", "-o", out}
		if raceEnabled {
			args = append(args, "-race")
		}
		if tags := binTags[name]; tags != "" {
			args = append(args, "-tags", tags)
		}
		cmd := exec.Command("go", append(args, binPkg[name])...)
		cmd.Dir = "../.."
		cmd.Env = buildEnv
		if b, err := cmd.CombinedOutput(); err != nil {
			binMu.Lock()
			binErr[name] = fmt.Errorf("go build %s: %v\n%s", binPkg[name], err, b)
			binMu.Unlock()
		}
	})
	binMu.Lock()
	err := binErr[name]
	binMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
