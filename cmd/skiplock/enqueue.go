package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/skiplock/skiplock"
)

// jobFlags are enqueue's flags that describe one job: with --file each line
// carries these fields itself, so setting one is refused rather than ignored.
var jobFlags = []string{"queue", "kind", "payload", "priority", "run-at", "delay", "max-attempts",
	"unique-key", "bump-schedule", "tenant", "entity", "metadata", "limit-weight", "unique-by", "unique-fields",
	"unique-period", "supersede", "debounce", "throttle"}

func newEnqueueCmd(g *globals) *cobra.Command {
	var (
		p                    skiplock.EnqueueParams
		payload, runAt, file string
		metadata             string
		delay                time.Duration
		batchSize            int
		uniqueBy             string
		payloadSet           bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue --queue Q --kind K [--payload JSON] | --file F.ndjson",
		Short: "Enqueue one job (prints its id) or bulk-load an NDJSON file through COPY",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			payloadSet = cmd.Flags().Changed("payload")
			if file != "" {
				for _, name := range jobFlags {
					if cmd.Flags().Changed(name) {
						return usageError("--file: cannot be combined with --%s (each line carries its own job fields)", name)
					}
				}
				return g.enqueueFile(ctx, cmd, file, batchSize)
			}
			if p.Kind == "" {
				return usageError("--kind: required (or use --file)")
			}
			if p.Queue == "" {
				return usageError("--queue: must not be empty")
			}
			if cmd.Flags().Changed("max-attempts") && p.MaxAttempts == 0 {
				return usageError("--max-attempts: must be between 1 and %d, got 0", skiplock.MaxAttemptsLimit)
			}
			if cmd.Flags().Changed("limit-weight") && p.LimitWeight == 0 {
				return usageError("--limit-weight: must be between 1 and %d, got 0", skiplock.MaxLimitWeight)
			}
			if payloadSet {
				p.Payload = json.RawMessage(payload)
			}
			if cmd.Flags().Changed("metadata") {
				m, err := skiplock.ParseMetadata([]byte(metadata))
				if err != nil {
					return usageError("--%v", err)
				}
				p.Metadata = m
			}
			if runAt != "" {
				if cmd.Flags().Changed("delay") {
					return usageError("--run-at and --delay: give one, not both")
				}
				t, err := time.Parse(time.RFC3339Nano, runAt)
				if err != nil {
					return usageError("--run-at: not an RFC 3339 time (e.g. 2026-11-22T10:00:00Z)")
				}
				if t.Before(time.Unix(0, 0)) {
					return usageError("--run-at: %s is before 1970", t.UTC().Format(time.RFC3339))
				}
				p.RunAt = t
			}
			p.Delay = delay
			switch uniqueBy {
			case "key":
			case "args":
				p.Unique.ByArgs = true
			default:
				return usageError("--unique-by: must be key or args, got %q", uniqueBy)
			}
			pool, err := g.connect(ctx, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			keys, err := g.keyring()
			if err != nil {
				return err
			}
			c, err := skiplock.NewClient(pool, skiplock.Config{Schema: g.schema, Logger: g.logger(cmd.ErrOrStderr()), Encryption: keys})
			if err != nil {
				return err
			}
			res, err := c.Enqueue(ctx, p)
			if err != nil {
				var fe *skiplock.FieldError
				if errors.As(err, &fe) {
					if fe.Field == "mode" {
						return usageError("--supersede, --debounce, --throttle: %s", fe.Message)
					}
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
	f.IntVar(&p.Priority, "priority", 0, fmt.Sprintf("priority, %d..%d (larger runs earlier)", skiplock.MinPriority, skiplock.MaxPriority))
	f.StringVar(&runAt, "run-at", "", "run at this RFC 3339 time")
	f.DurationVar(&delay, "delay", 0, "run after this delay (database clock)")
	f.IntVar(&p.MaxAttempts, "max-attempts", 0, fmt.Sprintf("attempts before the dead-letter table (default %d)", skiplock.DefaultMaxAttempts))
	f.StringVar(&p.UniqueKey, "unique-key", "", "idempotency key: a duplicate in flight returns the existing id")
	f.BoolVar(&p.BumpSchedule, "bump-schedule", false, "with --unique-key: push the in-flight job's run_at to the later time")
	f.StringVar(&uniqueBy, "unique-by", "key", "uniqueness by key (--unique-key) or by args (the kind and the payload)")
	f.StringSliceVar(&p.Unique.ArgsFields, "unique-fields", nil, "with --unique-by args: only these top-level payload fields make the key")
	f.DurationVar(&p.Unique.Period, "unique-period", 0, "hold the key for the whole period bucket (e.g. 1h: one job per clock hour), finished or not")
	f.BoolVar(&p.Supersede, "supersede", false, "with a key: replace the waiting job's payload, or cancel the running one (fenced) and run this next")
	f.DurationVar(&p.Debounce, "debounce", 0, "with a key: replace the waiting job's payload and run it this long after the last enqueue")
	f.DurationVar(&p.Throttle, "throttle", 0, "with a key: at most one run per window; enqueues while one waits fold into it")
	f.StringVar(&p.Tenant, "tenant", "", "tenant key (fairness)")
	f.StringVar(&p.Entity, "entity", "", "entity key (at most one running job per entity)")
	f.IntVar(&p.LimitWeight, "limit-weight", 1, fmt.Sprintf("starts this job counts as in the rate limits that cover it, 1..%d", skiplock.MaxLimitWeight))
	f.StringVar(&metadata, "metadata", "", "metadata: a JSON object shown with the job and given to its handler (trace ids, tags; not secrets)")
	f.StringVar(&file, "file", "", "bulk-load jobs from an NDJSON file (one job object per line; - for stdin)")
	f.IntVar(&batchSize, "batch", 5000, "jobs per COPY transaction with --file")
	g.addJSON(cmd)
	g.addEncryptionKeys(cmd)
	return cmd
}

// ndjsonKeys are the keys a line of an NDJSON bulk file may carry: the SQL
// function's argument names.
var ndjsonKeys = map[string]bool{"queue": true, "kind": true, "payload": true, "priority": true, "run_at": true,
	"max_attempts": true, "unique_key": true, "tenant": true, "entity": true, "metadata": true,
	"limit_weight": true}

// parseNDJSONLine decodes one line strictly: one JSON object whose keys are
// the SQL function's argument names, each at most once. Every error names
// the key (or a byte offset) and never echoes a value. A null value means
// the key's default, as a NULL argument does in SQL; an explicit empty queue
// and an explicit max_attempts of 0 are rejected, as the SQL function does.
func parseNDJSONLine(line []byte) (skiplock.EnqueueParams, error) {
	var p skiplock.EnqueueParams
	fields, err := splitNDJSONObject(line)
	if err != nil {
		return p, err
	}
	str := func(key string, dst *string) error {
		raw, ok := fields[key]
		if !ok {
			return nil
		}
		if !utf8.Valid(raw) {
			return fmt.Errorf("%s: not valid UTF-8", key)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return fmt.Errorf("%s: must be a string", key)
		}
		return nil
	}
	integer := func(key string, dst *int, lo, hi int) error {
		raw, ok := fields[key]
		if !ok {
			return nil
		}
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil || n < int64(lo) || n > int64(hi) {
			return fmt.Errorf("%s: must be an integer between %d and %d", key, lo, hi)
		}
		*dst = int(n)
		return nil
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"queue", &p.Queue}, {"kind", &p.Kind}, {"unique_key", &p.UniqueKey}, {"tenant", &p.Tenant}, {"entity", &p.Entity}} {
		if err := str(f.key, f.dst); err != nil {
			return p, err
		}
	}
	if _, ok := fields["queue"]; ok && p.Queue == "" {
		return p, errors.New("queue: must not be empty (leave the key out for the default queue)")
	}
	if p.Kind == "" {
		return p, errors.New("kind: must not be empty")
	}
	if err := integer("priority", &p.Priority, skiplock.MinPriority, skiplock.MaxPriority); err != nil {
		return p, err
	}
	if err := integer("max_attempts", &p.MaxAttempts, 1, skiplock.MaxAttemptsLimit); err != nil {
		return p, err
	}
	if err := integer("limit_weight", &p.LimitWeight, 1, skiplock.MaxLimitWeight); err != nil {
		return p, err
	}
	if raw, ok := fields["payload"]; ok {
		p.Payload = raw
	}
	if raw, ok := fields["metadata"]; ok {
		m, err := skiplock.ParseMetadata(raw)
		if err != nil {
			return p, err
		}
		p.Metadata = m
	}
	var runAt string
	if err := str("run_at", &runAt); err != nil {
		return p, err
	}
	if _, ok := fields["run_at"]; ok {
		t, err := time.Parse(time.RFC3339Nano, runAt)
		if err != nil {
			return p, errors.New("run_at: not an RFC 3339 time (e.g. 2026-11-22T10:00:00Z)")
		}
		if t.Before(time.Unix(0, 0)) {
			return p, errors.New("run_at: is before 1970")
		}
		p.RunAt = t
	}
	return p, nil
}

// splitNDJSONObject returns the raw value of each known key of the one JSON
// object on line; null values are left out.
func splitNDJSONObject(line []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	syntax := func(key string) error {
		where := "not a valid job object"
		if key != "" {
			where = key + ": not valid JSON"
		}
		return fmt.Errorf("%s at byte offset %d", where, dec.InputOffset())
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, syntax("")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object (one job object per line)")
	}
	fields := map[string]json.RawMessage{}
	seen := map[string]bool{}
	last := "" // the key whose value was read last: a syntax error right after it is its fault
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntax(last)
		}
		key, _ := tok.(string)
		if !ndjsonKeys[key] {
			if len(key) > 40 || !utf8.ValidString(key) {
				return nil, errors.New("unknown key (keys are the SQL function's argument names)")
			}
			return nil, fmt.Errorf("unknown key %q (keys are the SQL function's argument names)", key)
		}
		if seen[key] {
			return nil, fmt.Errorf("%s: given more than once", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntax(key)
		}
		if string(raw) != "null" {
			fields[key] = raw
		}
		last = key
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntax(last)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value on the line")
	}
	return fields, nil
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
func (g *globals) enqueueFile(ctx context.Context, cmd *cobra.Command, path string, batchSize int) error {
	if batchSize < 1 || batchSize > 100000 {
		return usageError("--batch: must be between 1 and 100000")
	}
	open := func() (io.ReadCloser, error) {
		if path == "-" {
			return io.NopCloser(os.Stdin), nil
		}
		return os.Open(path)
	}
	pool, err := g.connect(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	keys, err := g.keyring()
	if err != nil {
		return err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: g.schema, Logger: g.logger(cmd.ErrOrStderr()), Encryption: keys})
	if err != nil {
		return err
	}
	// Pass 1: validate every line (stdin is buffered for pass 2).
	var stdinLines [][]byte
	lines := 0 // job lines: blank lines carry no job and are not counted
	if err := scanLines(open, func(n int, line []byte) error {
		lines++
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

	progress := g.newProgress(cmd.ErrOrStderr(), lines, "enqueue")
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
	// say, when set (--log-format json), writes the progress lines as
	// records instead.
	say func(line string, attrs ...slog.Attr)
}

func (g *globals) newProgress(w io.Writer, total int, label string) *progress {
	p := &progress{w: w, label: label, total: total, last: time.Now()}
	if g.logFormat == "json" {
		p.say = func(line string, attrs ...slog.Attr) { g.say(w, line, attrs...) }
		return p
	}
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
		if p.say != nil {
			p.say(fmt.Sprintf("%s: %d/%d", p.label, p.done, p.total), slog.Int("done", p.done), slog.Int("total", p.total))
			p.last = time.Now()
			return
		}
		fmt.Fprintf(p.w, "%s: %d/%d\n", p.label, p.done, p.total)
		p.last = time.Now()
	}
}

func (p *progress) Finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
