// Package otelskiplock traces skiplock jobs with OpenTelemetry: a producer
// span for every enqueue and a consumer span for every handler run, linked
// parent to child across the queue through the job's metadata (W3C Trace
// Context: traceparent and tracestate).
//
// It lives in its own module so that skiplock itself never depends on
// OpenTelemetry. It plugs into skiplock's middleware:
//
//	mw := otelskiplock.New() // the global TracerProvider and propagator
//	cfg := skiplock.Config{
//		EnqueueMiddleware: []skiplock.EnqueueMiddleware{mw.Enqueue},
//		WorkMiddleware:    []skiplock.WorkMiddleware{mw.Work},
//	}
//
// Spans carry the queue, kind, job id, attempt and outcome, never a payload
// and never a handler's error text (which may quote one): a failed run's
// span has status Error with the outcome ("error", "panic", "timeout") as
// its description; the error itself is in the job's last_error.
package otelskiplock

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/skiplock/skiplock/contrib/otelskiplock"

// Span names.
const (
	EnqueueSpanName = "skiplock.enqueue"
	WorkSpanName    = "skiplock.work"
)

// Attribute keys set on the spans.
const (
	AttrQueue       = attribute.Key("skiplock.queue")
	AttrKind        = attribute.Key("skiplock.kind")
	AttrJobID       = attribute.Key("skiplock.job_id")
	AttrAttempt     = attribute.Key("skiplock.attempt")
	AttrMaxAttempts = attribute.Key("skiplock.max_attempts")
	AttrOutcome     = attribute.Key("skiplock.outcome")
	AttrBatchSize   = attribute.Key("skiplock.batch_size")
	// AttrProgressDone and AttrProgressTotal are the run's last progress
	// report (skiplock.SetProgress), when it made one.
	AttrProgressDone  = attribute.Key("skiplock.progress.done")
	AttrProgressTotal = attribute.Key("skiplock.progress.total")
	// AttrMessagingSystem is OpenTelemetry's messaging.system, "skiplock".
	AttrMessagingSystem = attribute.Key("messaging.system")
)

// Option configures New.
type Option func(*Middleware)

// WithTracerProvider sets the provider of the tracer (default: the global
// one, otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(m *Middleware) { m.tp = tp }
}

// WithPropagator sets how the trace context is written into and read from a
// job's metadata (default: the global propagator, otel.GetTextMapPropagator();
// with the SDK's default of no propagator, a W3C TraceContext one).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(m *Middleware) { m.prop = p }
}

// Middleware is skiplock enqueue and work middleware that traces jobs.
type Middleware struct {
	tp     trace.TracerProvider
	prop   propagation.TextMapPropagator
	tracer trace.Tracer
}

// New returns the middleware. Register Enqueue and Work on skiplock.Config
// (or use Register).
func New(opts ...Option) *Middleware {
	m := &Middleware{}
	for _, o := range opts {
		o(m)
	}
	if m.tp == nil {
		m.tp = otel.GetTracerProvider()
	}
	if m.prop == nil {
		m.prop = otel.GetTextMapPropagator()
		if len(m.prop.Fields()) == 0 {
			m.prop = propagation.TraceContext{}
		}
	}
	m.tracer = m.tp.Tracer(ScopeName)
	return m
}

// Register appends the middleware to cfg's enqueue and work middleware.
func (m *Middleware) Register(cfg *skiplock.Config) {
	cfg.EnqueueMiddleware = append(cfg.EnqueueMiddleware, m.Enqueue)
	cfg.WorkMiddleware = append(cfg.WorkMiddleware, m.Work)
}

// Enqueue is skiplock.EnqueueMiddleware: one producer span per enqueue call
// (a batch is one span), whose context every job of the call carries in its
// metadata. The caller's metadata maps are copied, never written to.
func (m *Middleware) Enqueue(ctx context.Context, jobs []*skiplock.EnqueueParams, next func(context.Context) error) error {
	attrs := []attribute.KeyValue{AttrMessagingSystem.String("skiplock"), AttrBatchSize.Int(len(jobs))}
	if q, ok := common(jobs, func(p *skiplock.EnqueueParams) string {
		if p.Queue == "" {
			return skiplock.DefaultQueue
		}
		return p.Queue
	}); ok {
		attrs = append(attrs, AttrQueue.String(q))
	}
	if k, ok := common(jobs, func(p *skiplock.EnqueueParams) string { return p.Kind }); ok {
		attrs = append(attrs, AttrKind.String(k))
	}
	ctx, span := m.tracer.Start(ctx, EnqueueSpanName, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()
	for _, p := range jobs {
		md := p.Metadata.Clone()
		m.prop.Inject(ctx, md)
		p.Metadata = md
	}
	err := next(ctx)
	if err != nil {
		// skiplock's enqueue errors name a field or a database condition,
		// never a value.
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// common returns the value every job shares, if they share one.
func common(jobs []*skiplock.EnqueueParams, f func(*skiplock.EnqueueParams) string) (string, bool) {
	if len(jobs) == 0 {
		return "", false
	}
	v := f(jobs[0])
	for _, p := range jobs[1:] {
		if f(p) != v {
			return "", false
		}
	}
	return v, true
}

// Work is skiplock.WorkMiddleware: one consumer span per handler run, the
// child of the span that enqueued the job when its metadata carries a trace
// context. The handler's context holds the span, so spans the handler starts
// are its children.
func (m *Middleware) Work(ctx context.Context, job *skiplock.JobInfo, next func(context.Context) error) error {
	if len(job.Metadata) > 0 {
		ctx = m.prop.Extract(ctx, job.Metadata)
	}
	ctx, span := m.tracer.Start(ctx, WorkSpanName, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			AttrMessagingSystem.String("skiplock"),
			AttrQueue.String(job.Queue), AttrKind.String(job.Kind), AttrJobID.Int64(job.ID),
			AttrAttempt.Int(job.Attempt), AttrMaxAttempts.Int(job.MaxAttempts),
		))
	defer span.End()
	err := next(ctx)
	outcome := skiplock.AttemptOutcome(ctx, err)
	span.SetAttributes(AttrOutcome.String(outcome))
	if p, ok := skiplock.LastProgress(ctx); ok {
		span.SetAttributes(AttrProgressDone.Int64(p.Done), AttrProgressTotal.Int64(p.Total))
	}
	switch outcome {
	case skiplock.AttemptError, skiplock.AttemptPanic, skiplock.AttemptTimeout:
		span.SetStatus(codes.Error, outcome)
	}
	return err
}
