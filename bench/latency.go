package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bench/measure"
	"github.com/skiplock/skiplock/internal/store"
)

// LatencyResult is what RunLatency measured: enqueue → handler start on an
// idle queue, one job at a time, with the client's default settings
// (LISTEN/NOTIFY wake-up, 1 s backstop poll).
type LatencyResult struct {
	Queue   string `json:"queue"`
	Samples int    `json:"samples"`
	// Latency is from just before Enqueue is called to the first line of the
	// handler: the enqueue's round trip and commit, NOTIFY delivery, the claim
	// and the hand-off to an executor.
	LatencyP50MS  float64 `json:"latency_p50_ms"`
	LatencyP99MS  float64 `json:"latency_p99_ms"`
	LatencyMaxMS  float64 `json:"latency_max_ms"`
	LatencyMeanMS float64 `json:"latency_mean_ms"`
	// WakeUp is from the handler's return to the return of a Client.Wait
	// for the job, called by another client (no worker pools, its own
	// LISTEN connection, as a web server that waits for jobs its workers
	// run) just after Enqueue returned: the completion's write and commit,
	// its announcement's delivery and the waiter's hand-off.
	WakeUpP50MS float64 `json:"wake_up_p50_ms"`
	WakeUpP99MS float64 `json:"wake_up_p99_ms"`
	WakeUpMaxMS float64 `json:"wake_up_max_ms"`
	// Enqueue is the Enqueue call alone (one round trip, commit included).
	EnqueueP50MS float64 `json:"enqueue_p50_ms"`
	EnqueueP99MS float64 `json:"enqueue_p99_ms"`
	// ListenerUp says whether the LISTEN connection was up (false: every
	// sample waited for the poll).
	ListenerUp bool `json:"listener_up"`
}

// latencyWarmup samples are taken and discarded before the timed ones, so
// connection set-up and statement preparation are not measured.
const latencyWarmup = 20

// RunLatency enqueues o.Samples jobs one at a time into an idle queue of its
// own and times each from enqueue to handler start; then as many again,
// each timed from the handler's return to a waiting client's Wait
// returning. The next job is enqueued only after the previous one's
// completion is written (and its wait returned), and a millisecond later,
// so every sample finds the queue and the worker idle.
func RunLatency(ctx context.Context, pool *pgxpool.Pool, o LatencyOptions) (LatencyResult, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return LatencyResult{}, err
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	st := store.New(o.Schema)
	if err := checkSchema(ctx, pool, st); err != nil {
		return LatencyResult{}, err
	}
	queue, workerID := names()
	bp, err := ownPool(ctx, pool, nil, 8, queue)
	if err != nil {
		return LatencyResult{}, err
	}
	defer bp.Close()
	res := LatencyResult{Queue: queue, Samples: o.Samples}
	// Default settings but for the queue, the worker id and a quiet logger.
	c, err := skiplock.NewClient(bp, skiplock.Config{Schema: o.Schema, Logger: orQuiet(o.Logger, progress), WorkerID: workerID,
		ListenURL: o.ListenURL, Pools: []skiplock.WorkerPool{{Queues: []string{queue}}}})
	if err != nil {
		return res, err
	}
	waiter, err := skiplock.NewClient(bp, skiplock.Config{Schema: o.Schema, Logger: orQuiet(o.Logger, progress), ListenURL: o.ListenURL})
	if err != nil {
		return res, err
	}
	// Its wait loop lingers after the last wait with its LISTEN
	// connection; Stop ends it.
	defer func() { _ = waiter.Stop(context.WithoutCancel(ctx)) }()
	started, returning := make(chan time.Time, 1), make(chan time.Time, 1)
	err = skiplock.Handle(c, "bench_latency", func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
		select {
		case started <- time.Now():
		default:
		}
		err := skiplock.SetResult(ctx, "done")
		select {
		case returning <- time.Now():
		default:
		}
		return err
	})
	if err != nil {
		return res, err
	}
	defer cleanup(pool, st, queue, workerID)
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	// Give the listener a moment to LISTEN, or every sample waits for a poll.
	for deadline := time.Now().Add(5 * time.Second); !c.Stats().ListenerUp && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	res.ListenerUp = c.Stats().ListenerUp

	type waited struct {
		at  time.Time
		err error
	}
	var lat, enq, wake measure.Hist
	last := time.Now()
	// Two passes of the same samples: enqueue → handler start with nothing
	// else running, then the wake-up, whose Wait (its look-up, its
	// connection) would otherwise run beside the pickup it times.
	n := latencyWarmup + o.Samples
	for i := 0; i < 2*n; i++ {
		waiting, timed := i >= n, i%n >= latencyWarmup
		woke := make(chan waited, 1)
		toStart, call, err := measure.TimeStart(ctx, started, 30*time.Second, func(ctx context.Context) error {
			r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: queue, Kind: "bench_latency"})
			if err == nil && waiting {
				go func() {
					wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					_, err := waiter.Wait(wctx, r.ID)
					woke <- waited{time.Now(), err}
				}()
			}
			return err
		})
		if err != nil {
			return res, fmt.Errorf("bench: sample %d: %w", i, err)
		}
		var ret time.Time
		select {
		case ret = <-returning:
		case <-ctx.Done():
			return res, ctx.Err()
		}
		switch {
		case waiting:
			w := <-woke
			if w.err != nil {
				return res, fmt.Errorf("bench: sample %d: wait: %w", i, w.err)
			}
			if timed {
				wake.Add(w.at.Sub(ret))
			}
		case timed:
			lat.Add(toStart)
			enq.Add(call)
		}
		for want := int64(i + 1); c.Stats().Completed < want; {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(time.Millisecond)
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(progress, "bench: latency %d/%d samples  p50 %.2f ms  p99 %.2f ms  wake-up %d/%d  p50 %.2f ms  p99 %.2f ms\n",
				lat.Count(), o.Samples, lat.QuantileMS(0.5), lat.QuantileMS(0.99), wake.Count(), o.Samples, wake.QuantileMS(0.5), wake.QuantileMS(0.99))
		}
	}
	res.ListenerUp = res.ListenerUp && c.Stats().ListenerUp
	res.LatencyP50MS, res.LatencyP99MS = lat.QuantileMS(0.50), lat.QuantileMS(0.99)
	res.LatencyMaxMS, res.LatencyMeanMS = lat.MaxMS(), lat.MeanMS()
	res.EnqueueP50MS, res.EnqueueP99MS = enq.QuantileMS(0.50), enq.QuantileMS(0.99)
	res.WakeUpP50MS, res.WakeUpP99MS, res.WakeUpMaxMS = wake.QuantileMS(0.50), wake.QuantileMS(0.99), wake.MaxMS()
	return res, nil
}
