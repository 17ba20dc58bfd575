package dashboard

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
)

// keptReplays is how many finished replays the dead-letter page lists.
const keptReplays = 10

// replayRun is one dead-letter group being replayed in the background at the
// dashboard's rate.
type replayRun struct {
	DB              string // the database's name ("" with one database)
	Kind, Signature string
	Total           int64 // matching dead letters when it started
	Started         time.Time
	done            atomic.Int64
	finished        chan struct{}
	err             atomic.Value // string
}

// Done is how many jobs it has re-enqueued so far.
func (r *replayRun) Done() int64 { return r.done.Load() }

// Running reports whether it is still going.
func (r *replayRun) Running() bool {
	select {
	case <-r.finished:
		return false
	default:
		return true
	}
}

// Err is the error it stopped on ("" if none).
func (r *replayRun) Err() string {
	s, _ := r.err.Load().(string)
	return s
}

// replays runs dead-letter replays in the background, one per group at a
// time, and cancels them on Close.
type replays struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex // guards list
	list []*replayRun
}

func newReplays() *replays {
	ctx, cancel := context.WithCancel(context.Background())
	return &replays{ctx: ctx, cancel: cancel}
}

// start replays the group (kind, signature) of database db (its name; c is
// a client over its primary) at rate jobs per second and reports true,
// unless a replay of that group of that database is already running (or
// the dashboard is closed).
func (rs *replays) start(db string, c *skiplock.Client, f skiplock.DeadLetterFilter, total int64, rate float64,
	log *slog.Logger) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, r := range rs.list {
		if r.DB == db && r.Kind == f.Kind && r.Signature == f.Signature && r.Running() {
			return false
		}
	}
	if rs.ctx.Err() != nil {
		return false
	}
	run := &replayRun{DB: db, Kind: f.Kind, Signature: f.Signature, Total: total, Started: time.Now(), finished: make(chan struct{})}
	rs.list = append([]*replayRun{run}, rs.list...)
	// Keep every running replay and the newest finished ones.
	kept, finished := rs.list[:0], 0
	for _, r := range rs.list {
		if r.Running() || finished < keptReplays {
			if !r.Running() {
				finished++
			}
			kept = append(kept, r)
		}
	}
	rs.list = kept
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		defer close(run.finished)
		n, err := c.DeadLetterReplay(rs.ctx, f, skiplock.DeadLetterReplayOptions{PerSecond: rate,
			Progress: func(done int) { run.done.Store(int64(done)) }})
		run.done.Store(int64(n))
		if err != nil {
			run.err.Store(err.Error())
		}
		attrs := []any{slog.String("kind", f.Kind), slog.String("signature", f.Signature), slog.Int("replayed", n)}
		if db != "" {
			attrs = append([]any{slog.String("database", db)}, attrs...)
		}
		if err != nil {
			log.Warn("dashboard: replay stopped", append(attrs, slog.String("error", err.Error()))...)
			return
		}
		log.Info("dashboard: replay finished", attrs...)
	}()
	return true
}

// recent returns the running and recently finished replays, newest first.
func (rs *replays) recent() []*replayRun {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]*replayRun(nil), rs.list...)
}

// replayStatus is a replay as it stood at one instant: what a page shows.
type replayStatus struct {
	Kind, Signature string
	Total, Done     int64
	Started         time.Time
	Running         bool
	Err             string
}

// status returns database db's recent replays as they stand now. A page takes it
// before it reads the dead letters, so a replay it shows as done finished
// before that read: the page never says done beside a group the replay has
// since emptied. (Reading the live runs while rendering, after the query,
// could.)
func (rs *replays) status(db string) []replayStatus {
	var out []replayStatus
	for _, r := range rs.recent() {
		if r.DB != db {
			continue
		}
		// Running first: once it reads false, Done and Err are final.
		running := r.Running()
		out = append(out, replayStatus{Kind: r.Kind, Signature: r.Signature, Total: r.Total, Done: r.Done(),
			Started: r.Started, Running: running, Err: r.Err()})
	}
	return out
}

// stop cancels every replay and waits for them. It cancels under mu, so a
// start either added its run to wg before (and is waited for) or sees the
// cancelled context and starts nothing.
func (rs *replays) stop() {
	rs.mu.Lock()
	rs.cancel()
	rs.mu.Unlock()
	rs.wg.Wait()
}
