package faults

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// TestAwaitUnderFaults: a process awaits 2,000 jobs while three worker
// processes run them and are killed with SIGKILL and restarted (one every
// 1.2 s for the first 30 s), and the awaiting process's connections are
// terminated again and again until every Wait returned: its LISTEN
// connection (skiplock-wait) every 150 ms, its pool's every 600 ms.
// It awaits each job through several callers at once: one Wait for all,
// one per 250 jobs, one for each of every 40th job alone, and one caller
// whose Wait calls end every 700 ms and await what is left again. The
// checker (checkOpts.awaits) then holds every call to its promise: it
// returned, and reported each job it awaited exactly once with the end the
// database records (completed with its result, which names the attempt
// that wrote it, or dead with its last error). The same with PollOnly:
// correct without NOTIFY.
func TestAwaitUnderFaults(t *testing.T) {
	t.Parallel()
	for _, pollOnly := range []bool{false, true} {
		name := "notify"
		if pollOnly {
			name = "poll-only"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			awaitUnderFaults(t, pollOnly)
		})
	}
}

func awaitUnderFaults(t *testing.T, pollOnly bool) {
	e := newEnv(t)
	// The kills stop after killWindow and the drain then ends on its own;
	// the terminated connections go on until every Wait returned. A kill
	// every 1.2 s until the last job (2,000 jobs, -race, beside the other
	// fault tests) made the drain outlast a 90 s context on a slow day,
	// the awaited jobs not finished when the Waits gave up: 97 s here on
	// 2026-11-29, before and after the day's changes alike.
	const killWindow = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const n = 2000
	ps := make([]skiplock.EnqueueParams, n)
	for i := range ps {
		j, maxAttempts := job{Sleep: []int{5 + i%4*5}, Result: true}, 5
		switch i % 20 {
		case 0: // dead: its last error is its result
			j.Mode, maxAttempts = []string{"fail"}, 2
		case 10: // completed at the second attempt, whose result counts
			j.Mode = []string{"fail", "ok"}
		}
		ps[i] = skiplock.EnqueueParams{Kind: "job", Payload: j, MaxAttempts: maxAttempts}
	}
	_, err := e.client.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	rows, err := e.pool.Query(ctx, "SELECT id FROM skiplock.jobs ORDER BY id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, n)

	a := e.awaiter(pollOnly)
	a.wait(ctx, "all", ids)
	for c := range slices.Chunk(ids, 250) {
		a.wait(ctx, fmt.Sprintf("chunk-%d", c[0]), c)
	}
	for i := 0; i < n; i += 40 {
		a.wait(ctx, fmt.Sprintf("one-%d", ids[i]), ids[i:i+1])
	}
	a.waitInTurns(ctx, "in-turns", ids, 700*time.Millisecond)
	returned := make(chan []*awaitCall)
	go func() { returned <- a.done() }()

	names := []string{"a", "b", "c"}
	ws := map[string]*proc{}
	for _, name := range names {
		ws[name] = e.worker(name, "-archive", "-concurrency", "8")
	}
	var calls []*awaitCall
	kills, listenerKills, poolKills := 0, 0, 0
	faultsFrom := time.Now()
faults:
	for tick := 1; ; tick++ {
		select {
		case calls = <-returned:
			break faults
		case <-time.After(150 * time.Millisecond):
		}
		if !pollOnly {
			listenerKills += e.terminate("skiplock-wait")
		}
		if tick%4 == 0 {
			poolKills += e.terminate("awaiter")
		}
		if tick%8 == 0 && time.Since(faultsFrom) < killWindow {
			name := names[kills%len(names)]
			ws[name].kill9(t)
			kills++
			ws[name] = e.worker(name, "-archive", "-concurrency", "8")
		}
	}
	if pollOnly {
		require.Zero(t, e.count("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skiplock-wait' AND datname = current_database()"),
			"no LISTEN with PollOnly")
	}

	e.waitDrained(30 * time.Second)
	for _, p := range ws {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range ws {
		require.True(t, p.wait(15*time.Second), "%s did not drain", p.app)
	}
	r := checkInvariants(t, e, checkOpts{committed: ids, archive: true, awaits: calls})
	require.Equal(t, len(calls), r.AwaitCalls)
	require.Equal(t, n, r.Completed+r.Dead)
	require.Positive(t, r.Dead, "some awaited jobs ended dead")
	require.GreaterOrEqual(t, kills, 2, "workers were killed while jobs were awaited")
	require.Positive(t, poolKills, "the awaiter's pool connections were killed")
	if !pollOnly {
		require.Positive(t, listenerKills, "the awaiter's LISTEN connection was killed")
	}
	t.Logf("awaited %d jobs through %d Wait calls (poll only: %v) across %d kill -9, %d terminated LISTEN connections, %d terminated pool connections; %d look-ups reported jobs gone that a second read found; %s",
		n, len(calls), pollOnly, kills, listenerKills, poolKills, a.reReads.Load(), r)
}
