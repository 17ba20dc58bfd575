package measure

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Tracer counts the round trips a pgx pool sends — statements by name, each
// batch and each COPY as one — while it is on, and times the statements its
// timed function picks (the claim, in a drain) into Timed. Install it as the
// pool's ConnConfig.Tracer.
type Tracer struct {
	name  func(sql string) string
	timed func(name string) bool

	mu     sync.Mutex // guards counts, rows and on
	counts map[string]int64
	rows   map[string]int64 // rows returned or affected, by name
	on     bool

	// Timed holds the durations of the timed statements that succeeded.
	Timed Hist
}

// NewTracer returns a Tracer that names a statement with name(sql) and times
// the statements whose name timed reports true for. It starts off.
func NewTracer(name func(sql string) string, timed func(name string) bool) *Tracer {
	return &Tracer{name: name, timed: timed, counts: map[string]int64{}, rows: map[string]int64{}}
}

// Start begins counting; what was sent before (seeding) is not counted.
func (t *Tracer) Start() {
	t.mu.Lock()
	t.on = true
	t.mu.Unlock()
}

// Stop ends counting and returns the counts by name.
func (t *Tracer) Stop() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on = false
	out := make(map[string]int64, len(t.counts))
	for k, v := range t.counts {
		out[k] = v
	}
	return out
}

// Rows returns the rows the statements named name returned or affected
// (their command tags) while counting was on, alone or in a batch.
func (t *Tracer) Rows(name string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rows[name]
}

type traceStartKey struct{}

type traceStart struct {
	name string
	t    time.Time
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceStartKey{}, traceStart{name: t.name(data.SQL), t: time.Now()})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *Tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	s, ok := ctx.Value(traceStartKey{}).(traceStart)
	if !ok {
		return
	}
	t.mu.Lock()
	on := t.on
	if on {
		t.counts[s.name]++
		if data.Err == nil {
			t.rows[s.name] += data.CommandTag.RowsAffected()
		}
	}
	t.mu.Unlock()
	if on && data.Err == nil && t.timed(s.name) {
		t.Timed.Add(time.Since(s.t))
	}
}

type batchKey struct{}

// batchTrace is one batch in flight: when it started and the timed
// statement it carries, if any (a claim sent as a pipeline).
type batchTrace struct {
	start time.Time
	mu    sync.Mutex
	timed string
}

// TraceBatchStart implements pgx.BatchTracer: a batch is one round trip,
// counted as "batch", or under the name of the timed statement it carries
// (and timed as that statement).
func (t *Tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchKey{}, &batchTrace{start: time.Now()})
}

// TraceBatchQuery implements pgx.BatchTracer.
func (t *Tracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	b, ok := ctx.Value(batchKey{}).(*batchTrace)
	if !ok {
		return
	}
	n := t.name(data.SQL)
	if data.Err == nil {
		t.mu.Lock()
		if t.on {
			t.rows[n] += data.CommandTag.RowsAffected()
		}
		t.mu.Unlock()
	}
	if t.timed(n) {
		b.mu.Lock()
		b.timed = n
		b.mu.Unlock()
	}
}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *Tracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	b, ok := ctx.Value(batchKey{}).(*batchTrace)
	if !ok {
		t.count("batch")
		return
	}
	b.mu.Lock()
	name := b.timed
	b.mu.Unlock()
	if name == "" {
		t.count("batch")
		return
	}
	t.mu.Lock()
	on := t.on
	if on {
		t.counts[name]++
	}
	t.mu.Unlock()
	if on && data.Err == nil {
		t.Timed.Add(time.Since(b.start))
	}
}

// TraceCopyFromStart implements pgx.CopyFromTracer: a COPY is one round trip.
func (t *Tracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	t.count("copy")
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (t *Tracer) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (t *Tracer) count(name string) {
	t.mu.Lock()
	if t.on {
		t.counts[name]++
	}
	t.mu.Unlock()
}

// Statement is one statement's count in a report.
type Statement struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
}

// SortedCounts lists counts by name, most frequent first (ties by name).
func SortedCounts(m map[string]int64) []Statement {
	out := make([]Statement, 0, len(m))
	for k, v := range m {
		out = append(out, Statement{Name: k, Count: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Name < out[j].Name
	})
	return out
}
