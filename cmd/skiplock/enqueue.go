package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/skiplock/skiplock"
)

func init() { register(newEnqueueCmd) }

func newEnqueueCmd() *cobra.Command {
	var (
		p                       skiplock.EnqueueParams
		payload, runAt, file    string
		delay                   time.Duration
		batchSize               int
		payloadSet, priorityStr bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue --queue Q --kind K [--payload JSON] | --file F.ndjson",
		Short: "Enqueue one job (prints its id) or bulk-load an NDJSON file through COPY",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			payloadSet = cmd.Flags().Changed("payload")
			_ = priorityStr
			if file != "" {
				if cmd.Flags().Changed("kind") || payloadSet {
					return usageError("--file: cannot be combined with --kind or --payload (each line carries its own)")
				}
				return enqueueFile(ctx, cmd, file, batchSize)
			}
			if p.Kind == "" {
				return usageError("--kind: required (or use --file)")
			}
			if payloadSet {
				p.Payload = json.RawMessage(payload)
			}
			if runAt != "" {
				if cmd.Flags().Changed("delay") {
					return usageError("--run-at and --delay: give one, not both")
				}
				t, err := time.Parse(time.RFC3339Nano, runAt)
				if err != nil {
					return usageError("--run-at: not an RFC 3339 time (e.g. 2026-11-22T10:00:00Z)")
				}
				p.RunAt = t
			}
			p.Delay = delay
			pool, err := connect(ctx, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			c, err := skiplock.NewClient(pool, skiplock.Config{Schema: g.schema, Logger: logger(cmd.ErrOrStderr())})
			if err != nil {
				return err
			}
			res, err := c.Enqueue(ctx, p)
			if err != nil {
				var fe *skiplock.FieldError
				if errors.As(err, &fe) {
					return usageError("--%s: %s", strings.ReplaceAll(fe.Field, "_", "-"), fe.Message)
				}
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintln(cmd.OutOrStdout(), res.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Queue, "queue", skiplock.DefaultQueue, "queue name")
	f.StringVar(&p.Kind, "kind", "", "job kind (selects the handler)")
	f.StringVar(&payload, "payload", "{}", "payload: a JSON object")
	f.IntVar(&p.Priority, "priority", 0, "priority, -1000..1000 (larger runs earlier)")
	f.StringVar(&runAt, "run-at", "", "run at this RFC 3339 time")
	f.DurationVar(&delay, "delay", 0, "run after this delay (database clock)")
	f.IntVar(&p.MaxAttempts, "max-attempts", 0, "attempts before the dead-letter table (default 20)")
	f.StringVar(&p.UniqueKey, "unique-key", "", "idempotency key: a duplicate in flight returns the existing id")
	f.BoolVar(&p.BumpSchedule, "bump-schedule", false, "with --unique-key: push the in-flight job's run_at to the later time")
	f.StringVar(&p.Tenant, "tenant", "", "tenant key (fairness)")
	f.StringVar(&p.Entity, "entity", "", "entity key (at most one running job per entity)")
	f.StringVar(&file, "file", "", "bulk-load jobs from an NDJSON file (one job object per line; - for stdin)")
	f.IntVar(&batchSize, "batch", 5000, "jobs per COPY transaction with --file")
	addJSON(cmd)
	return cmd
}

// ndjsonJob is one line of an NDJSON bulk file: the SQL function's argument names.
type ndjsonJob struct {
	Queue       string          `json:"queue"`
	Kind        string          `json:"kind"`
	Payload     json.RawMessage `json:"payload"`
	Priority    int             `json:"priority"`
	RunAt       *time.Time      `json:"run_at"`
	MaxAttempts int             `json:"max_attempts"`
	UniqueKey   string          `json:"unique_key"`
	Tenant      string          `json:"tenant"`
	Entity      string          `json:"entity"`
}

// ParseNDJSONLine decodes one line strictly: unknown keys are errors.
func parseNDJSONLine(line []byte) (skiplock.EnqueueParams, error) {
	var j ndjsonJob
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return skiplock.EnqueueParams{}, fmt.Errorf("not a valid job object: %v", err)
	}
	if dec.More() {
		return skiplock.EnqueueParams{}, errors.New("more than one JSON value on the line")
	}
	p := skiplock.EnqueueParams{Queue: j.Queue, Kind: j.Kind, Priority: j.Priority, MaxAttempts: j.MaxAttempts,
		UniqueKey: j.UniqueKey, Tenant: j.Tenant, Entity: j.Entity}
	if len(j.Payload) > 0 {
		p.Payload = j.Payload
	}
	if j.RunAt != nil {
		p.RunAt = *j.RunAt
	}
	if p.Kind == "" {
		return p, errors.New("kind: must not be empty")
	}
	return p, nil
}

type bulkSummary struct {
	File     string  `json:"file"`
	Lines    int     `json:"lines"`
	Inserted int64   `json:"inserted"`
	Skipped  int64   `json:"skipped_duplicates"`
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
}

// enqueueFile validates the whole file first (a bad line is reported by
// number and nothing is written), then loads it in COPY batches, one
// transaction each.
func enqueueFile(ctx context.Context, cmd *cobra.Command, path string, batchSize int) error {
	if batchSize < 1 || batchSize > 100000 {
		return usageError("--batch: must be between 1 and 100000")
	}
	open := func() (io.ReadCloser, error) {
		if path == "-" {
			return io.NopCloser(os.Stdin), nil
		}
		return os.Open(path)
	}
	pool, err := connect(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: g.schema, Logger: logger(cmd.ErrOrStderr())})
	if err != nil {
		return err
	}
	// Pass 1: validate every line (stdin is buffered for pass 2).
	var stdinLines [][]byte
	lines := 0
	if err := scanLines(open, func(n int, line []byte) error {
		lines = n
		p, err := parseNDJSONLine(line)
		if err == nil {
			err = c.Validate(p)
		}
		if err != nil {
			return usageError("%s line %d: %v", path, n, err)
		}
		if path == "-" {
			stdinLines = append(stdinLines, append([]byte(nil), line...))
		}
		return nil
	}); err != nil {
		return err
	}
	if path == "-" {
		open = func() (io.ReadCloser, error) {
			return io.NopCloser(strings.NewReader(string(joinLines(stdinLines)))), nil
		}
	}

	progress := newProgress(cmd.ErrOrStderr(), lines, "enqueue")
	start := time.Now()
	var inserted int64
	batch := make([]skiplock.EnqueueParams, 0, batchSize)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := c.EnqueueMany(ctx, batch)
		if err != nil {
			return err
		}
		inserted += n
		progress.Add(len(batch))
		batch = batch[:0]
		return nil
	}
	err = scanLines(open, func(n int, line []byte) error {
		p, err := parseNDJSONLine(line)
		if err != nil {
			return usageError("%s line %d: %v", path, n, err)
		}
		batch = append(batch, p)
		if len(batch) == batchSize {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	progress.Finish()
	if err != nil {
		return fmt.Errorf("after %d jobs inserted: %w", inserted, err)
	}
	secs := time.Since(start).Seconds()
	sum := bulkSummary{File: path, Lines: lines, Inserted: inserted, Skipped: int64(lines) - inserted, Seconds: secs}
	if secs > 0 {
		sum.JobsPerS = float64(lines) / secs
	}
	return printJSON(cmd.OutOrStdout(), sum)
}

func scanLines(open func() (io.ReadCloser, error), fn func(n int, line []byte) error) error {
	r, err := open()
	if err != nil {
		return fmt.Errorf("--file: %w", err)
	}
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 40<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return usageError("--file: line %d: %v", n+1, err)
	}
	return nil
}

func joinLines(ls [][]byte) []byte {
	var b []byte
	for _, l := range ls {
		b = append(b, l...)
		b = append(b, '\n')
	}
	return b
}

// progress is a bar on a terminal and a line every few seconds otherwise.
type progress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	label string
	total int
	done  int
	last  time.Time
}

func newProgress(w io.Writer, total int, label string) *progress {
	p := &progress{w: w, label: label, total: total, last: time.Now()}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(label),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionClearOnFinish())
	}
	return p
}

func (p *progress) Add(n int) {
	p.done += n
	if p.bar != nil {
		_ = p.bar.Add(n)
		return
	}
	if time.Since(p.last) >= 2*time.Second {
		fmt.Fprintf(p.w, "%s: %d/%d\n", p.label, p.done, p.total)
		p.last = time.Now()
	}
}

func (p *progress) Finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
