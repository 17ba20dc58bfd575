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
//
// It also records metrics named after OpenTelemetry's messaging semantic
// conventions, through the global MeterProvider (or WithMeterProvider):
// messaging.process.duration (a histogram of handler runs, in seconds),
// messaging.client.consumed.messages (jobs handed to a handler),
// messaging.client.sent.messages (jobs enqueued) and
// messaging.client.operation.duration (enqueue calls, in seconds). Their
// attributes are messaging.system ("skiplock"), messaging.destination.name
// (the queue), messaging.operation.name ("process" or "send"),
// skiplock.kind, and on a run skiplock.outcome and, when it failed,
// error.type (the outcome): a bounded set, never a job id or payload.
package otelskiplock

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
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

// WithMeterProvider sets the MeterProvider of the metrics (default: the
// global one, otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(m *Middleware) { m.mp = mp }
}

// Metric names, from OpenTelemetry's messaging semantic conventions.
const (
	MetricProcessDuration   = "messaging.process.duration"
	MetricConsumedMessages  = "messaging.client.consumed.messages"
	MetricSentMessages      = "messaging.client.sent.messages"
	MetricOperationDuration = "messaging.client.operation.duration"
)

// Attributes of the messaging semantic conventions the metrics carry
// (besides AttrMessagingSystem, AttrKind and AttrOutcome).
const (
	AttrDestinationName = attribute.Key("messaging.destination.name")
	AttrOperationName   = attribute.Key("messaging.operation.name")
	AttrErrorType       = attribute.Key("error.type")
)

// WithPropagator sets how the trace context is written into and read from a
// job's metadata (default: the global propagator, otel.GetTextMapPropagator();
// with the SDK's default of no propagator, a W3C TraceContext one).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(m *Middleware) { m.prop = p }
}

// Middleware is skiplock enqueue and work middleware that traces jobs.
type Middleware struct {
	mp     metric.MeterProvider
	tp     trace.TracerProvider
	prop   propagation.TextMapPropagator
	tracer trace.Tracer

	processDur, opDur metric.Float64Histogram
	consumed, sent    metric.Int64Counter
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
	if m.mp == nil {
		m.mp = otel.GetMeterProvider()
	}
	m.instruments()
	return m
}

// instruments creates the metric instruments. An instrument the provider
// refuses is replaced by its no-op (the provider reports the error through
// otel.Handle), so metrics never fail a job.
func (m *Middleware) instruments() {
	meter := m.mp.Meter(ScopeName)
	var err error
	secs := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	if m.processDur, err = meter.Float64Histogram(MetricProcessDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a skiplock handler run."), metric.WithExplicitBucketBoundaries(secs...)); err != nil {
		otel.Handle(err)
	}
	if m.consumed, err = meter.Int64Counter(MetricConsumedMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Jobs handed to a skiplock handler.")); err != nil {
		otel.Handle(err)
	}
	if m.sent, err = meter.Int64Counter(MetricSentMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Jobs enqueued to skiplock.")); err != nil {
		otel.Handle(err)
	}
	if m.opDur, err = meter.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a skiplock enqueue call.")); err != nil {
		otel.Handle(err)
	}
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
	began := time.Now()
	err := next(ctx)
	if err != nil {
		// skiplock's enqueue errors name a field or a database condition,
		// never a value.
		span.SetStatus(codes.Error, err.Error())
	}
	m.recordSend(ctx, jobs, time.Since(began), err)
	return err
}

// recordSend counts the jobs of one enqueue call per queue and kind, once
// it succeeded, and times the call.
func (m *Middleware) recordSend(ctx context.Context, jobs []*skiplock.EnqueueParams, took time.Duration, err error) {
	type dest struct{ queue, kind string }
	if err == nil && m.sent != nil {
		n := map[dest]int64{}
		for _, p := range jobs {
			q := p.Queue
			if q == "" {
				q = skiplock.DefaultQueue
			}
			n[dest{q, p.Kind}]++
		}
		for d, c := range n {
			m.sent.Add(ctx, c, metric.WithAttributes(AttrMessagingSystem.String("skiplock"), AttrOperationName.String("send"),
				AttrDestinationName.String(d.queue), AttrKind.String(d.kind)))
		}
	}
	if m.opDur != nil {
		attrs := []attribute.KeyValue{AttrMessagingSystem.String("skiplock"), AttrOperationName.String("send")}
		if err != nil {
			attrs = append(attrs, AttrErrorType.String("error"))
		}
		m.opDur.Record(ctx, took.Seconds(), metric.WithAttributes(attrs...))
	}
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
	common := []attribute.KeyValue{AttrMessagingSystem.String("skiplock"), AttrOperationName.String("process"),
		AttrDestinationName.String(job.Queue), AttrKind.String(job.Kind)}
	if m.consumed != nil {
		m.consumed.Add(ctx, 1, metric.WithAttributes(common...))
	}
	began := time.Now()
	err := next(ctx)
	took := time.Since(began)
	outcome := skiplock.AttemptOutcome(ctx, err)
	span.SetAttributes(AttrOutcome.String(outcome))
	if p, ok := skiplock.LastProgress(ctx); ok {
		span.SetAttributes(AttrProgressDone.Int64(p.Done), AttrProgressTotal.Int64(p.Total))
	}
	attrs := append(common, AttrOutcome.String(outcome))
	switch outcome {
	case skiplock.AttemptError, skiplock.AttemptPanic, skiplock.AttemptTimeout:
		span.SetStatus(codes.Error, outcome)
		attrs = append(attrs, AttrErrorType.String(outcome))
	}
	if m.processDur != nil {
		m.processDur.Record(ctx, took.Seconds(), metric.WithAttributes(attrs...))
	}
	return err
}
