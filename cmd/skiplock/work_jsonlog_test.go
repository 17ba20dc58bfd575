package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// requireJSONLines fails unless every line of b is one JSON object with
// level and msg, and returns them.
func requireJSONLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(line, &rec), "line %d is not one JSON object: %.200q", i+1, line)
		require.NotEmpty(t, rec["level"], "line %d", i+1)
		require.NotEmpty(t, rec["msg"], "line %d", i+1)
		recs = append(recs, rec)
	}
	return recs
}

// Under --log-format json every line the worker writes on stderr is one
// JSON object, whatever its --exec children write: NUL bytes, invalid
// UTF-8, terminal escapes and a megabyte without a newline become bounded,
// sanitized "job output" records; durations are seconds.
func TestWorkJSONLogsParseWhateverTheChildWrites(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	for _, kind := range []string{"nul", "bad-utf8", "ansi", "mega", "fails"} {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: kind})
		require.NoError(t, err)
	}
	script := `case "$SKIPLOCK_JOB_KIND" in
nul) printf 'a\000b\000c\n' >&2 ;;
bad-utf8) printf 'caf\303 \377\376 end\n' >&2 ;;
ansi) printf '\033[31mred\033[0m \033]0;title\007plain\r\n' >&2; printf 'out\033[2J\n' ;;
mega) head -c 1100000 /dev/zero | tr '\000' 'x' >&2 ;;
fails) printf 'boom\n' >&2; exit 3 ;;
esac`
	bg := startCLI(ctx, t, "work", "--database-url", db.URL, "--exec", script, "--poll-interval", "50ms",
		"--log-format", "json", "--max-attempts", "1")
	require.Eventually(t, func() bool {
		n, err := inFlight(ctx, db)
		return err == nil && n == 0
	}, 30*time.Second, 50*time.Millisecond, "the jobs never finished")
	bg.terminate(t)
	require.Equal(t, 0, <-bg.done)
	errb, err := os.ReadFile(bg.stderr)
	require.NoError(t, err)
	recs := requireJSONLines(t, errb)

	var lines []string
	var outBytes int
	truncated, dead := false, false
	for _, r := range recs {
		switch r["msg"] {
		case "skiplock: job output":
			line := r["line"].(string)
			require.True(t, utf8.ValidString(line))
			require.LessOrEqual(t, len(line), execLineBytes*3, "bounded")
			require.NotContains(t, line, "\x00")
			require.NotContains(t, line, "\x1b")
			require.Contains(t, []string{"stdout", "stderr"}, r["stream"])
			require.NotZero(t, r["job_id"])
			lines = append(lines, line)
			if r["kind"] == "mega" {
				outBytes += len(line)
			}
		case "skiplock: job output truncated; the rest is not logged":
			truncated = true
		case "skiplock: job moved to the dead-letter table":
			dead = true
		case "skiplock: draining; send the signal again to stop at once":
			require.IsType(t, float64(0), r["drain_timeout"], "a duration is a number of seconds")
			require.InDelta(t, 25, r["drain_timeout"], 0.001)
		}
	}
	has := func(want string) bool { return slices.Contains(lines, want) }
	require.True(t, has("a\uFFFDb\uFFFDc"), "NUL shown, not carried")
	require.True(t, has("caf\uFFFD \uFFFD end"), "invalid UTF-8 replaced")
	require.True(t, has("red plain"), "escapes stripped")
	require.False(t, has("out"), "stdout is the job's result, never logged")
	require.True(t, has("boom"))
	require.True(t, truncated, "the megabyte is cut at the per-run cap")
	require.Equal(t, execOutputCap, outBytes)
	require.True(t, dead)
}

// Exit errors, usage errors included, are one JSON record under
// --log-format json; text stays as it was.
func TestExitErrorIsJSON(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "job", "get", "abc", "--log-format", "json", "--database-url", "postgres://127.0.0.1:1/x")
	require.Equal(t, 2, code)
	recs := requireJSONLines(t, []byte(stderr))
	require.Len(t, recs, 1)
	require.Equal(t, "ERROR", recs[0]["level"])
	require.Contains(t, recs[0]["msg"], "ID: must be a positive job id")
	require.EqualValues(t, 2, recs[0]["exit_code"])

	code, _, stderr = runCLI(t, "job", "nosuch", "--log-format", "json")
	require.NotEqual(t, 0, code)
	requireJSONLines(t, []byte(stderr))

	code, _, stderr = runCLI(t, "job", "get", "abc")
	require.Equal(t, 2, code)
	require.True(t, strings.HasPrefix(stderr, "skiplock: ID: must be a positive job id"), stderr)
}

// inFlight counts the jobs not yet finished (in flight) in db.
func inFlight(ctx context.Context, db *dbtest.DB) (int, error) {
	var n int
	err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Schema+".jobs").Scan(&n)
	return n, err
}

// The notes commands print on stderr (a dry run, a warning) are JSON
// records under --log-format json too.
func TestCommandNotesAreJSON(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	for _, args := range [][]string{
		{"queue", "pause", "typo-queue"},
		{"dlq", "replay", "--kind", "nothing"},
	} {
		code, _, stderr := runCLI(t, append(args, "--log-format", "json", "--database-url", db.URL)...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		recs := requireJSONLines(t, []byte(stderr))
		require.NotEmpty(t, recs, args)
	}
}

// outputLines: whole lines one record each, a long line in parts marked
// part, a last line without a newline logged at flush, and no record
// holding a newline.
func TestOutputLines(t *testing.T) {
	var buf bytes.Buffer
	g := testGlobals()
	g.logFormat = "json"
	run := &outputLog{log: g.loggerAt(&buf, slog.LevelDebug), left: execOutputCap}
	l := run.stream("stderr")
	long := strings.Repeat("y", execLineBytes+10)
	for _, chunk := range []string{"one\ntw", "o\n" + long, "\nthree\nfo", "ur"} {
		_, err := l.Write([]byte(chunk))
		require.NoError(t, err)
	}
	l.flush()
	var got []string
	var parts int
	for _, r := range requireJSONLines(t, buf.Bytes()) {
		line := r["line"].(string)
		require.NotContains(t, line, "\n")
		got = append(got, line)
		if r["part"] == true {
			parts++
		}
	}
	require.Equal(t, []string{"one", "two", long[:execLineBytes], long[execLineBytes:], "three", "four"}, got)
	require.Equal(t, 2, parts)
}
