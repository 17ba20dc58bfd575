package dashboard

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/service"
)

// ringSize is how many samples the charts keep: 30 minutes at the default
// 5 s interval.
const ringSize = 360

// sample is one point of the charts.
type sample struct {
	At time.Time
	// Claimed, Completed and Failed are per-second rates summed over the
	// live worker processes.
	Claimed, Completed, Failed float64
	// LagSeconds is the oldest due job's wait over unpaused queues.
	LagSeconds float64
	// ClaimP99MS is the highest claim p99 of the live workers (NaN: no
	// worker has claimed yet).
	ClaimP99MS float64
	// LiveWorkers counts the processes that beat recently.
	LiveWorkers int
}

// workerMark is what the sampler remembers of a worker process to turn its
// cumulative counters into rates.
type workerMark struct {
	beat                       time.Time
	claimed, completed, failed int64
	rate                       [3]float64
}

// sampler reads the workers table and queue lag every interval into a ring.
// Rates come from differencing each worker's cumulative counters between
// its heartbeats, so no query ever counts jobs.
type sampler struct {
	pool   *pgxpool.Pool
	schema string
	svc    *service.Periodic

	mu    sync.Mutex // guards ring, next, full and marks
	ring  [ringSize]sample
	next  int
	full  bool
	marks map[string]workerMark
}

func newSampler(pool *pgxpool.Pool, schema string, every time.Duration, log *slog.Logger) *sampler {
	s := &sampler{pool: pool, schema: schema, marks: map[string]workerMark{}}
	s.svc = &service.Periodic{Name: "dashboard sampler", Interval: every, Logger: log, RunAtStart: true,
		Tick: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, max(every, 5*time.Second))
			defer cancel()
			return s.take(ctx)
		}}
	return s
}

func (s *sampler) start() { _ = s.svc.Start(context.Background()) }

func (s *sampler) stop() { _ = s.svc.Stop(context.Background()) }

// take reads one sample and appends it.
func (s *sampler) take(ctx context.Context) error {
	workers, err := health.Workers(ctx, s.pool, s.schema)
	if err != nil {
		return err
	}
	queues, err := health.QueueStats(ctx, s.pool, s.schema)
	if err != nil {
		return err
	}
	smp := sample{At: time.Now(), ClaimP99MS: math.NaN()}
	for _, q := range queues {
		if !q.Paused && q.OldestReadyAgeSeconds > smp.LagSeconds {
			smp.LagSeconds = q.OldestReadyAgeSeconds
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(workers))
	for _, w := range workers {
		seen[w.ID] = true
		prev, ok := s.marks[w.ID]
		cur := workerMark{beat: w.HeartbeatAt, claimed: w.Claimed, completed: w.Completed, failed: w.Failed}
		switch {
		case !ok:
			// First sight: no rate until its next beat.
		case w.HeartbeatAt.After(prev.beat):
			dt := w.HeartbeatAt.Sub(prev.beat).Seconds()
			cur.rate = [3]float64{
				math.Max(0, float64(w.Claimed-prev.claimed)) / dt,
				math.Max(0, float64(w.Completed-prev.completed)) / dt,
				math.Max(0, float64(w.Failed-prev.failed)) / dt,
			}
		default:
			cur.rate = prev.rate // no new beat: the last rate stands
		}
		s.marks[w.ID] = cur
		if !w.Live {
			continue
		}
		smp.LiveWorkers++
		smp.Claimed += cur.rate[0]
		smp.Completed += cur.rate[1]
		smp.Failed += cur.rate[2]
		if w.ClaimP99MS != nil && (math.IsNaN(smp.ClaimP99MS) || *w.ClaimP99MS > smp.ClaimP99MS) {
			smp.ClaimP99MS = *w.ClaimP99MS
		}
	}
	for id := range s.marks {
		if !seen[id] {
			delete(s.marks, id)
		}
	}
	s.ring[s.next] = smp
	s.next = (s.next + 1) % ringSize
	if s.next == 0 {
		s.full = true
	}
	return nil
}

// samples returns the ring, oldest first.
func (s *sampler) samples() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		return append([]sample(nil), s.ring[:s.next]...)
	}
	out := make([]sample, 0, ringSize)
	out = append(out, s.ring[s.next:]...)
	return append(out, s.ring[:s.next]...)
}

// latest returns the newest sample (ok false before the first).
func (s *sampler) latest() (sample, bool) {
	all := s.samples()
	if len(all) == 0 {
		return sample{}, false
	}
	return all[len(all)-1], true
}

// series is the charts' JSON: uPlot's columnar data (times in Unix seconds;
// null where a value is unknown).
type series struct {
	T         []int64    `json:"t"`
	Claimed   []float64  `json:"claimed"`
	Completed []float64  `json:"completed"`
	Failed    []float64  `json:"failed"`
	Lag       []float64  `json:"lag"`
	ClaimP99  []*float64 `json:"claim_p99_ms"`
}

func (s *sampler) series() series {
	all := s.samples()
	out := series{
		T: make([]int64, len(all)), Claimed: make([]float64, len(all)), Completed: make([]float64, len(all)),
		Failed: make([]float64, len(all)), Lag: make([]float64, len(all)), ClaimP99: make([]*float64, len(all)),
	}
	for i, x := range all {
		out.T[i] = x.At.Unix()
		out.Claimed[i] = round2(x.Claimed)
		out.Completed[i] = round2(x.Completed)
		out.Failed[i] = round2(x.Failed)
		out.Lag[i] = round2(x.LagSeconds)
		if !math.IsNaN(x.ClaimP99MS) {
			v := round2(x.ClaimP99MS)
			out.ClaimP99[i] = &v
		}
	}
	return out
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
