package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// skiplock job wait prints each job's result (an --exec handler's stdout;
// a failed job's reason and last error) and exits 0 when all completed, 4
// when one failed, 5 when --timeout passed first; the handler's progress
// lines on $SKIPLOCK_PROGRESS_FD reach job get. stdout is never logged.
func TestJobWaitExitCodesAndExecResults(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	enq := func(kind string, p any) string {
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: kind, Payload: p, MaxAttempts: 1})
		require.NoError(t, err)
		return strconv.FormatInt(r.ID, 10)
	}
	jsonJob := enq("json", nil)
	textJob := enq("text", nil)
	failJob := enq("fail", nil)
	slowJob := enq("slow", nil)

	// Nothing runs yet: --timeout passes, exit 5.
	code, out, errOut := runCLI(t, "job", "wait", jsonJob, "--timeout", "300ms", "--database-url", db.URL, "--poll-interval", "100ms")
	require.Equal(t, exitWaitTimedOut, code, "stderr: %s", errOut)
	require.Contains(t, out, jsonJob+"\twaiting")

	// The slow job reports half way, then waits for the test to create gate
	// (30 s at most, so that a failed test leaves no shell polling) before
	// it finishes: a fixed sleep (3 s) let a loaded CI machine reach the
	// progress check after the job had finished, and "half way" was never
	// seen again.
	gate := filepath.Join(t.TempDir(), "go")
	script := `case "$SKIPLOCK_JOB_KIND" in
json) echo '{"url": "https://example.test/r.pdf"}' ;;
text) printf 'SECRET-RESULT line\n' ;;
fail) echo "the printer is on fire" >&2; exit 3 ;;
slow) echo "5 10 half way" >&$SKIPLOCK_PROGRESS_FD; i=0; while [ ! -e '` + gate + `' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo "10 10 done" >&$SKIPLOCK_PROGRESS_FD; echo '"slow"' ;;
esac`
	bg := startCLI(ctx, t, "work", "--database-url", db.URL, "--exec", script, "--poll-interval", "100ms")

	code, out, errOut = runCLI(t, "job", "wait", jsonJob, textJob, "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, "stderr: %s", errOut)
	var ends []skiplock.JobEnd
	require.NoError(t, json.Unmarshal([]byte(out), &ends))
	require.Len(t, ends, 2)
	require.JSONEq(t, `{"url": "https://example.test/r.pdf"}`, string(ends[0].Result))
	require.Equal(t, `"SECRET-RESULT line"`, string(ends[1].Result), "text on stdout is kept as a JSON string")

	code, out, errOut = runCLI(t, "job", "wait", jsonJob, failJob, "--database-url", db.URL)
	require.Equal(t, exitWaitFailed, code, "stderr: %s", errOut)
	require.Contains(t, out, failJob+"\tdead\terror: exit status 3: the printer is on fire")

	// Progress while the slow job runs, then its last report and result.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, out, _ = runCLI(t, "job", "get", slowJob, "--database-url", db.URL)
		if code == 0 && strings.Contains(out, "5 of 10 (50.0%) half way") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job get never showed the progress; last: exit %d\n%s", code, out)
		}
	}
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	code, out, errOut = runCLI(t, "job", "wait", slowJob, "--progress", "--poll-interval", "200ms", "--database-url", db.URL)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	require.Contains(t, out, slowJob+"\tcompleted\t\"slow\"")
	code, out, _ = runCLI(t, "job", "get", slowJob, "--database-url", db.URL)
	require.Equal(t, 0, code)
	require.Contains(t, out, "10 of 10 (100.0%) done")
	require.Regexp(t, `result +"slow"`, out)

	bg.terminate(t)
	require.Equal(t, 0, <-bg.done)
	logs := readFile(t, bg.stderr)
	require.NotContains(t, logs, "SECRET-RESULT", "a result is never logged")
	require.Contains(t, logs, "the printer is on fire", "stderr still reaches the log")

	// Usage.
	code, _, errOut = runCLI(t, "job", "wait", "--database-url", db.URL)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "ID")
	code, _, errOut = runCLI(t, "job", "wait", "x", "--database-url", db.URL)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "ID")
}

func TestParseProgressLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line        string
		done, total int64
		note        string
		ok          bool
	}{
		{"412 10000 rows imported", 412, 10000, "rows imported", true},
		{"7", 7, 0, "", true},
		{"  3 4  ", 3, 4, "", true},
		{"half", 0, 0, "", false},
		{"-1 4", 0, 0, "", false},
		{"1 x", 0, 0, "", false},
	} {
		done, total, note, ok := parseProgress(tc.line)
		require.Equal(t, tc.ok, ok, tc.line)
		require.Equal(t, []any{tc.done, tc.total, tc.note}, []any{done, total, note}, tc.line)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}
