package otelskiplock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/contrib/otelskiplock"
)

// newDB creates a fresh, migrated database on the test server
// (TEST_DATABASE_URL, else the local one) and drops it after the test.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin := os.Getenv("TEST_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("no PostgreSQL at TEST_DATABASE_URL or 127.0.0.1:5432: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "otelskiplock_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		c, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	if _, err := skiplock.Migrate(ctx, pool, "skiplock"); err != nil {
		t.Fatal(err)
	}
	return pool
}

type fixture struct {
	pool     *pgxpool.Pool
	client   *skiplock.Client
	recorder *tracetest.InMemoryExporter
	tracer   trace.Tracer
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := newDB(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := skiplock.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	otelskiplock.New(otelskiplock.WithTracerProvider(tp)).Register(&cfg)
	c, err := skiplock.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{pool: pool, client: c, recorder: exp, tracer: tp.Tracer("test")}
}

func (f *fixture) spans(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range f.recorder.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes {
		out[a.Key] = a.Value
	}
	return out
}

// noSecret fails if secret appears anywhere in the recorded spans.
func noSecret(t *testing.T, spans []tracetest.SpanStub, secret string) {
	t.Helper()
	for _, s := range spans {
		text := fmt.Sprintf("%s %v %v %v", s.Name, s.Attributes, s.Status, s.Events)
		if strings.Contains(text, secret) {
			t.Fatalf("span %s carries the secret: %s", s.Name, text)
		}
	}
}

// The work span is the child of the enqueue span, which is the child of
// the request that enqueued; the handler's own spans are children of the
// work span. Spans carry queue, kind, job id, attempt and outcome only.
func TestTraceAcrossTheQueue(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	const secret = "4111-1111-1111-1111"
	var handlerSpan trace.SpanContext
	err := skiplock.Handle(f.client, "charge", func(ctx context.Context, j *skiplock.Job[map[string]string]) error {
		_, s := f.tracer.Start(ctx, "charge card")
		handlerSpan = s.SpanContext()
		s.End()
		if j.Attempt == 1 {
			return errors.New("card " + j.Args["card"] + " declined")
		}
		return skiplock.SetProgress(ctx, 3, 4, "captured")
	})
	if err != nil {
		t.Fatal(err)
	}

	reqCtx, req := f.tracer.Start(ctx, "POST /orders")
	callerMD := skiplock.Metadata{"request_id": "r-1"}
	res, err := f.client.Enqueue(reqCtx, skiplock.EnqueueParams{Queue: "payments", Kind: "charge",
		Payload: map[string]string{"card": secret}, Metadata: callerMD})
	if err != nil {
		t.Fatal(err)
	}
	req.End()
	if len(callerMD) != 1 {
		t.Fatalf("the caller's metadata was written to: %v", callerMD)
	}
	var traceparent string
	if err := f.pool.QueryRow(ctx, `SELECT metadata->>'traceparent' FROM skiplock.jobs WHERE id = $1`, res.ID).Scan(&traceparent); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(traceparent, "00-"+req.SpanContext().TraceID().String()+"-") {
		t.Fatalf("stored traceparent %q is not in the request's trace %s", traceparent, req.SpanContext().TraceID())
	}

	// Attempt 1 fails, attempt 2 completes.
	for attempt := 1; attempt <= 2; attempt++ {
		if _, err := f.pool.Exec(ctx, `UPDATE skiplock.jobs SET run_at = now()`); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Drain(ctx, skiplock.DrainOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	enq := f.spans(otelskiplock.EnqueueSpanName)
	if len(enq) != 1 {
		t.Fatalf("want 1 enqueue span, got %d", len(enq))
	}
	e := enq[0]
	if e.Parent.SpanID() != req.SpanContext().SpanID() || e.SpanKind != trace.SpanKindProducer {
		t.Fatalf("enqueue span: parent %s kind %s, want parent %s, producer", e.Parent.SpanID(), e.SpanKind, req.SpanContext().SpanID())
	}
	ea := attrs(e)
	if ea[otelskiplock.AttrQueue].AsString() != "payments" || ea[otelskiplock.AttrKind].AsString() != "charge" ||
		ea[otelskiplock.AttrBatchSize].AsInt64() != 1 {
		t.Fatalf("enqueue attributes: %v", e.Attributes)
	}

	work := f.spans(otelskiplock.WorkSpanName)
	if len(work) != 2 {
		t.Fatalf("want 2 work spans (one per attempt), got %d", len(work))
	}
	for i, w := range work {
		if w.Parent.SpanID() != e.SpanContext.SpanID() || w.SpanContext.TraceID() != req.SpanContext().TraceID() {
			t.Fatalf("work span %d: parent %s trace %s, want the enqueue span %s", i, w.Parent.SpanID(), w.SpanContext.TraceID(), e.SpanContext.SpanID())
		}
		if !w.Parent.IsRemote() || w.SpanKind != trace.SpanKindConsumer {
			t.Fatalf("work span %d: parent remote %v kind %s", i, w.Parent.IsRemote(), w.SpanKind)
		}
		a := attrs(w)
		if a[otelskiplock.AttrQueue].AsString() != "payments" || a[otelskiplock.AttrKind].AsString() != "charge" ||
			a[otelskiplock.AttrJobID].AsInt64() != res.ID || a[otelskiplock.AttrAttempt].AsInt64() != int64(i+1) ||
			a[otelskiplock.AttrMaxAttempts].AsInt64() != 20 {
			t.Fatalf("work span %d attributes: %v", i, w.Attributes)
		}
	}
	if got := attrs(work[0])[otelskiplock.AttrOutcome].AsString(); got != "error" || work[0].Status.Code != codes.Error ||
		work[0].Status.Description != "error" {
		t.Fatalf("failed attempt: outcome %q status %v", got, work[0].Status)
	}
	if got := attrs(work[1])[otelskiplock.AttrOutcome].AsString(); got != "completed" || work[1].Status.Code == codes.Error {
		t.Fatalf("completed attempt: outcome %q status %v", got, work[1].Status)
	}
	if _, ok := attrs(work[0])[otelskiplock.AttrProgressDone]; ok {
		t.Fatal("a run without progress has a progress attribute")
	}
	if a := attrs(work[1]); a[otelskiplock.AttrProgressDone].AsInt64() != 3 || a[otelskiplock.AttrProgressTotal].AsInt64() != 4 {
		t.Fatalf("the run's last progress is not on its span: %v", work[1].Attributes)
	}
	if handlerSpan.TraceID() != req.SpanContext().TraceID() {
		t.Fatal("the handler's span is not in the request's trace")
	}
	var handlerParent trace.SpanID
	for _, s := range f.spans("charge card") {
		if s.SpanContext.SpanID() == handlerSpan.SpanID() {
			handlerParent = s.Parent.SpanID()
		}
	}
	if handlerParent != work[1].SpanContext.SpanID() {
		t.Fatal("the handler's span is not a child of its work span")
	}
	noSecret(t, f.recorder.GetSpans(), secret)
}

// A batch is one enqueue span; every job of it links to that span. A job
// enqueued without a trace context (plain SQL) gets a root work span.
func TestBatchAndUntracedJobs(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := skiplock.Handle(f.client, "k", func(ctx context.Context, j *skiplock.Job[struct{}]) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := skiplock.Handle(f.client, "other", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		return skiplock.Snooze(0)
	}); err != nil {
		t.Fatal(err)
	}
	n, err := f.client.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "k"}, {Kind: "k"}, {Kind: "other", UniqueKey: "u"}})
	if err != nil || n != 3 {
		t.Fatalf("EnqueueMany: %d %v", n, err)
	}
	var untraced int64
	if err := f.pool.QueryRow(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'k')`).Scan(&untraced); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Drain(ctx, skiplock.DrainOptions{}); err != nil {
		t.Fatal(err)
	}
	enq := f.spans(otelskiplock.EnqueueSpanName)
	if len(enq) != 1 {
		t.Fatalf("want one enqueue span for the batch, got %d", len(enq))
	}
	a := attrs(enq[0])
	if a[otelskiplock.AttrBatchSize].AsInt64() != 3 || a[otelskiplock.AttrQueue].AsString() != "default" {
		t.Fatalf("batch attributes: %v", enq[0].Attributes)
	}
	if _, ok := a[otelskiplock.AttrKind]; ok {
		t.Fatal("a batch of mixed kinds names no kind")
	}
	work := f.spans(otelskiplock.WorkSpanName)
	if len(work) != 4 {
		t.Fatalf("want 4 work spans, got %d", len(work))
	}
	outcomes := map[string]int{}
	for _, w := range work {
		wa := attrs(w)
		outcomes[wa[otelskiplock.AttrOutcome].AsString()]++
		if wa[otelskiplock.AttrJobID].AsInt64() == untraced {
			if w.Parent.IsValid() {
				t.Fatal("a job without trace context got a parent")
			}
			continue
		}
		if w.Parent.SpanID() != enq[0].SpanContext.SpanID() {
			t.Fatalf("job %d is not a child of the batch's span", wa[otelskiplock.AttrJobID].AsInt64())
		}
	}
	if outcomes["completed"] != 3 || outcomes["snoozed"] != 1 {
		t.Fatalf("outcomes: %v", outcomes)
	}
}

// A refused enqueue is an error span and writes nothing.
func TestEnqueueErrorSpan(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	_, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Priority: 5000})
	if err == nil {
		t.Fatal("want a validation error")
	}
	enq := f.spans(otelskiplock.EnqueueSpanName)
	if len(enq) != 1 || enq[0].Status.Code != codes.Error || !strings.Contains(enq[0].Status.Description, "priority") {
		t.Fatalf("enqueue spans: %+v", enq)
	}
	var n int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("jobs: %d %v", n, err)
	}
}
