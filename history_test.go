package skiplock_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/history"
	"github.com/skiplock/skiplock/internal/maintenance"
)

// seedHistory puts n finished jobs on each of the UTC days daysAgo before
// today into jobs_done, each day in its own partition.
func seedHistory(t *testing.T, db *dbtest.DB, n int, daysAgo ...int) {
	t.Helper()
	ctx := context.Background()
	for _, d := range daysAgo {
		_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload, tenant)
			SELECT nextval('skiplock.jobs_id_seq'), 0, 1, f, f, f, 'q', 'report', jsonb_build_object('n', g, 'quote', 'a "b" \ c'), 't' || (g % 7)
			FROM generate_series(1, $1::int) AS g,
			     LATERAL (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - $2::int * interval '1 day'
			                     + g * interval '1 second' AS f) AS x`, n, d)
		require.NoError(t, err)
	}
	_, err := db.Pool.Exec(ctx, `SELECT skiplock.ensure_done_partitions(0)`) // a partition for each day
	require.NoError(t, err)
}

// dayDigest is the count and md5 of a day's rows as the export writes them
// (to_jsonb, in id order), read from the table.
func dayDigest(t *testing.T, db *dbtest.DB, daysAgo int) (int64, string) {
	t.Helper()
	var n int64
	var sum string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*), coalesce(md5(string_agg(to_jsonb(d)::text, E'\n' ORDER BY d.id)), '')
		FROM skiplock.jobs_done AS d
		WHERE d.finished_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - $1::int * interval '1 day'
		  AND d.finished_at < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - ($1::int - 1) * interval '1 day'`,
		daysAgo).Scan(&n, &sum))
	return n, sum
}

// fileDigest is the same of an exported file.
func fileDigest(t *testing.T, path string) (int64, string) {
	t.Helper()
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	zr, err := gzip.NewReader(fh)
	require.NoError(t, err)
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var lines []string
	for sc.Scan() {
		require.True(t, json.Valid(sc.Bytes()))
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	h := md5.Sum([]byte(strings.Join(lines, "\n")))
	return int64(len(lines)), hex.EncodeToString(h[:])
}

// HistoryExport writes each finished day to a compressed NDJSON file with a
// manifest whose counts and checksums match the table, resumes without
// writing a day again, and HistoryImport brings a file back.
func TestHistoryExportAndImport(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	seedHistory(t, db, 500, 3, 2)
	dir := t.TempDir()

	files, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dir})
	require.NoError(t, err)
	require.Len(t, files, 2)
	m, err := history.ReadManifest(dir)
	require.NoError(t, err)
	require.Len(t, m.Files, 2)
	for i, daysAgo := range []int{3, 2} {
		f := files[i]
		require.False(t, f.Resumed)
		wantN, wantSum := dayDigest(t, db, daysAgo)
		gotN, gotSum := fileDigest(t, filepath.Join(dir, f.Name))
		require.Equal(t, wantN, f.Rows)
		require.Equal(t, wantN, gotN)
		require.Equal(t, wantSum, gotSum, "every row, byte for byte")
		require.Equal(t, m.Files[i].SHA256, f.SHA256)
		require.Less(t, f.MinID, f.MaxID)
	}

	again, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dir})
	require.NoError(t, err)
	require.True(t, again[0].Resumed && again[1].Resumed, "resumed: nothing written again")
	// A damaged file is written again.
	require.NoError(t, os.WriteFile(filepath.Join(dir, files[0].Name), []byte("garbage"), 0o644))
	again, err = c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dir})
	require.NoError(t, err)
	require.False(t, again[0].Resumed)
	require.True(t, again[1].Resumed)

	// Import into a history that lost the day: the rows come back once.
	_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_done WHERE id BETWEEN $1 AND $2`, files[0].MinID, files[0].MaxID)
	require.NoError(t, err)
	read, inserted, err := c.HistoryImport(ctx, filepath.Join(dir, files[0].Name))
	require.NoError(t, err)
	require.EqualValues(t, 500, read)
	require.EqualValues(t, 500, inserted)
	rec, err := c.JobGet(ctx, files[0].MinID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateCompleted, rec.State)
	_, inserted, err = c.HistoryImport(ctx, filepath.Join(dir, files[0].Name))
	require.NoError(t, err)
	require.Zero(t, inserted, "imported twice, inserted once")
	n, sum := dayDigest(t, db, 3)
	gotN, gotSum := fileDigest(t, filepath.Join(dir, files[0].Name))
	require.Equal(t, gotN, n)
	require.Equal(t, gotSum, sum)
}

// With an export directory, retention exports each day past retention
// before it drops its partition, loses no row (counts and checksums taken
// from the table before the drop), and refuses the drop when the export
// fails.
func TestRetentionExportsBeforeTheDrop(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	seedHistory(t, db, 300, 4, 3)
	before := map[int][2]any{}
	for _, d := range []int{4, 3} {
		n, sum := dayDigest(t, db, d)
		before[d] = [2]any{n, sum}
	}
	partitions := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'skiplock.jobs_done'::regclass
			AND inhrelid::regclass::text ~ 'jobs_done_[0-9]{8}$'`).Scan(&n))
		return n
	}
	_, err := db.Pool.Exec(ctx, `SELECT skiplock.ensure_done_partitions(7)`) // as the pass keeps them
	require.NoError(t, err)
	had := partitions()

	// An export directory that cannot be written: nothing is dropped.
	blocked := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocked, nil, 0o644))
	r := maintenance.NewRetention(maintenance.RetentionConfig{DB: db.Pool, Schema: "skiplock", Archive: true,
		CompletedRetention: 24 * time.Hour, ExportDir: blocked})
	_, err = r.MaintainPartitions(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "not dropped")
	require.Equal(t, had, partitions(), "no partition dropped without its export")

	dir := t.TempDir()
	r = maintenance.NewRetention(maintenance.RetentionConfig{DB: db.Pool, Schema: "skiplock", Archive: true,
		CompletedRetention: 24 * time.Hour, ExportDir: dir})
	st, err := r.MaintainPartitions(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Exported)
	require.Equal(t, 2, st.Dropped)
	require.Equal(t, had-2, partitions())
	m, err := history.ReadManifest(dir)
	require.NoError(t, err)
	require.Len(t, m.Files, 2)
	for i, d := range []int{4, 3} {
		n, sum := fileDigest(t, filepath.Join(dir, m.Files[i].Name))
		require.Equal(t, before[d][0], n, "day -%d: every row exported", d)
		require.Equal(t, before[d][1], sum, "day -%d: byte for byte", d)
		require.Equal(t, n, m.Files[i].Rows)
	}
	st, err = r.MaintainPartitions(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Exported+st.Dropped, "nothing left to do")
}

// A Parquet export holds the same rows, column for column: imported back
// into an emptied history, the day's rows are those exported as NDJSON.
func TestHistoryExportParquet(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	seedHistory(t, db, 300, 2)
	_, err := db.Pool.Exec(ctx, `UPDATE skiplock.jobs_done SET metadata = '{"trace": "x"}', last_error = 'boom', limit_weight = 3,
		attempted_at = finished_at - interval '1 second', entity = 'e' || id WHERE id % 2 = 0`)
	require.NoError(t, err)
	wantN, wantSum := dayDigest(t, db, 2)
	dir := t.TempDir()
	files, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dir, Format: skiplock.HistoryFormatParquet})
	require.NoError(t, err)
	require.Len(t, files, 1)
	require.Equal(t, skiplock.HistoryFormatParquet, files[0].Format)
	require.True(t, strings.HasSuffix(files[0].Name, ".parquet"))
	require.EqualValues(t, wantN, files[0].Rows)

	_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_done`)
	require.NoError(t, err)
	read, inserted, err := c.HistoryImport(ctx, filepath.Join(dir, files[0].Name))
	require.NoError(t, err)
	require.EqualValues(t, wantN, read)
	require.EqualValues(t, wantN, inserted)
	gotN, gotSum := dayDigest(t, db, 2)
	require.Equal(t, wantN, gotN)
	require.Equal(t, wantSum, gotSum, "every column of every row survives the round trip")

	_, err = c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dir, Format: "csv"})
	require.Error(t, err)
}
