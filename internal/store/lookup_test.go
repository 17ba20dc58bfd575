package store_test

import (
	"context"
	"fmt"
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

// A look-up of a few ids (a Wait for one job) runs the plan its connection
// made once; a look-up of many, a plan made for its size each time. The
// one plan is made here while jobs_done is empty, as on a fresh database,
// and still reads it through its BRIN index once it holds rows: no
// sequential scan of the history.
func TestJobsFinishedPlanOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	fs, err := st.JobsFinished(ctx, conn, []int64{1})
	require.NoError(t, err)
	require.Equal(t, []string{"gone"}, states(fs), "nothing finished yet")
	seed(t, db, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload, result)
		SELECT g, 0, 1, now(), now(), now(), 'q', 'k', jsonb_build_object('pad', repeat('x', 200)), to_jsonb(g)
		FROM generate_series(1, 20000) AS g;
		ANALYZE skiplock.jobs_done`)
	for _, id := range []int64{1, 19999, 12345} {
		fs, err := st.JobsFinished(ctx, conn, []int64{id})
		require.NoError(t, err)
		require.Equal(t, []string{"completed"}, states(fs), "job %d", id)
		require.Equal(t, fmt.Sprint(id), string(fs[0].Result))
	}
	many := make([]int64, 40)
	for i := range many {
		many[i] = int64(500 * (i + 1))
	}
	fs, err = st.JobsFinished(ctx, conn, many)
	require.NoError(t, err)
	require.Len(t, fs, len(many))
	for _, f := range fs {
		require.Equal(t, "completed", f.State, "job %d", f.ID)
	}

	var generic, custom int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '%Which of the jobs $1 have finished%'`).Scan(&generic, &custom))
	require.Equal(t, int64(4), generic, "the four look-ups of one id: one plan, made once")
	require.Equal(t, int64(1), custom, "the look-up of 40 ids: its own plan")

	// The plan those four ran, made on the empty history: as a new
	// connection would make it now, under the same settings.
	_, err = conn.Exec(ctx, "TRUNCATE skiplock.jobs_done")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ANALYZE skiplock.jobs_done")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE finished_plan AS "+st.SQL("jobs_finished"))
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, st.SQL("jobs_finished_settings"), 1) // its settings hold to the transaction's end
	require.NoError(t, err)
	plan := dbtest.Explain(t, tx, "EXPLAIN EXECUTE finished_plan('{1}')")
	require.NotRegexp(t, `Seq Scan on jobs_done`, plan)
	require.Regexp(t, `Bitmap Index Scan on jobs_done_\w+`, plan, "the history read through its BRIN index")
}

func states(fs []store.Finished) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.State
	}
	return out
}
