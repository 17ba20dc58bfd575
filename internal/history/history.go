// Package history exports finished jobs (jobs_done) and dead letters
// (jobs_dead), one file per table and UTC day, as compressed NDJSON (or
// Parquet, for finished jobs) to a destination: a directory or any
// gocloud.dev/blob bucket URL (bucket.go). A manifest beside the files
// records each file's table, day, row count, id range and checksum; it is
// written after the file it lists. An export is resumable: a day whose file
// the manifest lists (and whose bytes still match its checksum) is not
// written again. The retention pass (internal/maintenance) exports each day
// this way before it drops the day's jobs_done partition, or purges the
// day's dead letters, and does so only if the table still holds exactly
// the rows written. Import reads a file back.
package history

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// ManifestName is the manifest's key at the destination's root.
const ManifestName = "manifest.json"

// The tables an export reads.
const (
	// TableDone is the history of finished jobs; its files are named
	// jobs_done_YYYYMMDD (the UTC day of finished_at).
	TableDone = "jobs_done"
	// TableDead is the dead letters; its files are named jobs_dead_YYYYMMDD
	// (the UTC day of dead_at), NDJSON only.
	TableDead = "jobs_dead"
)

// Manifest lists the files of an export destination.
type Manifest struct {
	// Version of the manifest's format (1).
	Version int `json:"version"`
	// Schema the rows were exported from.
	Schema string `json:"schema"`
	// Files, by day, then name.
	Files []File `json:"files"`
}

// File is one exported day of one table.
type File struct {
	// Name is the file's key at the destination: TABLE_YYYYMMDD.ndjson.gz
	// or TABLE_YYYYMMDD.parquet.
	Name string `json:"name"`
	// Format is FormatNDJSON or FormatParquet.
	Format string `json:"format"`
	// Table the rows came from: TableDone or TableDead.
	Table string `json:"table"`
	// From and To bound the rows' finished_at (jobs_done) or dead_at
	// (jobs_dead): [From, To), one UTC day.
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

// Exporter writes days of jobs_done or jobs_dead to Dest.
type Exporter struct {
	Store *store.Store
	// Schema is recorded in the manifest.
	Schema string
	Dest   *Destination
	// Format is FormatNDJSON ("" too) or FormatParquet; dead letters are
	// written as NDJSON whatever it says.
	Format string
}

func (e *Exporter) format(table string) string {
	if e.Format == "" || table == TableDead {
		return FormatNDJSON
	}
	return e.Format
}

// ReadManifest reads the destination's manifest; a destination without one
// has an empty manifest.
func ReadManifest(ctx context.Context, d *Destination) (Manifest, error) {
	m := Manifest{Version: 1}
	b, err := d.Bucket.ReadAll(ctx, ManifestName)
	if notFound(err) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("history: %s: %s: %w", d.Name, ManifestName, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("history: %s: %s: %w", d.Name, ManifestName, err)
	}
	return m, nil
}

// writeManifest replaces the destination's manifest (a blob write is
// atomic: a reader sees the old manifest or the whole new one).
func writeManifest(ctx context.Context, d *Destination, m Manifest) error {
	sort.Slice(m.Files, func(i, j int) bool {
		if !m.Files[i].From.Equal(m.Files[j].From) {
			return m.Files[i].From.Before(m.Files[j].From)
		}
		return m.Files[i].Name < m.Files[j].Name
	})
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeBlob(ctx, d.Bucket, ManifestName, "application/json", func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// FileName is the name of table's file of day in format.
func FileName(table string, day time.Time, format string) string {
	ext := ".ndjson.gz"
	if format == FormatParquet {
		ext = ".parquet"
	}
	return table + "_" + day.UTC().Format("20060102") + ext
}

// Listed returns the manifest's entry for table's day whose file is
// present with the checksum recorded; ok is false when the day must be
// exported (again).
func (e *Exporter) Listed(ctx context.Context, m Manifest, table string, day time.Time) (File, bool) {
	name := FileName(table, day, e.format(table))
	for _, f := range m.Files {
		if f.Name != name {
			continue
		}
		sum, n, err := checksum(ctx, e.Dest.Bucket, f.Name)
		if err == nil && sum == f.SHA256 && n == f.Bytes {
			return f, true
		}
	}
	return File{}, false
}

// ExportDay writes table's rows of day to its file and then records the
// file in the manifest, reading through db (a transaction, when the caller
// drops or purges the day after). A day already listed with a matching
// file is not written again (resumed reports that); force writes it again
// all the same.
func (e *Exporter) ExportDay(ctx context.Context, db store.DBTX, table string, day time.Time, force bool) (f File, resumed bool, err error) {
	if table != TableDone && table != TableDead {
		return f, false, fmt.Errorf("history: table %q: want %s or %s", table, TableDone, TableDead)
	}
	format := e.format(table)
	if format != FormatNDJSON && format != FormatParquet {
		return f, false, fmt.Errorf("history: format %q: want %s or %s", e.Format, FormatNDJSON, FormatParquet)
	}
	m, err := ReadManifest(ctx, e.Dest)
	if err != nil {
		return f, false, err
	}
	if !force {
		if f, ok := e.Listed(ctx, m, table, day); ok {
			return f, true, nil
		}
	}
	lo := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	f = File{Name: FileName(table, lo, format), Format: format, Table: table, From: lo, To: lo.AddDate(0, 0, 1)}
	rows := e.Store.HistoryRows
	if table == TableDead {
		rows = e.Store.HistoryDeadRows
	}
	contentType := "application/gzip"
	if format == FormatParquet {
		contentType = "application/vnd.apache.parquet"
	}
	h := sha256.New()
	err = writeBlob(ctx, e.Dest.Bucket, f.Name, contentType, func(w io.Writer) error {
		cw := &counter{w: io.MultiWriter(w, h)}
		bw := bufio.NewWriterSize(cw, 1<<16)
		var add func([]byte) error
		var closeSink func() error
		if format == FormatParquet {
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
		err := rows(ctx, db, lo, func(row []byte, id int64) error {
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
		return File{}, false, fmt.Errorf("history: export %s to %s: %w", f.Name, e.Dest.Name, err)
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
	if err := writeManifest(ctx, e.Dest, m); err != nil {
		return File{}, false, fmt.Errorf("history: %s: manifest: %w", e.Dest.Name, err)
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

// ImportBatch is how many rows one import statement inserts.
const ImportBatch = 1000

// Imported says what Import did.
type Imported struct {
	// Table the rows went back to: TableDone (the history, where JobGet
	// finds a finished job) or TableDead (the dead letters).
	Table string
	// Read and Inserted count the file's rows and those inserted (a row
	// already there is skipped).
	Read, Inserted int64
}

// Import reads one exported file (a path, or a bucket URL ending with the
// file's name) and inserts its rows back where they came from: a
// jobs_done file into jobs_done, a jobs_dead file into jobs_dead (its
// table is the manifest's, or its name's). When the destination's manifest
// lists the file, its checksum is verified before any row is inserted. The
// file is copied to a local temporary file first (a Parquet file is read
// at random offsets, and the checksum needs every byte before the first
// insert).
func Import(ctx context.Context, st *store.Store, db store.DBTX, file string) (Imported, error) {
	var out Imported
	destName, name, err := SplitFile(file)
	if err != nil {
		return out, fmt.Errorf("history: %w", err)
	}
	d, err := Open(ctx, destName)
	if err != nil {
		return out, err
	}
	defer d.Close()
	m, err := ReadManifest(ctx, d)
	if err != nil {
		return out, err
	}
	out.Table = TableDone
	if strings.HasPrefix(name, TableDead+"_") {
		out.Table = TableDead
	}
	var listed *File
	for i := range m.Files {
		if m.Files[i].Name == name {
			listed = &m.Files[i]
			if listed.Table != "" {
				out.Table = listed.Table
			}
		}
	}
	if out.Table != TableDone && out.Table != TableDead {
		return out, fmt.Errorf("history: %s: table %q in the manifest: want %s or %s", name, out.Table, TableDone, TableDead)
	}
	tmp, err := os.CreateTemp("", "skiplock-import-*")
	if err != nil {
		return out, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	r, err := d.Bucket.NewReader(ctx, name, nil)
	if err != nil {
		return out, fmt.Errorf("history: %s in %s: %w", name, d.Name, err)
	}
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(tmp, h), r)
	r.Close()
	if err != nil {
		return out, fmt.Errorf("history: %s in %s: %w", name, d.Name, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); listed != nil && sum != listed.SHA256 {
		return out, fmt.Errorf("history: %s: checksum %s differs from the manifest's %s", name, sum, listed.SHA256)
	}
	insert := st.HistoryImport
	if out.Table == TableDead {
		insert = st.HistoryImportDead
	}
	batch := []byte{'['}
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		k, err := insert(ctx, db, append(batch, ']'))
		out.Inserted += k
		batch, n = batch[:1], 0
		return err
	}
	line := func(l []byte) error {
		if !json.Valid(l) {
			return fmt.Errorf("history: %s: row %d is not JSON", name, out.Read+1)
		}
		if n > 0 {
			batch = append(batch, ',')
		}
		batch = append(batch, l...)
		n++
		out.Read++
		if n == ImportBatch {
			return flush()
		}
		return nil
	}
	if strings.HasSuffix(name, ".parquet") {
		if out.Table == TableDead {
			return out, fmt.Errorf("history: %s: dead letters are exported as NDJSON only", name)
		}
		if err := parquetLines(tmp, size, line); err != nil {
			return out, fmt.Errorf("history: %s: %w", name, err)
		}
		return out, flush()
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return out, err
	}
	zr, err := gzip.NewReader(tmp)
	if err != nil {
		return out, fmt.Errorf("history: %s: %w", name, err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := line(sc.Bytes()); err != nil {
			return out, err
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("history: %s: %w", name, err)
	}
	return out, flush()
}
