package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// Issue 14 §1's measurement, made a test: an --exec handler whose bad jobs
// write a NUL byte and invalid UTF-8 to stderr (and one that floods stderr
// with multi-byte characters) and exit 1, beside good jobs, concurrency 4,
// --max-attempts 2. Every job ends completed or dead-lettered (none stays
// running), the stored tails are storable and bounded, and SIGTERM drains.
// Before the fix the completer retried the refused batch forever and every
// job of the process stayed running.
func TestWorkExecHostileStderr(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	const good, bad = 30, 6
	for i := range good + bad {
		kind := "good"
		switch {
		case i%6 == 5 && i < 20:
			kind = "bad"
		case i%6 == 5:
			kind = "flood"
		}
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: kind, Payload: map[string]int{"secret": 4242 + i}})
		require.NoError(t, err)
	}
	script := filepath.Join(t.TempDir(), "handler.sh")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
cat >/dev/null
case "$SKIPLOCK_JOB_KIND" in
bad) printf 'crash\000dump \377\376 end\n' >&2; exit 1 ;;
flood) i=0; while [ $i -lt 700 ]; do printf 'é€' >&2; i=$((i+1)); done; printf '\000' >&2; exit 1 ;;
esac
exit 0
`), 0o755))
	bg := startCLI(ctx, t, "work", "--database-url", db.URL, "--exec", script, "--concurrency", "4",
		"--max-attempts", "2", "--poll-interval", "100ms")
	count := func(sql string) int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, sql).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return count("SELECT count(*) FROM skiplock.jobs") == 0 }, 60*time.Second, 50*time.Millisecond,
		"jobs left: %d running", count("SELECT count(*) FROM skiplock.jobs WHERE state = 'running'"))
	bg.terminate(t)
	select {
	case code := <-bg.done:
		require.Equal(t, 0, code)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not drain and exit after SIGTERM")
	}

	rows, err := db.Pool.Query(ctx, "SELECT kind, last_error FROM skiplock.jobs_dead")
	require.NoError(t, err)
	kinds := map[string]int{}
	for rows.Next() {
		var kind, text string
		require.NoError(t, rows.Scan(&kind, &text))
		kinds[kind]++
		require.True(t, utf8.ValidString(text))
		require.NotContains(t, text, "\x00")
		require.LessOrEqual(t, len(text), 4096)
		switch kind {
		case "bad":
			require.Equal(t, "exit status 1: crash\uFFFDdump \uFFFD end", text)
		case "flood":
			// The last 2,048 bytes of stderr, cut on a character boundary.
			tail := strings.TrimPrefix(text, "exit status 1: ")
			require.True(t, strings.HasSuffix(tail, "é€\uFFFD"), "tail ends with the flood: %q", tail[len(tail)-20:])
			require.LessOrEqual(t, len(tail), 2048)
			require.Greater(t, len(tail), 2040)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"bad": 3, "flood": 3}, kinds)
	logs, err := os.ReadFile(bg.stderr)
	require.NoError(t, err)
	require.NotContains(t, string(logs), "writing job outcomes failed")
	require.Equal(t, bad, strings.Count(string(logs), `msg="skiplock: job moved to the dead-letter table"`))
	require.NotContains(t, string(logs), "4242", "payloads never reach the logs")
}

// FuzzExecStderr drives arbitrary bytes through an --exec child's stderr
// against a real server: the failed attempt is written (a retry, then the
// dead letter), the stored text is storable and bounded, and it is the
// child's stderr unchanged when that was storable and short.
func FuzzExecStderr(f *testing.F) {
	f.Add([]byte("crash\x00dump \xff\xfe end"))
	f.Add([]byte(strings.Repeat("é€", 700)))
	f.Add([]byte(strings.Repeat("😀", 600) + "\x00"))
	f.Add([]byte("plain failure"))
	db := dbtest.New(f)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Logger: slog.New(slog.DiscardHandler),
		Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		f.Fatal(err)
	}
	file := filepath.Join(f.TempDir(), "stderr")
	command := "cat >/dev/null; cat '" + file + "' >&2; exit 1"
	if err := skiplock.HandleFallback(c, execHandler(command, defaultKillGrace, &lockedWriter{w: &bytes.Buffer{}}, nil)); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "fuzz", Payload: json.RawMessage(`{}`), MaxAttempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Drain(ctx, skiplock.DrainOptions{IncludeScheduled: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Retried != 1 || res.DeadLettered != 1 {
			t.Fatalf("want one retry and one dead letter, got %+v", res)
		}
		var stored string
		if err := db.Pool.QueryRow(ctx, "SELECT last_error FROM skiplock.jobs_dead WHERE id = $1", r.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(stored) || strings.Contains(stored, "\x00") || len(stored) > 4096 {
			t.Fatalf("stored text not storable or too long (%d bytes)", len(stored))
		}
		if !strings.HasPrefix(stored, "exit status 1") {
			t.Fatalf("stored %q", stored)
		}
		if utf8.Valid(b) && !bytes.Contains(b, []byte{0}) && len(b) <= stderrTailBytes {
			if want := "exit status 1: " + strings.TrimSpace(string(b)); stored != want {
				t.Fatalf("storable stderr changed: want %q, stored %q", want, stored)
			}
		}
	})
}
