package history

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A write cut short (the export's reader failed, or the process was
// stopped: its context ended) leaves nothing at its key, not even a
// temporary file, on a directory and in memory alike; a completed write
// replaces the object whole.
func TestExportWriteIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for _, dest := range []string{dir, "file://" + filepath.ToSlash(dir) + "/sub", "mem://TestExportWriteIsAtomic"} {
		d, err := Open(ctx, dest)
		require.NoError(t, err, dest)
		boom := errors.New("the rows stopped")
		err = writeBlob(ctx, d.Bucket, "day.ndjson.gz", "application/gzip", func(w io.Writer) error {
			_, err := w.Write(make([]byte, 1<<20))
			require.NoError(t, err)
			return boom
		})
		require.ErrorIs(t, err, boom)
		ok, err := d.Bucket.Exists(ctx, "day.ndjson.gz")
		require.NoError(t, err)
		require.False(t, ok, "%s: an aborted write leaves nothing", dest)

		cctx, cancel := context.WithCancel(ctx)
		err = writeBlob(cctx, d.Bucket, "day.ndjson.gz", "application/gzip", func(w io.Writer) error {
			_, err := w.Write([]byte("half"))
			cancel() // the process is stopped mid-file
			return err
		})
		require.Error(t, err)
		ok, err = d.Bucket.Exists(ctx, "day.ndjson.gz")
		require.NoError(t, err)
		require.False(t, ok, "%s: a cancelled write leaves nothing", dest)

		require.NoError(t, writeBlob(ctx, d.Bucket, "day.ndjson.gz", "application/gzip", func(w io.Writer) error {
			_, err := w.Write([]byte("whole"))
			return err
		}))
		b, err := d.Bucket.ReadAll(ctx, "day.ndjson.gz")
		require.NoError(t, err)
		require.Equal(t, "whole", string(b))
		require.NoError(t, d.Close())
	}
	// Only the finished files are in the directories: no temporary file,
	// no sidecar.
	for _, sub := range []string{dir, filepath.Join(dir, "sub")} {
		ents, err := os.ReadDir(sub)
		require.NoError(t, err)
		var names []string
		for _, e := range ents {
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		require.Equal(t, []string{"day.ndjson.gz"}, names, sub)
	}
}

// The same mem:// name is the same bucket for the whole process.
func TestMemDestinationIsShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := Open(ctx, "mem://TestMemDestinationIsShared")
	require.NoError(t, err)
	require.NoError(t, a.Bucket.WriteAll(ctx, "k", []byte("v"), nil))
	require.NoError(t, a.Close())
	b, err := Open(ctx, "mem://TestMemDestinationIsShared")
	require.NoError(t, err)
	got, err := b.Bucket.ReadAll(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v", string(got))
}

// Destinations are checked before anything is opened, with an error that
// says what is wrong and never quotes a password.
func TestCheckDestination(t *testing.T) {
	t.Parallel()
	for dest, want := range map[string]string{
		"":                            "required",
		"/backup/x":                   "",
		"relative/dir":                "",
		"file:///backup/x":            "",
		"mem://x":                     "",
		"s3://bucket/prefix":          `scheme "s3": no bucket driver`,
		"gs://bucket":                 `scheme "gs": no bucket driver`,
		"s3://user:secret@bucket/%zz": "does not parse",
	} {
		err := CheckDestination(dest)
		if want == "" {
			require.NoError(t, err, dest)
			continue
		}
		require.ErrorContains(t, err, want, dest)
		require.NotContains(t, err.Error(), "secret")
	}
	_, err := Open(context.Background(), "s3://user:secret@bucket/prefix")
	require.ErrorContains(t, err, "no bucket driver")
	require.NotContains(t, err.Error(), "secret")
}

// A file's location splits into its destination and its name: a path, a
// file:// URL, a bucket URL with a prefix and a query, a mem:// name.
func TestSplitFile(t *testing.T) {
	t.Parallel()
	for file, want := range map[string][2]string{
		"/backup/jobs_done_20261127.ndjson.gz":                     {"/backup/", "jobs_done_20261127.ndjson.gz"},
		"jobs_dead_20261127.ndjson.gz":                             {".", "jobs_dead_20261127.ndjson.gz"},
		"file:///backup/x/jobs_done_20261127.parquet":              {"file:///backup/x/", "jobs_done_20261127.parquet"},
		"file:///jobs_done_20261127.parquet":                       {"file:///", "jobs_done_20261127.parquet"},
		"s3://bucket/a/b/jobs_done_20261127.ndjson.gz?region=eu-1": {"s3://bucket/a/b/?region=eu-1", "jobs_done_20261127.ndjson.gz"},
		"s3://bucket/jobs_done_20261127.ndjson.gz":                 {"s3://bucket/", "jobs_done_20261127.ndjson.gz"},
		"mem://tests/jobs_done_20261127.ndjson.gz":                 {"mem://tests", "jobs_done_20261127.ndjson.gz"},
	} {
		dest, name, err := SplitFile(file)
		require.NoError(t, err, file)
		require.Equal(t, want, [2]string{dest, name}, file)
	}
	for _, bad := range []string{"/backup/", "s3://bucket/", "s3://bucket"} {
		_, _, err := SplitFile(bad)
		require.Error(t, err, bad)
	}
}
