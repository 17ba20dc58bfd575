package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// The review's F1, made a test: an --exec handler's children cannot hold
// its job past --timeout + --kill-grace, and a handler whose sh exited 0
// completes whatever it left running. Before the fix, bgsetsid stayed
// running with a live lease (Wait waited for the grandchild that kept the
// pipes open), bgsame failed as a timeout although sh had exited 0, and
// ignoresterm was never killed (only SIGKILL to the group reaches it, and
// the old runner waited for the pipes first).
func TestWorkExecContainsChildren(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	dir := t.TempDir()
	kinds := []string{"bgsame", "bgsetsid", "fg", "ignoresterm", "fgsetsid"}
	ids := map[string]int64{}
	for _, k := range kinds {
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: k, MaxAttempts: 1})
		require.NoError(t, err)
		ids[k] = r.ID
	}
	// Each leftover writes its pid where the test can check it is gone.
	script := filepath.Join(dir, "hang.sh")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
cat >/dev/null
pids=`+dir+`/$SKIPLOCK_JOB_KIND
case "$SKIPLOCK_JOB_KIND" in
bgsame) sleep 45 & echo $! > $pids; exit 0 ;;
bgsetsid) setsid sleep 45 & echo $! > $pids.setsid; exit 0 ;;
fg) echo $$ > $pids; exec sleep 45 ;;
ignoresterm) trap '' TERM; sleep 45 & echo $! > $pids; wait; wait; exit 0 ;;
fgsetsid) setsid sleep 45 & echo $! > $pids.setsid; echo $$ > $pids; exec sleep 45 ;;
esac
`), 0o755))
	t.Cleanup(func() {
		// What left the process group is not tracked by design: end it here.
		for _, k := range kinds {
			if b, err := os.ReadFile(filepath.Join(dir, k+".setsid")); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	start := time.Now()
	bg := startCLI(ctx, t, "work", "--database-url", db.URL, "--exec", script, "--concurrency", "8",
		"--timeout", "2s", "--kill-grace", "1s", "--lease", "30s", "--poll-interval", "100ms")
	running := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs WHERE state IN ('ready','running')").Scan(&n))
		return n
	}
	// timeout 2s + grace 1s + output drain 1s, with room for the claim and a
	// loaded machine; the sleeps last 45 s.
	require.Eventually(t, func() bool { return running() == 0 }, 20*time.Second, 50*time.Millisecond,
		"%d job(s) still held by their children", running())
	took := time.Since(start)
	require.Less(t, took, 20*time.Second)
	t.Logf("every outcome written %s after the worker started (timeout 2s, grace 1s, drain 1s)", took.Round(10*time.Millisecond))

	outcome := map[string]string{}
	for k, id := range ids {
		rec, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		outcome[k] = string(rec.State) + "/" + rec.Outcome
		if rec.State == skiplock.JobStateDead {
			require.Contains(t, rec.LastError, "killed")
		}
	}
	require.Equal(t, map[string]string{
		"bgsame":      "completed/completed", // sh exited 0: done, not a timeout
		"bgsetsid":    "completed/completed", // the grandchild holding the pipes no longer holds the job
		"fg":          "dead/timeout",
		"ignoresterm": "dead/timeout", // SIGKILL after the grace
		"fgsetsid":    "dead/timeout",
	}, outcome)

	// Every process left in a handler's group is gone (SIGTERM, or SIGKILL
	// for the one ignoring it); only the setsid'd ones outlive their job.
	for _, k := range []string{"bgsame", "fg", "ignoresterm", "fgsetsid"} {
		b, err := os.ReadFile(filepath.Join(dir, k))
		require.NoError(t, err, k)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return !processAlive(pid) }, 5*time.Second, 20*time.Millisecond,
			"%s: pid %d still alive", k, pid)
	}
	bg.terminate(t)
	select {
	case code := <-bg.done:
		require.Equal(t, 0, code)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not exit after SIGTERM")
	}
}

// processAlive reports whether pid is a live process (not a zombie waiting
// for its new parent to reap it).
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// A handler that floods its stderr gets execOutputCap bytes of it copied
// to the worker's stderr, then one "truncated" line (F7: 6.4 GB in 60 s
// before); the job still completes.
func TestWorkExecOutputCapped(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "flood"})
	require.NoError(t, err)
	// stdout is the job's result, bounded: a flood of it fails the attempt.
	result, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "result", MaxAttempts: 1})
	require.NoError(t, err)
	// 8 MiB to stderr.
	bg := startCLI(ctx, t, "work", "--database-url", db.URL, "--poll-interval", "100ms",
		"--exec", `cat >/dev/null; if [ "$SKIPLOCK_JOB_KIND" = result ]; then head -c 4194304 /dev/zero | tr '\0' z; exit 0; fi
head -c 4194304 /dev/zero | tr '\0' x >&2; head -c 4194304 /dev/zero | tr '\0' y >&2`)
	require.Eventually(t, func() bool {
		rec, err := c.JobGet(ctx, r.ID)
		return err == nil && rec.State == skiplock.JobStateCompleted
	}, 30*time.Second, 50*time.Millisecond)
	ends, err := c.Wait(ctx, result.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateDead, ends[0].State)
	require.Contains(t, ends[0].Error, "the handler wrote more than 65536 bytes to stdout")
	bg.terminate(t)
	<-bg.done
	logs, err := os.ReadFile(bg.stderr)
	require.NoError(t, err)
	n := strings.Count(string(logs), "x") + strings.Count(string(logs), "y")
	require.GreaterOrEqual(t, n, execOutputCap)
	require.Less(t, n, execOutputCap+4096, "at most the cap (and the log lines' own letters)")
	require.Contains(t, string(logs), "skiplock: job "+strconv.FormatInt(r.ID, 10)+": output truncated")
}
