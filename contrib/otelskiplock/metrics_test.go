package otelskiplock_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/contrib/otelskiplock"
)

// The metrics follow the messaging semantic conventions: jobs sent and
// consumed are counted, each run's duration is recorded with its queue,
// kind and outcome (error.type when it failed), and no attribute carries a
// job id.
func TestMessagingMetrics(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg := skiplock.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	otelskiplock.New(otelskiplock.WithMeterProvider(mp)).Register(&cfg)
	c, err := skiplock.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := skiplock.Handle(c, "ok", func(context.Context, *skiplock.Job[struct{}]) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := skiplock.Handle(c, "bad", func(context.Context, *skiplock.Job[struct{}]) error { return errors.New("boom") },
		skiplock.WithMaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "ok"}, {Kind: "ok"}, {Kind: "bad", Queue: "q2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Drain(ctx, skiplock.DrainOptions{Queues: []string{"default", "q2"}}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	sum := func(name string, want map[attribute.Key]string) int64 {
		var n int64
		switch d := got[name].(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				if match(p.Attributes, want) {
					n += p.Value
				}
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				if match(p.Attributes, want) {
					n += int64(p.Count)
				}
			}
		default:
			t.Fatalf("%s: missing or of type %T", name, got[name])
		}
		return n
	}
	if n := sum(otelskiplock.MetricSentMessages, map[attribute.Key]string{otelskiplock.AttrDestinationName: "default", otelskiplock.AttrKind: "ok"}); n != 2 {
		t.Fatalf("sent to default: %d", n)
	}
	if n := sum(otelskiplock.MetricConsumedMessages, nil); n != 3 {
		t.Fatalf("consumed: %d", n)
	}
	if n := sum(otelskiplock.MetricProcessDuration, map[attribute.Key]string{otelskiplock.AttrOutcome: "completed", otelskiplock.AttrOperationName: "process"}); n != 2 {
		t.Fatalf("completed runs: %d", n)
	}
	if n := sum(otelskiplock.MetricProcessDuration, map[attribute.Key]string{otelskiplock.AttrDestinationName: "q2", otelskiplock.AttrErrorType: "error"}); n != 1 {
		t.Fatalf("failed runs: %d", n)
	}
	if n := sum(otelskiplock.MetricOperationDuration, nil); n != 1 {
		t.Fatalf("enqueue calls: %d", n)
	}
	for name, data := range got {
		if h, ok := data.(metricdata.Histogram[float64]); ok {
			for _, p := range h.DataPoints {
				if _, ok := p.Attributes.Value(otelskiplock.AttrJobID); ok {
					t.Fatalf("%s carries a job id", name)
				}
			}
		}
	}
}

// match reports whether set has every attribute of want.
func match(set attribute.Set, want map[attribute.Key]string) bool {
	for k, v := range want {
		if got, ok := set.Value(k); !ok || got.AsString() != v {
			return false
		}
	}
	return true
}
