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
	// handler, the job enqueued by the client whose pool runs it (a
	// process that both enqueues and works): the enqueue claims the job
	// for the idle pool in its own round trip and transaction (HandedOff
	// of the samples; Client.Enqueue), and an executor starts it.
	LatencyP50MS  float64 `json:"latency_p50_ms"`
	LatencyP99MS  float64 `json:"latency_p99_ms"`
	LatencyMaxMS  float64 `json:"latency_max_ms"`
	LatencyMeanMS float64 `json:"latency_mean_ms"`
	// HandedOff is how many of those samples the enqueue handed off (the
	// others found the pool not yet waiting idle, still finishing the last
	// job, and were claimed after their NOTIFY).
	HandedOff int `json:"handed_off"`
	// Remote is the same, the job enqueued by another client (no worker
	// pools, as a web server's): its enqueue's round trip and commit,
	// NOTIFY delivery, the pool's claim and the hand-off to an executor.
	// RemoteEnqueue is that enqueue alone, a plain one.
	RemoteP50MS        float64 `json:"remote_latency_p50_ms"`
	RemoteP99MS        float64 `json:"remote_latency_p99_ms"`
	RemoteMaxMS        float64 `json:"remote_latency_max_ms"`
	RemoteEnqueueP50MS float64 `json:"remote_enqueue_p50_ms"`
	RemoteEnqueueP99MS float64 `json:"remote_enqueue_p99_ms"`
	// WakeUp is from the handler's return to the return of a Client.Wait
	// for the job, called by another client (no worker pools, its own
	// LISTEN connection, as a web server that waits for jobs its workers
	// run) just after Enqueue returned: the completion's write and commit,
	// its announcement's delivery and the waiter's hand-off.
	WakeUpP50MS float64 `json:"wake_up_p50_ms"`
	WakeUpP99MS float64 `json:"wake_up_p99_ms"`
	WakeUpMaxMS float64 `json:"wake_up_max_ms"`
	// Enqueue is the Enqueue call alone of Latency's samples (one round
	// trip, commit included, the claim of those handed off with it).
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
// own and times each from enqueue to handler start, enqueued by the client
// whose pool runs them; then as many enqueued by another client; then as
// many again, each timed from the handler's return to a waiting client's
// Wait returning. The next job is enqueued only after the previous one's
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
	var lat, enq, remote, remoteEnq, wake measure.Hist
	last := time.Now()
	// Three passes of the same samples: enqueue → handler start with
	// nothing else running, enqueued by the worker's client, then by the
	// other; then the wake-up, whose Wait (its look-up, its connection)
	// would otherwise run beside the pickup it times.
	n := latencyWarmup + o.Samples
	var handedAt int64
	for i := 0; i < 3*n; i++ {
		fromOther, waiting, timed := i/n == 1, i >= 2*n, i%n >= latencyWarmup
		if i == latencyWarmup {
			handedAt = c.Stats().HandedOff
		}
		if i == n {
			res.HandedOff = int(c.Stats().HandedOff - handedAt)
		}
		enqueuer := c
		if fromOther {
			enqueuer = waiter
		}
		woke := make(chan waited, 1)
		toStart, call, err := measure.TimeStart(ctx, started, 30*time.Second, func(ctx context.Context) error {
			r, err := enqueuer.Enqueue(ctx, skiplock.EnqueueParams{Queue: queue, Kind: "bench_latency"})
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
		case timed && fromOther:
			remote.Add(toStart)
			remoteEnq.Add(call)
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
			fmt.Fprintf(progress, "bench: latency %d/%d samples  p50 %.2f ms  p99 %.2f ms  from another client %d/%d  p50 %.2f ms  p99 %.2f ms  wake-up %d/%d  p50 %.2f ms  p99 %.2f ms\n",
				lat.Count(), o.Samples, lat.QuantileMS(0.5), lat.QuantileMS(0.99), remote.Count(), o.Samples, remote.QuantileMS(0.5), remote.QuantileMS(0.99),
				wake.Count(), o.Samples, wake.QuantileMS(0.5), wake.QuantileMS(0.99))
		}
	}
	res.ListenerUp = res.ListenerUp && c.Stats().ListenerUp
	res.LatencyP50MS, res.LatencyP99MS = lat.QuantileMS(0.50), lat.QuantileMS(0.99)
	res.LatencyMaxMS, res.LatencyMeanMS = lat.MaxMS(), lat.MeanMS()
	res.EnqueueP50MS, res.EnqueueP99MS = enq.QuantileMS(0.50), enq.QuantileMS(0.99)
	res.RemoteP50MS, res.RemoteP99MS, res.RemoteMaxMS = remote.QuantileMS(0.50), remote.QuantileMS(0.99), remote.MaxMS()
	res.RemoteEnqueueP50MS, res.RemoteEnqueueP99MS = remoteEnq.QuantileMS(0.50), remoteEnq.QuantileMS(0.99)
	res.WakeUpP50MS, res.WakeUpP99MS, res.WakeUpMaxMS = wake.QuantileMS(0.50), wake.QuantileMS(0.99), wake.MaxMS()
	return res, nil
}
