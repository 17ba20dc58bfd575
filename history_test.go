package skiplock_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
// (to_jsonb, a sealed payload as its envelope, in id order), read from the
// table.
func dayDigest(t *testing.T, db *dbtest.DB, daysAgo int) (int64, string) {
	t.Helper()
	return tableDigest(t, db, "jobs_done", "finished_at", daysAgo)
}

// deadDigest is the same of a day's dead letters.
func deadDigest(t *testing.T, db *dbtest.DB, daysAgo int) (int64, string) {
	t.Helper()
	return tableDigest(t, db, "jobs_dead", "dead_at", daysAgo)
}

func tableDigest(t *testing.T, db *dbtest.DB, table, column string, daysAgo int) (int64, string) {
	t.Helper()
	var n int64
	var sum string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*), coalesce(md5(string_agg(
		((to_jsonb(d) - 'sealed') || jsonb_build_object('payload', skiplock.envelope(d.payload, d.sealed)))::text, E'\n' ORDER BY d.id)), '')
		FROM skiplock.`+table+` AS d
		WHERE d.`+column+` >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - $1::int * interval '1 day'
		  AND d.`+column+` < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - ($1::int - 1) * interval '1 day'`,
		daysAgo).Scan(&n, &sum))
	return n, sum
}

// fileDigest is the same of an exported file at a destination (a
// directory or a bucket URL).
func fileDigest(t *testing.T, dest, name string) (int64, string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(readExport(t, dest, name)))
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

// readExport reads one file of an export destination through the bucket.
func readExport(t *testing.T, dest, name string) []byte {
	t.Helper()
	d, err := history.Open(context.Background(), dest)
	require.NoError(t, err)
	defer d.Close()
	b, err := d.Bucket.ReadAll(context.Background(), name)
	require.NoError(t, err, "%s in %s", name, dest)
	return b
}

// writeExport replaces one file of an export destination.
func writeExport(t *testing.T, dest, name string, b []byte) {
	t.Helper()
	d, err := history.Open(context.Background(), dest)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.Bucket.WriteAll(context.Background(), name, b, nil))
}

// readManifest is the destination's manifest.
func readManifest(t *testing.T, dest string) history.Manifest {
	t.Helper()
	d, err := history.Open(context.Background(), dest)
	require.NoError(t, err)
	defer d.Close()
	m, err := history.ReadManifest(context.Background(), d)
	require.NoError(t, err)
	return m
}

// fileIn is the location of one exported file for HistoryImport: a path
// in a directory, or the bucket URL with the file's name on its path.
func fileIn(dest, name string) string {
	if !strings.Contains(dest, "://") {
		return filepath.Join(dest, name)
	}
	return strings.TrimSuffix(dest, "/") + "/" + name
}

// destinations are the kinds of destination each export test runs over:
// a plain directory, a file:// bucket URL and a mem:// one.
func destinations(t *testing.T) map[string]string {
	return map[string]string{
		"dir":  t.TempDir(),
		"file": "file://" + filepath.ToSlash(t.TempDir()),
		"mem":  "mem://" + strings.ReplaceAll(t.Name(), "/", "-"),
	}
}

// HistoryExport writes each finished day to a compressed NDJSON file with a
// manifest whose counts and checksums match the table, at a directory, a
// file:// and a mem:// bucket alike, resumes without writing a day again,
// and HistoryImport brings a file back from there.
func TestHistoryExportAndImport(t *testing.T) {
	t.Parallel()
	for kind, dest := range destinations(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx := context.Background()
			c := newClient(t, db.Pool, skiplock.Config{})
			seedHistory(t, db, 500, 3, 2)

			files, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dest})
			require.NoError(t, err)
			require.Len(t, files, 2)
			m := readManifest(t, dest)
			require.Len(t, m.Files, 2)
			for i, daysAgo := range []int{3, 2} {
				f := files[i]
				require.False(t, f.Resumed)
				require.Equal(t, "jobs_done", f.Table)
				wantN, wantSum := dayDigest(t, db, daysAgo)
				gotN, gotSum := fileDigest(t, dest, f.Name)
				require.Equal(t, wantN, f.Rows)
				require.Equal(t, wantN, gotN)
				require.Equal(t, wantSum, gotSum, "every row, byte for byte")
				require.Equal(t, m.Files[i].SHA256, f.SHA256)
				require.Less(t, f.MinID, f.MaxID)
			}

			again, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dest})
			require.NoError(t, err)
			require.True(t, again[0].Resumed && again[1].Resumed, "resumed: nothing written again")
			// A damaged file is written again.
			writeExport(t, dest, files[0].Name, []byte("garbage"))
			again, err = c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dest})
			require.NoError(t, err)
			require.False(t, again[0].Resumed)
			require.True(t, again[1].Resumed)

			// Import into a history that lost the day: the rows come back once.
			_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_done WHERE id BETWEEN $1 AND $2`, files[0].MinID, files[0].MaxID)
			require.NoError(t, err)
			read, inserted, err := c.HistoryImport(ctx, fileIn(dest, files[0].Name))
			require.NoError(t, err)
			require.EqualValues(t, 500, read)
			require.EqualValues(t, 500, inserted)
			rec, err := c.JobGet(ctx, files[0].MinID)
			require.NoError(t, err)
			require.Equal(t, skiplock.JobStateCompleted, rec.State)
			_, inserted, err = c.HistoryImport(ctx, fileIn(dest, files[0].Name))
			require.NoError(t, err)
			require.Zero(t, inserted, "imported twice, inserted once")
			n, sum := dayDigest(t, db, 3)
			gotN, gotSum := fileDigest(t, dest, files[0].Name)
			require.Equal(t, gotN, n)
			require.Equal(t, gotSum, sum)

			// A file whose bytes differ from the manifest's checksum is
			// refused before any row is inserted.
			_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_done`)
			require.NoError(t, err)
			good := readExport(t, dest, files[1].Name)
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write([]byte(`{"id": 1}` + "\n"))
			require.NoError(t, zw.Close())
			writeExport(t, dest, files[1].Name, buf.Bytes())
			_, _, err = c.HistoryImport(ctx, fileIn(dest, files[1].Name))
			require.ErrorContains(t, err, "differs from the manifest")
			var left int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_done`).Scan(&left))
			require.Zero(t, left, "nothing inserted from a file that fails its checksum")
			writeExport(t, dest, files[1].Name, good)
		})
	}
}

// An export cut short resumes: a day listed in the manifest with its file
// intact is not written again; a file written but not yet listed (the run
// stopped between the file and the manifest), or never written, is
// written; a damaged listed file is written again. Every day then matches
// the table, row for row.
func TestHistoryExportResumesAfterInterruption(t *testing.T) {
	t.Parallel()
	for kind, dest := range destinations(t) {
		if kind == "dir" {
			continue // the same code as file://
		}
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx := context.Background()
			c := newClient(t, db.Pool, skiplock.Config{})
			seedHistory(t, db, 200, 5, 4, 3, 2)
			files, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dest})
			require.NoError(t, err)
			require.Len(t, files, 4)

			// What a run stopped after day -4's file, before its manifest,
			// leaves: day -5 listed, day -4's file unlisted, days -3 and -2
			// not written at all.
			m := readManifest(t, dest)
			full := m
			m.Files = m.Files[:1]
			b, err := json.Marshal(m)
			require.NoError(t, err)
			writeExport(t, dest, history.ManifestName, b)
			d, err := history.Open(ctx, dest)
			require.NoError(t, err)
			for _, f := range files[2:] {
				require.NoError(t, d.Bucket.Delete(ctx, f.Name))
			}
			require.NoError(t, d.Close())

			resumed, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dest})
			require.NoError(t, err)
			require.Len(t, resumed, 4)
			require.True(t, resumed[0].Resumed, "the listed day is not written again")
			for i, f := range resumed[1:] {
				require.False(t, f.Resumed, "day %d written", i+1)
			}
			m = readManifest(t, dest)
			require.Len(t, m.Files, 4)
			for i, daysAgo := range []int{5, 4, 3, 2} {
				wantN, wantSum := dayDigest(t, db, daysAgo)
				gotN, gotSum := fileDigest(t, dest, m.Files[i].Name)
				require.Equal(t, wantN, gotN)
				require.Equal(t, wantSum, gotSum)
				require.Equal(t, wantN, m.Files[i].Rows)
				require.Equal(t, full.Files[i].SHA256, m.Files[i].SHA256, "the same bytes as the uninterrupted run")
			}
		})
	}
}

// With an export destination (a file:// or mem:// bucket URL), retention
// exports each day past retention before it drops its partition, loses no
// row (counts and checksums taken from the table before the drop), and
// refuses the drop when the export fails: a destination that cannot be
// written, or one whose scheme has no driver in the program.
func TestRetentionExportsBeforeTheDrop(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"file", "mem"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dest := destinations(t)[kind]
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

			// Destinations that cannot be written: nothing is dropped.
			blocked := filepath.Join(t.TempDir(), "file")
			require.NoError(t, os.WriteFile(blocked, nil, 0o644))
			for _, bad := range []string{"file://" + filepath.ToSlash(blocked), "s3://no-driver-here/prefix"} {
				r := maintenance.NewRetention(maintenance.RetentionConfig{DB: db.Pool, Schema: "skiplock", Archive: true,
					CompletedRetention: 24 * time.Hour, ExportTo: bad})
				_, err = r.MaintainPartitions(ctx)
				require.Error(t, err, bad)
				require.Contains(t, err.Error(), "not dropped")
				require.Equal(t, had, partitions(), "no partition dropped without its export (%s)", bad)
			}

			r := maintenance.NewRetention(maintenance.RetentionConfig{DB: db.Pool, Schema: "skiplock", Archive: true,
				CompletedRetention: 24 * time.Hour, ExportTo: dest})
			st, err := r.MaintainPartitions(ctx)
			require.NoError(t, err)
			require.Equal(t, 2, st.Exported)
			require.Equal(t, 2, st.Dropped)
			require.Equal(t, had-2, partitions())
			m := readManifest(t, dest)
			require.Len(t, m.Files, 2)
			for i, d := range []int{4, 3} {
				n, sum := fileDigest(t, dest, m.Files[i].Name)
				require.Equal(t, before[d][0], n, "day -%d: every row exported", d)
				require.Equal(t, before[d][1], sum, "day -%d: byte for byte", d)
				require.Equal(t, n, m.Files[i].Rows)
			}
			st, err = r.MaintainPartitions(ctx)
			require.NoError(t, err)
			require.Zero(t, st.Exported+st.Dropped, "nothing left to do")
		})
	}
}

// seedDead puts n dead letters on each of the UTC days daysAgo before
// today into jobs_dead.
func seedDead(t *testing.T, db *dbtest.DB, n int, daysAgo ...int) {
	t.Helper()
	for _, d := range daysAgo {
		_, err := db.Pool.Exec(context.Background(), `INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, dead_at,
				queue, kind, reason, payload, last_error, tenant, metadata)
			SELECT nextval('skiplock.jobs_id_seq'), 0, 3, 3, f, f, f, 'q', 'charge', 'error',
			       jsonb_build_object('n', g, 'quote', 'a "b" \ c'), 'card declined: ' || (g % 5), 't' || (g % 3), '{"trace": "x"}'
			FROM generate_series(1, $1::int) AS g,
			     LATERAL (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - $2::int * interval '1 day'
			                     + g * interval '1 second' AS f) AS x`, n, d)
		require.NoError(t, err)
	}
}

// With an export destination, retention exports each day of dead letters
// wholly past DeadLetterRetention (jobs_dead_YYYYMMDD.ndjson.gz, in the
// finished jobs' manifest) before it purges it: the rows purged are the
// rows in the files (counts and checksums against the table before the
// purge); a day inside the retention stays; a failed export purges
// nothing; a day that changed since an earlier export is exported again
// before its purge; and an imported file brings the dead letters back.
func TestRetentionExportsDeadLettersBeforeThePurge(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"file", "mem"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dest := destinations(t)[kind]
			db := dbtest.New(t)
			ctx := context.Background()
			c := newClient(t, db.Pool, skiplock.Config{})
			seedDead(t, db, 250, 40, 35, 10)
			before := map[int][2]any{}
			for _, d := range []int{40, 35, 10} {
				n, sum := deadDigest(t, db, d)
				before[d] = [2]any{n, sum}
			}
			count := func() int64 {
				var n int64
				require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_dead`).Scan(&n))
				return n
			}
			retain := 30 * 24 * time.Hour

			blocked := filepath.Join(t.TempDir(), "file")
			require.NoError(t, os.WriteFile(blocked, nil, 0o644))
			r := maintenance.NewRetention(maintenance.RetentionConfig{DB: db.Pool, Schema: "skiplock",
				DeadLetterRetention: retain, ExportTo: "file://" + filepath.ToSlash(blocked)})
			_, err := r.PurgeDeadLetters(ctx)
			require.ErrorContains(t, err, "not purged")
			require.EqualValues(t, 750, count(), "nothing purged without its export")

			// An earlier manual export of day -35, then one of its dead
			// letters leaves (a replay): the pass finds the file no longer
			// matches the day and exports it again before the purge.
			files, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dest, DeadLetters: true})
			require.NoError(t, err)
			require.Len(t, files, 3)
			for _, f := range files {
				require.Equal(t, "jobs_dead", f.Table)
				require.True(t, strings.HasPrefix(f.Name, "jobs_dead_") && strings.HasSuffix(f.Name, ".ndjson.gz"), f.Name)
			}
			_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_dead WHERE id = $1`, files[1].MaxID)
			require.NoError(t, err)
			n35, sum35 := deadDigest(t, db, 35)
			before[35] = [2]any{n35, sum35}

			r = maintenance.NewRetention(maintenance.RetentionConfig{DB: db.Pool, Schema: "skiplock",
				DeadLetterRetention: retain, ExportTo: dest})
			st, err := r.PurgeDeadLetters(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, st.Exported, "day -40 was exported already; day -35 again")
			require.EqualValues(t, 250+249, st.Purged)
			require.EqualValues(t, 250, count(), "day -10, inside the retention, stays")
			m := readManifest(t, dest)
			var purgedInFiles int64
			for _, d := range []int{40, 35} {
				name := fmt.Sprintf("jobs_dead_%s.ndjson.gz", time.Now().UTC().AddDate(0, 0, -d).Format("20060102"))
				n, sum := fileDigest(t, dest, name)
				require.Equal(t, before[d][0], n, "day -%d: every dead letter purged is in the file", d)
				require.Equal(t, before[d][1], sum, "day -%d: byte for byte", d)
				purgedInFiles += n
				var listed bool
				for _, f := range m.Files {
					if f.Name == name {
						listed = true
						require.Equal(t, n, f.Rows)
						require.Equal(t, "jobs_dead", f.Table)
					}
				}
				require.True(t, listed, "%s in the manifest", name)
			}
			require.Equal(t, st.Purged, purgedInFiles, "rows purged == rows exported")
			st, err = r.PurgeDeadLetters(ctx)
			require.NoError(t, err)
			require.Zero(t, st.Purged+int64(st.Exported), "nothing left to do")

			// Import brings a purged day back into the dead letters, every
			// column as it was (error_signature is regenerated alike).
			name := fmt.Sprintf("jobs_dead_%s.ndjson.gz", time.Now().UTC().AddDate(0, 0, -40).Format("20060102"))
			read, inserted, err := c.HistoryImport(ctx, fileIn(dest, name))
			require.NoError(t, err)
			require.EqualValues(t, 250, read)
			require.EqualValues(t, 250, inserted)
			n, sum := deadDigest(t, db, 40)
			require.Equal(t, before[40][0], n)
			require.Equal(t, before[40][1], sum, "the dead letters come back as they were")
			_, inserted, err = c.HistoryImport(ctx, fileIn(dest, name))
			require.NoError(t, err)
			require.Zero(t, inserted, "imported twice, inserted once")
		})
	}
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
	dir := "file://" + filepath.ToSlash(t.TempDir())
	files, err := c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dir, Format: skiplock.HistoryFormatParquet})
	require.NoError(t, err)
	require.Len(t, files, 1)
	require.Equal(t, skiplock.HistoryFormatParquet, files[0].Format)
	require.True(t, strings.HasSuffix(files[0].Name, ".parquet"))
	require.EqualValues(t, wantN, files[0].Rows)

	_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_done`)
	require.NoError(t, err)
	read, inserted, err := c.HistoryImport(ctx, fileIn(dir, files[0].Name))
	require.NoError(t, err)
	require.EqualValues(t, wantN, read)
	require.EqualValues(t, wantN, inserted)
	gotN, gotSum := dayDigest(t, db, 2)
	require.Equal(t, wantN, gotN)
	require.Equal(t, wantSum, gotSum, "every column of every row survives the round trip")

	_, err = c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: dir, Format: "csv"})
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Format", fe.Field)
	_, err = c.HistoryExport(ctx, skiplock.HistoryExportParams{Dir: "s3://no-driver-here/x"})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Dir", fe.Field)
	require.Contains(t, fe.Message, `scheme "s3"`)
}
