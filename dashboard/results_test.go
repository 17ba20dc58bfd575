package dashboard

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A job's page shows its progress and, once completed, its result; a
// read-only dashboard shows neither the result nor the progress note.
func TestJobPageShowsResultAndProgress(t *testing.T) {
	t.Parallel()
	const secret = "RESULT-PII-77"
	for _, readOnly := range []bool{false, true} {
		f := newFixture(t, Options{ReadOnly: readOnly})
		ctx := context.Background()
		_, err := f.db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_done (id, priority, attempts, max_attempts, run_at, created_at,
			finished_at, queue, kind, payload, result, progress) VALUES (930000, 0, 1, 20, now(), now(), now(), 'pdf', 'render', '{}',
			jsonb_build_object('url', $1::text), '{"done": 10, "total": 10, "note": "pages `+secret+`", "at": "2026-11-28T00:00:00Z"}')`, secret)
		require.NoError(t, err)
		_, err = f.db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, progress)
			VALUES ('pdf', 'render', '{"done": 412, "total": 10000, "note": "rows", "at": "2026-11-28T00:00:00Z"}')`)
		require.NoError(t, err)
		var running int64
		require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT id FROM skiplock.jobs WHERE kind = 'render'`).Scan(&running))

		code, done := f.get("/jobs/930000")
		require.Equal(t, http.StatusOK, code)
		code, ready := f.get("/jobs/" + strconv.FormatInt(running, 10))
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, done, `id="progress"`)
		assert.Contains(t, ready, "412 of 10000")
		if readOnly {
			assert.NotContains(t, done, secret, "a result and a progress note are hidden read-only")
			assert.Contains(t, done, `id="result">Hidden`)
		} else {
			assert.Contains(t, done, secret)
			assert.Contains(t, done, `&#34;url&#34;`)
			assert.Contains(t, ready, "rows")
		}
	}
}
