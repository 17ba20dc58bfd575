package skiplock_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/maintenance"
)

// 1,000,000 finished jobs of one day: the export's rows/s and file size,
// then the automatic export + drop while completions keep arriving (rows
// inserted into today's partition throughout): the dropped day's file
// holds every row of the table before the drop (count and md5), and no
// completion is lost. SKIPLOCK_MEASURE=1 only (figures logged, not
// asserted; the row checks are).
func TestHistoryExportMillionRows(t *testing.T) {
	if os.Getenv("SKIPLOCK_MEASURE") == "" {
		t.Skip("set SKIPLOCK_MEASURE=1 to measure")
	}
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	start := time.Now()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, attempted_at, finished_at,
			queue, kind, payload, tenant, locked_by, max_attempts)
		SELECT nextval('skiplock.jobs_id_seq'), g % 5, 1, f, f, f, f, 'q' || (g % 4), 'invoice.send',
		       jsonb_build_object('customer', 'c' || (g % 10000), 'amount', g % 997, 'currency', 'EUR'), 't' || (g % 100),
		       'host-1:1234', 20
		FROM generate_series(1, 1000000) AS g,
		     LATERAL (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '3 days'
		                     + g * interval '80 milliseconds' AS f) AS x;
		SELECT skiplock.ensure_done_partitions(7)`)
	require.NoError(t, err)
	t.Logf("seeded 1,000,000 finished jobs in %s", time.Since(start).Round(time.Millisecond))
	wantN, wantSum := dayDigest(t, db, 3)
	require.EqualValues(t, 1000000, wantN)

	dir := t.TempDir()
	start = time.Now()
	files, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dir})
	took := time.Since(start)
	require.NoError(t, err)
	require.Len(t, files, 1)
	t.Logf("HistoryExport: %d rows in %s = %.0f rows/s; file %.1f MB (%.0f bytes/row)", files[0].Rows, took.Round(time.Millisecond),
		float64(files[0].Rows)/took.Seconds(), float64(files[0].Bytes)/1e6, float64(files[0].Bytes)/float64(files[0].Rows))
	start = time.Now()
	pq, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: t.TempDir(), Format: skiplock.HistoryFormatParquet})
	took = time.Since(start)
	require.NoError(t, err)
	require.EqualValues(t, 1000000, pq[0].Rows)
	t.Logf("HistoryExport parquet: %d rows in %s = %.0f rows/s; file %.1f MB (%.0f bytes/row)", pq[0].Rows, took.Round(time.Millisecond),
		float64(pq[0].Rows)/took.Seconds(), float64(pq[0].Bytes)/1e6, float64(pq[0].Bytes)/float64(pq[0].Rows))
	var tableBytes int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_total_relation_size(c.oid) FROM pg_class AS c
		WHERE c.relname = 'jobs_done_' || to_char((now() AT TIME ZONE 'UTC')::date - 3, 'YYYYMMDD')`).Scan(&tableBytes))
	t.Logf("the day's partition in the database: %.1f MB", float64(tableBytes)/1e6)

	// The automatic pass under load: completions keep landing in today's
	// partition while the old day is exported and dropped.
	var inserted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tag, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload)
					SELECT nextval('skiplock.jobs_id_seq'), 0, 1, now(), now(), now(), 'q', 'live', '{}' FROM generate_series(1, 100)`)
				if err != nil {
					t.Error(err)
					return
				}
				inserted.Add(tag.RowsAffected())
			}
		}()
	}
	auto := t.TempDir()
	r := maintenance.NewRetention(maintenance.RetentionConfig{DB: db.Pool, Schema: "skiplock", Archive: true,
		CompletedRetention: 48 * time.Hour, ExportTo: auto})
	start = time.Now()
	st, err := r.MaintainPartitions(ctx)
	took = time.Since(start)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.Equal(t, 1, st.Exported)
	require.Equal(t, 1, st.Dropped)
	m := readManifest(t, auto)
	gotN, gotSum := fileDigest(t, auto, m.Files[0].Name)
	require.Equal(t, wantN, gotN, "every row of the dropped day is in its file")
	require.Equal(t, wantSum, gotSum)
	var live int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_done WHERE kind = 'live'`).Scan(&live))
	require.Equal(t, inserted.Load(), live, "no completion lost while the pass ran")
	t.Logf("export + drop under load: %s; %d completions written meanwhile, all kept", took.Round(time.Millisecond), live)
}
