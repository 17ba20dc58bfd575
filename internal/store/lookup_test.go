package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// jobs_finished reads jobs_done once per span of the ids (ids less than
// 4,096 apart share one): ids far apart, a retried job's latest row, a dead
// letter, a job still open, an id no table holds and an id asked twice each
// come back as they are, once. summarize_done first summarizes the whole
// ranges filled since, and nothing the second time.
func TestJobsFinishedAcrossSpans(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	// 3,000 history rows (a few ranges of 16 pages) around ids 1-3,000,
	// then rows far apart; id 7 finished twice (a retried job), the later
	// row with its result.
	seed(t, db, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload, result)
		SELECT g, 0, 1, now(), now(), now(), 'q', 'k', jsonb_build_object('pad', repeat('x', 200)), to_jsonb(g)
		FROM generate_series(1, 3000) AS g`)
	seed(t, db, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload, result)
		VALUES (7, 0, 2, now(), now(), now() + interval '1 second', 'q', 'k', '{}', '"seven, again"'),
		       (50000, 0, 1, now(), now(), now(), 'q', 'k', '{}', '"fifty thousand"'),
		       (900000, 0, 1, now(), now(), now(), 'q', 'k', '{}', NULL)`)
	seed(t, db, `INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind, reason, payload, last_error)
		VALUES (20000, 0, 3, 3, now(), now(), 'q', 'k', 'error', '{}', 'it broke')`)
	var open int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs (queue, kind) VALUES ('q', 'k') RETURNING id`).Scan(&open))

	var summarized int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.summarize_done()`).Scan(&summarized))
	require.Positive(t, summarized, "the whole ranges filled so far")
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.summarize_done()`).Scan(&summarized))
	require.Zero(t, summarized, "nothing new")

	fs, err := st.JobsFinished(ctx, db.Pool, []int64{2999, 7, 50000, 20000, open, 123456789, 900000, 7})
	require.NoError(t, err)
	got := map[int64]store.Finished{}
	for _, f := range fs {
		_, twice := got[f.ID]
		require.False(t, twice, "job %d reported twice", f.ID)
		got[f.ID] = f
	}
	require.Len(t, got, 6, "every id but the open job's, once")
	require.NotContains(t, got, open)
	want := map[int64]struct{ state, result string }{
		2999:      {"completed", "2999"},
		7:         {"completed", `"seven, again"`},
		50000:     {"completed", `"fifty thousand"`},
		900000:    {"completed", ""},
		20000:     {"dead", ""},
		123456789: {"gone", ""},
	}
	for id, w := range want {
		require.Equal(t, w.state, got[id].State, "job %d", id)
		require.Equal(t, w.result, string(got[id].Result), "job %d", id)
	}
	require.Equal(t, "it broke", *got[20000].LastError)
}
