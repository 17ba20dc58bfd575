package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testProcess is the process one in-process invocation of the CLI sees: the
// test binary's environment overlaid with env, and signals that only
// terminate sends. Each invocation having its own, the tests run in
// parallel: a SIGTERM for one worker does not stop another's.
type testProcess struct {
	env map[string]string

	mu         sync.Mutex
	subs       map[chan<- os.Signal]bool // guarded by mu
	subscribed chan struct{}             // closed at the first notify
}

func newTestProcess(env map[string]string) *testProcess {
	return &testProcess{env: env, subs: map[chan<- os.Signal]bool{}, subscribed: make(chan struct{})}
}

func (p *testProcess) process() process {
	return process{
		getenv: func(k string) string {
			if v, ok := p.env[k]; ok {
				return v
			}
			return os.Getenv(k)
		},
		notify: func(c chan<- os.Signal, _ ...os.Signal) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.subs) == 0 {
				select {
				case <-p.subscribed:
				default:
					close(p.subscribed)
				}
			}
			p.subs[c] = true
		},
		stopNotify: func(c chan<- os.Signal) {
			p.mu.Lock()
			defer p.mu.Unlock()
			delete(p.subs, c)
		},
	}
}

// terminate sends SIGTERM to the invocation, as kill would, once it
// listens for signals.
func (p *testProcess) terminate(t *testing.T) {
	t.Helper()
	select {
	case <-p.subscribed:
	case <-time.After(30 * time.Second):
		t.Fatal("the command never listened for signals")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.subs {
		select {
		case c <- syscall.SIGTERM:
		default: // a full buffer: a signal is already pending, as with signal.Notify
		}
	}
}

// runCLI runs the CLI in-process and returns exit code, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLIEnv(t, nil, args...)
}

// runCLIEnv is runCLI with the environment variables env set for this
// invocation only ("" unsets one).
func runCLIEnv(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	outF, errF := outputFiles(t)
	code := runIn(context.Background(), newTestProcess(env).process(), args, outF, errF)
	out, _ := os.ReadFile(outF.Name())
	errb, _ := os.ReadFile(errF.Name())
	return code, string(out), string(errb)
}

// background is an invocation of the CLI running in a goroutine.
type background struct {
	*testProcess
	done           <-chan int // its exit code
	stdout, stderr string     // the files its output goes to
}

// startCLI runs the CLI in the background until ctx ends or terminate
// stops it.
func startCLI(ctx context.Context, t *testing.T, args ...string) *background {
	t.Helper()
	return startCLIEnv(ctx, t, nil, args...)
}

// startCLIEnv is startCLI with the environment variables env set for this
// invocation only.
func startCLIEnv(ctx context.Context, t *testing.T, env map[string]string, args ...string) *background {
	t.Helper()
	outF, errF := outputFiles(t)
	p := newTestProcess(env)
	ch := make(chan int, 1)
	go func() { ch <- runIn(ctx, p.process(), args, outF, errF) }()
	return &background{testProcess: p, done: ch, stdout: outF.Name(), stderr: errF.Name()}
}

func outputFiles(t *testing.T) (stdout, stderr *os.File) {
	t.Helper()
	outF, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	errF, err := os.CreateTemp(t.TempDir(), "err")
	require.NoError(t, err)
	return outF, errF
}

// testGlobals are the options of an invocation with the defaults, for
// tests that call a command's parts directly.
func testGlobals() *globals {
	return &globals{schema: "skiplock", logLevel: "info", logFormat: "text", process: newTestProcess(nil).process()}
}

// TestCommandTreeIsPure: newRootCmd builds the whole tree (every command of
// PRODUCT.md §2 and §5 that others drive) without side effects, and two
// trees share nothing: flags parsed by one do not show in the other.
func TestCommandTreeIsPure(t *testing.T) {
	t.Parallel()
	a, b := newRootCmd(), newRootCmd()
	for _, path := range [][]string{{"migrate", "up"}, {"migrate", "down"}, {"migrate", "status"}, {"migrate", "sql"},
		{"enqueue"}, {"work"}, {"queue", "pause"}, {"queue", "resume"}, {"schedule", "add"}, {"schedule", "list"},
		{"schedule", "remove"}, {"stats"}, {"dlq", "list"}, {"dlq", "replay"}, {"dlq", "purge"}, {"doctor"}, {"bench"},
		{"serve"}, {"dev"}, {"top"}, {"job", "get"}, {"workflow", "get"}, {"signal"}, {"limit", "set"}, {"tenant", "move"},
		{"failover", "advance-tokens"}} {
		cmd, rest, err := a.Find(path)
		require.NoError(t, err, path)
		require.Empty(t, rest, path)
		require.Equal(t, "skiplock "+strings.Join(path, " "), cmd.CommandPath())
	}
	require.NoError(t, a.ParseFlags([]string{"--schema", "other", "--log-level", "debug"}))
	require.Equal(t, "other", a.Flag("schema").Value.String())
	require.Equal(t, "skiplock", b.Flag("schema").Value.String(), "the second tree has its own options")
	require.Equal(t, "info", b.Flag("log-level").Value.String())
	stats, _, err := a.Find([]string{"stats"})
	require.NoError(t, err)
	require.NoError(t, stats.ParseFlags([]string{"--json"}))
	stats2, _, err := b.Find([]string{"stats"})
	require.NoError(t, err)
	require.Equal(t, "false", stats2.Flag("json").Value.String())
}
