package worker

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/service"
	"github.com/skiplock/skiplock/internal/store"
)

// ProgressInterval is how often a process writes its running jobs'
// progress: at most one row write per job per interval, however often a
// handler reports (issue 39). A run's last report is written with its
// completion instead (Result.Progress).
const ProgressInterval = time.Second

// ProgressSource gives a running job's latest progress report as JSON.
// The buffer asks for it only when it writes (once per ProgressInterval),
// so a handler reporting a million times marshals its report about once a
// second, not a million times.
type ProgressSource interface {
	ProgressJSON() []byte
}

// progressBuffer holds, for each running job with an unwritten progress
// report, where to read its latest report.
type progressBuffer struct {
	mu      sync.Mutex // guards pending
	pending map[int64]pendingProgress
}

type pendingProgress struct {
	lease store.Lease
	src   ProgressSource
}

// put notes that the job of lease has a newer report in src, replacing any
// unwritten one.
func (b *progressBuffer) put(lease store.Lease, src ProgressSource) {
	b.mu.Lock()
	if b.pending == nil {
		b.pending = map[int64]pendingProgress{}
	}
	b.pending[lease.ID] = pendingProgress{lease: lease, src: src}
	b.mu.Unlock()
}

// take returns the unwritten reports, read from their sources now, in id
// order (the order every fenced write locks rows in) and forgets them.
func (b *progressBuffer) take() []store.Progress {
	b.mu.Lock()
	pending := b.pending
	b.pending = nil
	b.mu.Unlock()
	ps := make([]store.Progress, 0, len(pending))
	for _, p := range pending {
		if doc := p.src.ProgressJSON(); doc != nil {
			ps = append(ps, store.Progress{Lease: p.lease, JSON: doc})
		}
	}
	slices.SortFunc(ps, func(a, b store.Progress) int { return cmp.Compare(a.ID, b.ID) })
	return ps
}

// forget drops the unwritten reports of jobs whose outcome was written:
// their last report went with it.
func (b *progressBuffer) forget(jobs []*Job) {
	b.mu.Lock()
	for _, j := range jobs {
		if p, ok := b.pending[j.ID]; ok && p.lease.Token == j.LeaseToken {
			delete(b.pending, j.ID)
		}
	}
	b.mu.Unlock()
}

// SetProgress notes that a running job has a newer progress report in src,
// read and written by the progress loop within ProgressInterval. A report
// for a lease that is gone is refused by the fence.
func (r *Runner) SetProgress(id, token int64, src ProgressSource) {
	r.progress.put(store.Lease{ID: id, Token: token}, src)
}

// progressKey is the context key under which a handler's context carries
// its Runner, for ReportProgress and NoteEndedInTx.
type progressKey struct{}

// ReportProgress notes a newer progress report in src of the job of lease
// (id, token) with the Runner that runs the handler whose context ctx is,
// to be read and written within ProgressInterval; false when ctx is not
// the context of a handler a Runner runs (Drain's: only the last report is
// kept, with the completion).
func ReportProgress(ctx context.Context, id, token int64, src ProgressSource) bool {
	r, _ := ctx.Value(progressKey{}).(*Runner)
	if r == nil {
		return false
	}
	r.SetProgress(id, token, src)
	return true
}

// progressLoop writes the reports buffered since its last turn, one
// statement for all of them, and checks whether waiters listen
// (checkWaiters).
func (r *Runner) progressLoop() *service.Periodic {
	return &service.Periodic{Name: "progress", Interval: ProgressInterval, Jitter: 0.1, Logger: r.log,
		Tick: func(ctx context.Context) error { return r.flushProgress(ctx) }}
}

func (r *Runner) flushProgress(ctx context.Context) error {
	r.checkWaiters(ctx)
	ps := r.progress.take()
	if len(ps) == 0 {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	held, err := r.data.WriteProgress(qctx, ps, r.cfg.WorkerID)
	if err != nil {
		// Progress is advisory: the next report, or the completion, carries
		// a newer one.
		r.log.Debug("skiplock: progress not written", slog.String("error", err.Error()), slog.Int("jobs", len(ps)))
		return nil
	}
	r.progressRows.Add(int64(len(held)))
	return nil
}

// checkWaiters looks, once per progress turn, whether a process waits for
// jobs of this database, which decides whether the completer announces
// the ends it writes. A waiter that starts listening tells the listening
// workers at once (onNotify); the others announce to it within about a
// second, until when it finds its jobs by polling.
func (r *Runner) checkWaiters(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	told := r.waitersTold.Load()
	yes, err := r.data.WaitersListening(qctx)
	if err != nil {
		return // keep the last answer; the next turn asks again
	}
	if !yes && r.waitersTold.Load() != told {
		return // a waiter told it listens while the answer was on its way
	}
	r.announce.Store(yes)
}
