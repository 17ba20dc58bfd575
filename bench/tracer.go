package bench

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/bench/measure"
	"github.com/skiplock/skiplock/internal/store"
)

// tracer counts the statements (round trips) the runtime sends, by name, and
// times every claim. It is installed on the benchmark's own pool only.
type tracer struct {
	names map[string]string // rendered SQL -> statement name

	mu     sync.Mutex // guards counts and on
	counts map[string]int64
	on     bool

	claims measure.Hist
}

type traceStartKey struct{}

type traceStart struct {
	name string
	t    time.Time
}

// tracedStatements are the store statements worth naming in a report.
var tracedStatements = []string{"claim", "claim_capped", "complete_delete", "complete_archive", "heartbeat",
	"reschedule", "dead_letter", "reap", "worker_beat", "enqueue", "notify_queues"}

func newTracer(st *store.Store) *tracer {
	t := &tracer{names: map[string]string{}, counts: map[string]int64{}}
	for _, n := range tracedStatements {
		t.names[st.SQL(n)] = n
	}
	return t
}

func (t *tracer) name(sql string) string {
	if n, ok := t.names[sql]; ok {
		return n
	}
	s := strings.ToLower(strings.TrimSpace(sql))
	switch {
	case s == "begin" || strings.HasPrefix(s, "begin "):
		return "begin"
	case s == "commit":
		return "commit"
	case s == "rollback":
		return "rollback"
	}
	if f := strings.Fields(s); len(f) > 0 {
		return "other:" + f[0]
	}
	return "other"
}

// start begins counting; statements before it (seeding) are not counted.
func (t *tracer) start() {
	t.mu.Lock()
	t.on = true
	t.mu.Unlock()
}

// stop ends counting and returns the counts.
func (t *tracer) stop() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on = false
	out := make(map[string]int64, len(t.counts))
	for k, v := range t.counts {
		out[k] = v
	}
	return out
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceStartKey{}, traceStart{name: t.name(data.SQL), t: time.Now()})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	s, ok := ctx.Value(traceStartKey{}).(traceStart)
	if !ok {
		return
	}
	t.mu.Lock()
	on := t.on
	if on {
		t.counts[s.name]++
	}
	t.mu.Unlock()
	if on && data.Err == nil && (s.name == "claim" || s.name == "claim_capped") {
		t.claims.Add(time.Since(s.t))
	}
}

// TraceBatchStart implements pgx.BatchTracer: a batch is one round trip.
func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.count("batch")
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (t *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart implements pgx.CopyFromTracer.
func (t *tracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	t.count("copy")
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (t *tracer) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (t *tracer) count(name string) {
	t.mu.Lock()
	if t.on {
		t.counts[name]++
	}
	t.mu.Unlock()
}

// Statement is one statement's count in a Result.
type Statement struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
}

func sortedCounts(m map[string]int64) []Statement {
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
