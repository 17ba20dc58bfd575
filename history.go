package skiplock

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/history"
	"github.com/skiplock/skiplock/internal/maintenance"
)

// HistoryFile is one exported day of finished jobs or of dead letters, as
// the destination's manifest (manifest.json) records it.
type HistoryFile struct {
	// Name is the file's name at the destination:
	// jobs_done_YYYYMMDD.ndjson.gz, gzip-compressed NDJSON, one finished job
	// (every column of jobs_done, payload included) per line, in id order;
	// or jobs_done_YYYYMMDD.parquet (HistoryFormatParquet); or
	// jobs_dead_YYYYMMDD.ndjson.gz, the dead letters that died that day
	// (every column of jobs_dead), always NDJSON.
	Name string `json:"name"`
	// Table is where the rows came from: "jobs_done" (finished jobs) or
	// "jobs_dead" (dead letters).
	Table string `json:"table"`
	// Format is the file's format.
	Format HistoryFormat `json:"format"`
	// From and To bound the rows' finish times (dead letters: when they
	// died): [From, To), one UTC day.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Rows counts the jobs; MinID and MaxID are their id range.
	Rows  int64 `json:"rows"`
	MinID int64 `json:"min_id"`
	MaxID int64 `json:"max_id"`
	// SHA256 and Bytes are the compressed file's checksum and size.
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	// Resumed is true when an earlier export had written the file (its
	// checksum still matches): it was not written again.
	Resumed bool `json:"resumed,omitempty"`
}

// HistoryFormat is the file format of a history export.
type HistoryFormat string

// The formats HistoryExport writes.
const (
	// HistoryFormatNDJSON is gzip-compressed NDJSON, one to_jsonb object of
	// a jobs_done (or jobs_dead) row per line: every column, one added in a
	// later version too. The default, the only format of dead letters, and
	// what Config.HistoryExportDir writes.
	HistoryFormatNDJSON HistoryFormat = "ndjson"
	// HistoryFormatParquet is Parquet (zstd), one typed column per column
	// of jobs_done (times in microseconds UTC, payload and metadata as JSON
	// text), for analytics tools that read it directly.
	HistoryFormatParquet HistoryFormat = "parquet"
)

// HistoryExportParams says where HistoryExport writes.
type HistoryExportParams struct {
	// Dir is the destination: a directory (created if missing), or a
	// gocloud.dev/blob bucket URL: file:///path (a directory too),
	// mem://NAME (this process's memory, for tests), or s3://bucket/prefix,
	// gs://bucket/prefix, azblob://container/prefix… when the program links
	// the driver in (the skiplock CLI does; a Go program imports
	// gocloud.dev/blob/s3blob etc. itself). A URL's path is a prefix in the
	// bucket, its query the driver's parameters; credentials come from the
	// driver's environment. The destination's manifest.json lists every
	// file written there.
	Dir string
	// Format of the finished jobs' files: HistoryFormatNDJSON ("" too) or
	// HistoryFormatParquet. Both may share a destination (one file each a
	// day). Dead letters are NDJSON whatever it says.
	Format HistoryFormat
	// Force writes every day again, even those the manifest lists.
	Force bool
	// DeadLetters exports the dead letters too: one file per ended UTC day
	// of dead_at (jobs_dead_YYYYMMDD.ndjson.gz), listed in the same
	// manifest, after the finished jobs' days. Like the rest, it removes
	// nothing: Config.HistoryExportDir exports each day of dead letters
	// before retention purges it.
	DeadLetters bool
}

// HistoryExport writes every finished UTC day of the history (jobs_done;
// today's is still being written and is left for later) to p.Dir as one
// compressed file a day, and records each in the destination's manifest
// with its row count, id range and checksum; with p.DeadLetters, every
// ended day of dead letters too. It is resumable: a day the manifest
// lists, whose file still matches its checksum, is not written again; a
// run cut short leaves no partial file (a blob write appears whole when it
// completes, or not at all), and the manifest is written after each file.
// Each day is exported under the lock every exporting process takes (the
// retention pass too), so two never rewrite a manifest at once; it waits
// for the lock while another holds it. It reads, and drops nothing: set
// Config.HistoryExportDir to export each day automatically before
// retention drops (or purges) it. Payloads are exported: treat the files
// as you treat the database.
func (c *Client) HistoryExport(ctx context.Context, p HistoryExportParams) ([]HistoryFile, error) {
	if p.Dir == "" {
		return nil, &FieldError{Field: "Dir", Message: "the destination (a directory or a bucket URL) is required", base: ErrInvalidConfig}
	}
	if err := history.CheckDestination(p.Dir); err != nil {
		return nil, &FieldError{Field: "Dir", Message: err.Error(), base: ErrInvalidConfig}
	}
	if p.Format == "" {
		p.Format = HistoryFormatNDJSON
	}
	if p.Format != HistoryFormatNDJSON && p.Format != HistoryFormatParquet {
		return nil, &FieldError{Field: "Format", Message: fmt.Sprintf("must be %s or %s, got %q", HistoryFormatNDJSON, HistoryFormatParquet, p.Format),
			base: ErrInvalidConfig}
	}
	type day struct {
		table string
		day   time.Time
	}
	var days []day
	done, err := c.store.HistoryDays(ctx, c.pool, 0)
	if err != nil {
		return nil, fmt.Errorf("skiplock: history export: %w", err)
	}
	for _, d := range done {
		days = append(days, day{history.TableDone, d.Day})
	}
	if p.DeadLetters {
		dead, err := c.store.HistoryDeadDays(ctx, c.pool, 0)
		if err != nil {
			return nil, fmt.Errorf("skiplock: history export: %w", err)
		}
		for _, d := range dead {
			days = append(days, day{history.TableDead, d.Day})
		}
	}
	dest, err := history.Open(ctx, p.Dir)
	if err != nil {
		return nil, fmt.Errorf("skiplock: history export: %w", err)
	}
	defer dest.Close()
	ex := &history.Exporter{Store: c.store, Schema: c.cfg.Schema, Dest: dest, Format: string(p.Format)}
	out := make([]HistoryFile, 0, len(days))
	for _, d := range days {
		var f history.File
		var resumed bool
		err := maintenance.ExportLocked(ctx, c.pool, c.cfg.Schema, maintenance.DefaultExportTimeout, true, func(tx pgx.Tx) error {
			var err error
			f, resumed, err = ex.ExportDay(ctx, tx, d.table, d.day, p.Force)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("skiplock: history export: %w", err)
		}
		out = append(out, HistoryFile{Name: f.Name, Table: f.Table, Format: HistoryFormat(f.Format), From: f.From, To: f.To, Rows: f.Rows,
			MinID: f.MinID, MaxID: f.MaxID, SHA256: f.SHA256, Bytes: f.Bytes, Resumed: resumed})
	}
	return out, nil
}

// HistoryImport brings an exported file (HistoryExport's, or the retention
// pass's, either format) back, for investigation: a file of finished jobs
// (jobs_done_…) into the history, where JobGet and JobList find its jobs
// again until retention drops their day once more; a file of dead letters
// (jobs_dead_…) into the dead letters, where JobGet, the dead-letter
// listings and a replay find them until retention purges their day again.
// file is a path, or a bucket URL whose path ends with the file's name
// (file:///backup/jobs_done_20261127.ndjson.gz,
// s3://bucket/prefix/jobs_dead_20261127.ndjson.gz; see
// HistoryExportParams.Dir for the schemes). Its checksum is verified
// against the manifest beside it, when there is one, before any row is
// inserted; a job already there is not inserted twice. It returns the rows
// read and inserted.
func (c *Client) HistoryImport(ctx context.Context, file string) (read, inserted int64, err error) {
	res, err := history.Import(ctx, c.store, c.pool, file)
	if err != nil {
		return res.Read, res.Inserted, fmt.Errorf("skiplock: history import: %w", err)
	}
	return res.Read, res.Inserted, nil
}
