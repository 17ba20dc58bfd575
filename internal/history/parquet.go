package history

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/parquet-go/parquet-go"
)

// Formats an export writes.
const (
	// FormatNDJSON is gzip-compressed NDJSON: one to_jsonb object of a
	// jobs_done row per line, every column (one added later too).
	FormatNDJSON = "ndjson"
	// FormatParquet is a Parquet file (zstd) with one typed column per
	// jobs_done column of version 18 (payload and metadata as JSON text); a
	// column added later is not carried until it is added here.
	FormatParquet = "parquet"
)

// jsonRow is a jobs_done row as to_jsonb writes it (history_rows).
type jsonRow struct {
	ID          int64           `json:"id"`
	Priority    int32           `json:"priority"`
	Attempts    int32           `json:"attempts"`
	RunAt       time.Time       `json:"run_at"`
	CreatedAt   time.Time       `json:"created_at"`
	AttemptedAt *time.Time      `json:"attempted_at"`
	FinishedAt  time.Time       `json:"finished_at"`
	Queue       string          `json:"queue"`
	Kind        string          `json:"kind"`
	LockedBy    *string         `json:"locked_by"`
	Tenant      *string         `json:"tenant"`
	Entity      *string         `json:"entity"`
	Payload     json.RawMessage `json:"payload"`
	MaxAttempts *int32          `json:"max_attempts"`
	LastError   *string         `json:"last_error"`
	Metadata    json.RawMessage `json:"metadata"`
	LimitWeight *int32          `json:"limit_weight"`
}

// parquetRow is one row of a Parquet export: times in microseconds since
// the epoch (UTC), JSON as text. metadata is a plain optional string: with
// the json logical type an optional column read back empty (parquet-go
// v0.32; TestHistoryExportParquet).
type parquetRow struct {
	ID          int64   `parquet:"id,delta"`
	Priority    int32   `parquet:"priority"`
	Attempts    int32   `parquet:"attempts"`
	RunAt       int64   `parquet:"run_at,timestamp(microsecond)"`
	CreatedAt   int64   `parquet:"created_at,timestamp(microsecond)"`
	AttemptedAt *int64  `parquet:"attempted_at,optional,timestamp(microsecond)"`
	FinishedAt  int64   `parquet:"finished_at,timestamp(microsecond)"`
	Queue       string  `parquet:"queue,dict"`
	Kind        string  `parquet:"kind,dict"`
	LockedBy    *string `parquet:"locked_by,optional"`
	Tenant      *string `parquet:"tenant,optional"`
	Entity      *string `parquet:"entity,optional"`
	Payload     string  `parquet:"payload,json"`
	MaxAttempts *int32  `parquet:"max_attempts,optional"`
	LastError   *string `parquet:"last_error,optional"`
	Metadata    *string `parquet:"metadata,optional"`
	LimitWeight *int32  `parquet:"limit_weight,optional"`
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func toParquet(raw []byte) (parquetRow, error) {
	var j jsonRow
	if err := json.Unmarshal(raw, &j); err != nil {
		return parquetRow{}, err
	}
	p := parquetRow{ID: j.ID, Priority: j.Priority, Attempts: j.Attempts, RunAt: micros(j.RunAt), CreatedAt: micros(j.CreatedAt),
		FinishedAt: micros(j.FinishedAt), Queue: j.Queue, Kind: j.Kind, LockedBy: j.LockedBy, Tenant: j.Tenant, Entity: j.Entity,
		Payload: string(j.Payload), MaxAttempts: j.MaxAttempts, LastError: j.LastError, LimitWeight: j.LimitWeight}
	if j.AttemptedAt != nil {
		m := micros(*j.AttemptedAt)
		p.AttemptedAt = &m
	}
	if len(j.Metadata) > 0 && string(j.Metadata) != "null" {
		m := string(j.Metadata)
		p.Metadata = &m
	}
	return p, nil
}

func fromParquet(p parquetRow) ([]byte, error) {
	t := func(us int64) time.Time { return time.UnixMicro(us).UTC() }
	j := jsonRow{ID: p.ID, Priority: p.Priority, Attempts: p.Attempts, RunAt: t(p.RunAt), CreatedAt: t(p.CreatedAt),
		FinishedAt: t(p.FinishedAt), Queue: p.Queue, Kind: p.Kind, LockedBy: p.LockedBy, Tenant: p.Tenant, Entity: p.Entity,
		Payload: json.RawMessage(p.Payload), MaxAttempts: p.MaxAttempts, LastError: p.LastError, LimitWeight: p.LimitWeight}
	if p.AttemptedAt != nil {
		a := t(*p.AttemptedAt)
		j.AttemptedAt = &a
	}
	if p.Metadata != nil {
		j.Metadata = json.RawMessage(*p.Metadata)
	}
	return json.Marshal(j)
}

// parquetSink writes rows to a Parquet file in batches.
type parquetSink struct {
	w    *parquet.GenericWriter[parquetRow]
	rows []parquetRow
}

func newParquetSink(out io.Writer) *parquetSink {
	return &parquetSink{w: parquet.NewGenericWriter[parquetRow](out, parquet.Compression(&parquet.Zstd))}
}

func (s *parquetSink) add(raw []byte) error {
	p, err := toParquet(raw)
	if err != nil {
		return fmt.Errorf("a row does not decode: %w", err)
	}
	s.rows = append(s.rows, p)
	if len(s.rows) == 4096 {
		return s.flush()
	}
	return nil
}

func (s *parquetSink) flush() error {
	if len(s.rows) == 0 {
		return nil
	}
	_, err := s.w.Write(s.rows)
	s.rows = s.rows[:0]
	return err
}

func (s *parquetSink) close() error {
	if err := s.flush(); err != nil {
		return err
	}
	return s.w.Close()
}

// parquetLines reads a Parquet export (a local copy, read at random
// offsets) and hands each row to fn as the JSON object the NDJSON format
// would hold (the columns it has).
func parquetLines(fh *os.File, size int64, fn func([]byte) error) error {
	pf, err := parquet.OpenFile(fh, size) // an error, where NewGenericReader would panic
	if err != nil {
		return err
	}
	r := parquet.NewGenericReader[parquetRow](pf)
	defer r.Close()
	buf := make([]parquetRow, 1024)
	for {
		n, err := r.Read(buf)
		for _, p := range buf[:n] {
			line, jerr := fromParquet(p)
			if jerr != nil {
				return jerr
			}
			if ferr := fn(line); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
