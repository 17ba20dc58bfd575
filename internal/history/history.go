// Package history exports finished jobs (jobs_done, one file per UTC day)
// to compressed NDJSON or Parquet files in a directory, with a manifest that records
// each file's day, row count, id range and checksum, and imports such a
// file back. An export is resumable: a day whose file the manifest lists
// (and whose bytes still match its checksum) is not written again. The
// retention pass (internal/maintenance) exports each day this way before it
// drops the day's partition, and drops it only if the partition still
// holds exactly the rows written.
package history

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// ManifestName is the manifest's file name in an export directory.
const ManifestName = "manifest.json"

// Manifest lists the files of an export directory.
type Manifest struct {
	// Version of the manifest's format (1).
	Version int `json:"version"`
	// Schema the rows were exported from.
	Schema string `json:"schema"`
	// Files, by day.
	Files []File `json:"files"`
}

// File is one exported day.
type File struct {
	// Name is the file's name in the directory: jobs_done_YYYYMMDD.ndjson.gz
	// or jobs_done_YYYYMMDD.parquet.
	Name string `json:"name"`
	// Format is FormatNDJSON or FormatParquet.
	Format string `json:"format"`
	// Table the rows came from (jobs_done).
	Table string `json:"table"`
	// From and To bound the rows' finished_at: [From, To), one UTC day.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Rows is how many rows (lines) the file holds; MinID and MaxID their
	// id range (0 when empty).
	Rows  int64 `json:"rows"`
	MinID int64 `json:"min_id"`
	MaxID int64 `json:"max_id"`
	// SHA256 is the checksum of the file's bytes (compressed), Bytes its
	// size.
	SHA256     string    `json:"sha256"`
	Bytes      int64     `json:"bytes"`
	ExportedAt time.Time `json:"exported_at"`
}

// Exporter writes days of jobs_done to Dir.
type Exporter struct {
	Store *store.Store
	// Schema is recorded in the manifest.
	Schema string
	Dir    string
	// Format is FormatNDJSON ("" too) or FormatParquet.
	Format string
}

func (e *Exporter) format() string {
	if e.Format == "" {
		return FormatNDJSON
	}
	return e.Format
}

// ReadManifest reads dir's manifest; a directory without one has an empty
// manifest.
func ReadManifest(dir string) (Manifest, error) {
	m := Manifest{Version: 1}
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("history: %s: %w", ManifestName, err)
	}
	return m, nil
}

// writeManifest replaces dir's manifest atomically (a temporary file,
// synced, then renamed over it).
func writeManifest(dir string, m Manifest) error {
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].From.Before(m.Files[j].From) })
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, ManifestName), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// writeAtomic writes path through fn into a temporary file beside it, syncs
// and renames it: a reader sees the old file or the whole new one.
func writeAtomic(path string, fn func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // once renamed, a no-op
	if err := fn(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// FileName is the name of day's file in format.
func FileName(day time.Time, format string) string {
	ext := ".ndjson.gz"
	if format == FormatParquet {
		ext = ".parquet"
	}
	return "jobs_done_" + day.UTC().Format("20060102") + ext
}

// Listed returns the manifest's entry for day whose file is present with
// the checksum recorded; ok is false when the day must be exported (again).
func (e *Exporter) Listed(m Manifest, day time.Time) (File, bool) {
	for _, f := range m.Files {
		if f.Name != FileName(day, e.format()) {
			continue
		}
		sum, n, err := checksum(filepath.Join(e.Dir, f.Name))
		if err == nil && sum == f.SHA256 && n == f.Bytes {
			return f, true
		}
	}
	return File{}, false
}

// ExportDay writes day's finished jobs to its file and records it in the
// manifest, reading through db (a transaction, when the caller drops the
// day after). A day already listed with a matching file is not written
// again (resumed reports that). force writes it again all the same.
func (e *Exporter) ExportDay(ctx context.Context, db store.DBTX, day time.Time, force bool) (f File, resumed bool, err error) {
	if e.format() != FormatNDJSON && e.format() != FormatParquet {
		return f, false, fmt.Errorf("history: format %q: want %s or %s", e.Format, FormatNDJSON, FormatParquet)
	}
	if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		return f, false, err
	}
	m, err := ReadManifest(e.Dir)
	if err != nil {
		return f, false, err
	}
	if !force {
		if f, ok := e.Listed(m, day); ok {
			return f, true, nil
		}
	}
	lo := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	f = File{Name: FileName(lo, e.format()), Format: e.format(), Table: "jobs_done", From: lo, To: lo.AddDate(0, 0, 1)}
	h := sha256.New()
	err = writeAtomic(filepath.Join(e.Dir, f.Name), func(w io.Writer) error {
		cw := &counter{w: io.MultiWriter(w, h)}
		bw := bufio.NewWriterSize(cw, 1<<16)
		var add func([]byte) error
		var closeSink func() error
		if e.format() == FormatParquet {
			ps := newParquetSink(bw)
			add, closeSink = ps.add, ps.close
		} else {
			zw, _ := gzip.NewWriterLevel(bw, gzip.DefaultCompression)
			add = func(row []byte) error {
				if _, err := zw.Write(row); err != nil {
					return err
				}
				_, err := zw.Write([]byte{'\n'})
				return err
			}
			closeSink = zw.Close
		}
		err := e.Store.HistoryRows(ctx, db, lo, func(row []byte, id int64) error {
			if f.Rows == 0 || id < f.MinID {
				f.MinID = id
			}
			f.MaxID = max(f.MaxID, id)
			f.Rows++
			return add(row)
		})
		if err != nil {
			return err
		}
		if err := closeSink(); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		f.Bytes = cw.n
		return nil
	})
	if err != nil {
		return File{}, false, fmt.Errorf("history: export %s: %w", f.Name, err)
	}
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	f.ExportedAt = time.Now().UTC()
	kept := m.Files[:0]
	for _, old := range m.Files {
		if old.Name != f.Name {
			kept = append(kept, old)
		}
	}
	m.Files = append(kept, f)
	m.Version = 1
	m.Schema = e.Schema
	if err := writeManifest(e.Dir, m); err != nil {
		return File{}, false, fmt.Errorf("history: manifest: %w", err)
	}
	return f, false, nil
}

type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func checksum(path string) (string, int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer fh.Close()
	h := sha256.New()
	n, err := io.Copy(h, fh)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// ImportBatch is how many rows one import statement inserts.
const ImportBatch = 1000

// Import reads an exported file and inserts its rows back into jobs_done
// (rows already there are skipped). When the file's directory has a
// manifest that lists it, its checksum is verified first. It returns the
// rows read and inserted.
func Import(ctx context.Context, st *store.Store, db store.DBTX, path string) (read, inserted int64, err error) {
	m, err := ReadManifest(filepath.Dir(path))
	if err != nil {
		return 0, 0, err
	}
	for _, f := range m.Files {
		if f.Name == filepath.Base(path) {
			sum, _, err := checksum(path)
			if err != nil {
				return 0, 0, err
			}
			if sum != f.SHA256 {
				return 0, 0, fmt.Errorf("history: %s: checksum %s differs from the manifest's %s", f.Name, sum, f.SHA256)
			}
		}
	}
	batch := []byte{'['}
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		k, err := st.HistoryImport(ctx, db, append(batch, ']'))
		inserted += k
		batch, n = batch[:1], 0
		return err
	}
	line := func(l []byte) error {
		if !json.Valid(l) {
			return fmt.Errorf("history: %s: row %d is not JSON", path, read+1)
		}
		if n > 0 {
			batch = append(batch, ',')
		}
		batch = append(batch, l...)
		n++
		read++
		if n == ImportBatch {
			return flush()
		}
		return nil
	}
	if strings.HasSuffix(path, ".parquet") {
		if err := parquetLines(path, line); err != nil {
			return read, inserted, fmt.Errorf("history: %s: %w", path, err)
		}
		return read, inserted, flush()
	}
	fh, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()
	zr, err := gzip.NewReader(fh)
	if err != nil {
		return 0, 0, fmt.Errorf("history: %s: %w", path, err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := line(sc.Bytes()); err != nil {
			return read, inserted, err
		}
	}
	if err := sc.Err(); err != nil {
		return read, inserted, fmt.Errorf("history: %s: %w", path, err)
	}
	return read, inserted, flush()
}
