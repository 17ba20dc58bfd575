package skiplock

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/history"
)

// HistoryFile is one exported day of finished jobs, as the export
// directory's manifest (manifest.json) records it.
type HistoryFile struct {
	// Name is the file's name in the directory: jobs_done_YYYYMMDD.ndjson.gz,
	// gzip-compressed NDJSON, one finished job (every column of jobs_done,
	// payload included) per line, in id order; or jobs_done_YYYYMMDD.parquet
	// (HistoryFormatParquet).
	Name string `json:"name"`
	// Format is the file's format.
	Format HistoryFormat `json:"format"`
	// From and To bound the rows' finish times: [From, To), one UTC day.
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
	// a jobs_done row per line: every column, one added in a later version
	// too. The default, and what Config.HistoryExportDir writes.
	HistoryFormatNDJSON HistoryFormat = "ndjson"
	// HistoryFormatParquet is Parquet (zstd), one typed column per column
	// of jobs_done (times in microseconds UTC, payload and metadata as JSON
	// text), for analytics tools that read it directly.
	HistoryFormatParquet HistoryFormat = "parquet"
)

// HistoryExportParams says where HistoryExport writes.
type HistoryExportParams struct {
	// Dir is the export directory (created if missing); its manifest.json
	// lists every file written there.
	Dir string
	// Format of the files: HistoryFormatNDJSON ("" too) or
	// HistoryFormatParquet. Both may share a directory (one file each a day).
	Format HistoryFormat
	// Force writes every day again, even those the manifest lists.
	Force bool
}

// HistoryExport writes every finished UTC day of the history (jobs_done;
// today's is still being written and is left for later) to p.Dir as one
// compressed NDJSON file a day, and records each in the directory's
// manifest with its row count, id range and checksum. It is resumable: a
// day the manifest lists, whose file still matches its checksum, is not
// written again; a run cut short leaves no partial file (each is written
// to a temporary name and renamed). It reads, and drops nothing: set
// Config.HistoryExportDir to export each day automatically before
// retention drops it. Payloads are exported: treat the files as you treat
// the database.
func (c *Client) HistoryExport(ctx context.Context, p HistoryExportParams) ([]HistoryFile, error) {
	if p.Dir == "" {
		return nil, invalidConfig("dir", "the export directory is required")
	}
	if p.Format == "" {
		p.Format = HistoryFormatNDJSON
	}
	if p.Format != HistoryFormatNDJSON && p.Format != HistoryFormatParquet {
		return nil, invalidConfig("format", "must be %s or %s, got %q", HistoryFormatNDJSON, HistoryFormatParquet, p.Format)
	}
	days, err := c.store.HistoryDays(ctx, c.pool, 0)
	if err != nil {
		return nil, fmt.Errorf("skiplock: history export: %w", err)
	}
	ex := &history.Exporter{Store: c.store, Schema: c.cfg.Schema, Dir: p.Dir, Format: string(p.Format)}
	out := make([]HistoryFile, 0, len(days))
	for _, d := range days {
		f, resumed, err := ex.ExportDay(ctx, c.pool, d.Day, p.Force)
		if err != nil {
			return out, fmt.Errorf("skiplock: history export: %w", err)
		}
		out = append(out, HistoryFile{Name: f.Name, Format: HistoryFormat(f.Format), From: f.From, To: f.To, Rows: f.Rows, MinID: f.MinID, MaxID: f.MaxID,
			SHA256: f.SHA256, Bytes: f.Bytes, Resumed: resumed})
	}
	return out, nil
}

// HistoryImport brings an exported file (HistoryExport, either format) back into the
// history, for investigation: JobGet and JobList find its jobs again until
// retention drops their day once more. Its checksum is verified against
// the manifest beside it, when there is one; a job already in the history
// is not inserted twice. It returns the rows read and inserted.
func (c *Client) HistoryImport(ctx context.Context, path string) (read, inserted int64, err error) {
	read, inserted, err = history.Import(ctx, c.store, c.pool, path)
	if err != nil {
		return read, inserted, fmt.Errorf("skiplock: history import: %w", err)
	}
	return read, inserted, nil
}
