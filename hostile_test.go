package skiplock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// deadErrors returns the stored error text of every dead letter.
func deadErrors(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT coalesce(last_error, '') FROM skiplock.jobs_dead ORDER BY id")
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// Issue 14 §1, with a Go handler: error text carrying NUL bytes, invalid
// UTF-8 or megabytes of multi-byte characters fails only its own job. With
// good jobs beside them, concurrency 4 and two attempts, every job ends
// completed or dead-lettered (none stays running), the stored text is
// storable and bounded, and each failed attempt is logged with its text.
func TestHostileErrorTextFailsOnlyItsJob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	logs := &dbtest.LogBuffer{}
	c := newClient(t, db.Pool, skiplock.Config{
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Backoff: func(int) time.Duration { return time.Millisecond },
		Pools:   []skiplock.WorkerPool{{Concurrency: 4}},
	})
	hostile := map[string]string{
		"nul":     "crash\x00dump",
		"invalid": "bad \xff\xfe bytes",
		"huge":    strings.Repeat("é", 1<<20) + "\x00",
	}
	type args struct{ Mode string }
	require.NoError(t, skiplock.Handle(c, "job", func(ctx context.Context, j *skiplock.Job[args]) error {
		if s, ok := hostile[j.Args.Mode]; ok {
			return errors.New(s)
		}
		return nil
	}, skiplock.WithMaxAttempts(2)))
	const good = 60
	for i := range good {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "job", Payload: args{Mode: "good"}})
		require.NoError(t, err)
		if i%20 == 0 {
			for mode := range hostile {
				_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "job", Payload: args{Mode: mode}})
				require.NoError(t, err)
			}
		}
	}
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	require.Eventually(t, func() bool { return countJobs(t, db.Pool, "true") == 0 }, 60*time.Second, 20*time.Millisecond,
		"jobs left: %d running, %d ready", countJobs(t, db.Pool, "state = 'running'"), countJobs(t, db.Pool, "state = 'ready'"))

	dead := deadErrors(t, db.Pool)
	require.Len(t, dead, 3*len(hostile))
	seen := map[string]int{}
	for _, s := range dead {
		require.True(t, utf8.ValidString(s), "stored text is valid UTF-8")
		require.NotContains(t, s, "\x00")
		require.LessOrEqual(t, len(s), 4096)
		seen[s]++
	}
	require.Equal(t, 3, seen["crash\uFFFDdump"])
	require.Equal(t, 3, seen["bad \uFFFD bytes"])
	require.Equal(t, 3, seen[strings.Repeat("é", (4096-len("…"))/2)+"…"])
	// A batch's lines are logged after its write commits: the table can be
	// empty a moment before the last batch's lines are written.
	var out string
	require.Eventually(t, func() bool {
		out = logs.String()
		return strings.Count(out, `msg="skiplock: job failed; will retry"`) >= 3*len(hostile) &&
			strings.Count(out, `level=ERROR msg="skiplock: job moved to the dead-letter table"`) >= 3*len(hostile)
	}, 5*time.Second, 10*time.Millisecond)
	require.NotContains(t, out, "writing job outcomes failed")
	require.Equal(t, 3*len(hostile), strings.Count(out, `msg="skiplock: job failed; will retry"`), "one line per first attempt")
	require.Equal(t, 3*len(hostile), strings.Count(out, `level=ERROR msg="skiplock: job moved to the dead-letter table"`))
	require.Contains(t, out, `error="crash`+"\uFFFD"+`dump"`)
}

// An undecodable payload is logged with the decoder's reason, never the
// payload, before the job is dead-lettered as discarded.
func TestUndecodablePayloadIsLogged(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	logs := &dbtest.LogBuffer{}
	c := newClient(t, db.Pool, skiplock.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	type args struct{ N int }
	require.NoError(t, skiplock.Handle(c, "typed", func(context.Context, *skiplock.Job[args]) error { return nil }))
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "typed", Payload: json.RawMessage(`{"N": 1234.5678}`)})
	require.NoError(t, err)
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
	require.Equal(t, "discarded", res.Jobs[0].Reason)
	want := "payload does not decode into the handler's type: cannot store a JSON number in Go type int (field N) at byte offset 15"
	require.Equal(t, want, res.Jobs[0].Error)
	out := logs.String()
	require.NotContains(t, out, "1234.5678", "the payload never reaches the logs")
	decodeLine := strings.Index(out, `msg="skiplock: payload does not decode into the handler's type; discarding the job"`)
	deadLine := strings.Index(out, `msg="skiplock: job moved to the dead-letter table"`)
	require.GreaterOrEqual(t, decodeLine, 0, out)
	require.Greater(t, deadLine, decodeLine, "the reason is logged before the job's fate is applied")
	require.Contains(t, out, `reason=discarded`)
}

// FuzzHandlerErrorText drives arbitrary bytes through a Go handler's error
// against a real server: whatever the text, the failed attempt is written
// (a retry, then the dead letter) and the stored text is storable, bounded,
// and unchanged when it was storable and short already.
func FuzzHandlerErrorText(f *testing.F) {
	f.Add([]byte("crash\x00dump"))
	f.Add([]byte("bad \xff\xfe bytes"))
	f.Add([]byte("surrogate \xed\xa0\x80 overlong \xc0\xaf"))
	f.Add([]byte(strings.Repeat("😀", 1100)))
	f.Add([]byte("plain error"))
	db := dbtest.New(f)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Logger: slog.New(slog.DiscardHandler),
		Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		f.Fatal(err)
	}
	var text []byte // the current input; Drain runs the handler in this goroutine
	if err := skiplock.Handle(c, "fuzz", func(context.Context, *skiplock.Job[json.RawMessage]) error {
		return errors.New(string(text))
	}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		text = b
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "fuzz", MaxAttempts: 2})
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
		if stored != res.Jobs[1].Error || res.Jobs[0].Error != stored {
			t.Fatalf("stored %q, Drain reported %q and %q", stored, res.Jobs[0].Error, res.Jobs[1].Error)
		}
		if utf8.Valid(b) && !bytes.Contains(b, []byte{0}) && len(b) <= 4096 && stored != string(b) {
			t.Fatalf("storable text changed: %q became %q", b, stored)
		}
	})
}
