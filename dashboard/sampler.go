package dashboard

import (
	"context"
	"errors"
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

// ring is the charts' samples of one database, or of all of them.
type ring struct {
	buf  [ringSize]sample
	next int
	full bool
}

func (r *ring) add(s sample) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % ringSize
	if r.next == 0 {
		r.full = true
	}
}

// sampler reads the workers table and queue lag of every database every
// interval into a ring per database and, over several, one more for their
// sum. Rates come from differencing each worker's cumulative counters
// between its heartbeats, so no query ever counts jobs.
type sampler struct {
	pools  []*pgxpool.Pool
	schema string
	svc    *service.Periodic

	mu    sync.Mutex // guards rings and marks
	rings []ring     // one per pool, then the sum when there are several
	marks []map[string]workerMark
}

func newSampler(pools []*pgxpool.Pool, schema string, every time.Duration, log *slog.Logger) *sampler {
	s := &sampler{pools: pools, schema: schema, marks: make([]map[string]workerMark, len(pools))}
	for i := range s.marks {
		s.marks[i] = map[string]workerMark{}
	}
	s.rings = make([]ring, len(pools))
	if len(pools) > 1 {
		s.rings = make([]ring, len(pools)+1)
	}
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

// all is the index of the summed ring (the only one with one database).
func (s *sampler) all() int { return len(s.rings) - 1 }

// take reads one sample of every database and appends it, and their sum.
// A database that cannot be read gets no sample this time (its ring and
// the sum skip the point); the error is returned after the others.
func (s *sampler) take(ctx context.Context) error {
	var errs []error
	sum := sample{At: time.Now(), ClaimP99MS: math.NaN()}
	for i, pool := range s.pools {
		smp, err := s.takeOne(ctx, i, pool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(s.pools) == 1 {
			break
		}
		sum.Claimed += smp.Claimed
		sum.Completed += smp.Completed
		sum.Failed += smp.Failed
		sum.LiveWorkers += smp.LiveWorkers
		sum.LagSeconds = math.Max(sum.LagSeconds, smp.LagSeconds)
		if !math.IsNaN(smp.ClaimP99MS) && (math.IsNaN(sum.ClaimP99MS) || smp.ClaimP99MS > sum.ClaimP99MS) {
			sum.ClaimP99MS = smp.ClaimP99MS
		}
	}
	if len(s.pools) > 1 && len(errs) < len(s.pools) {
		s.mu.Lock()
		s.rings[s.all()].add(sum)
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// takeOne reads database i's sample and appends it to its ring.
func (s *sampler) takeOne(ctx context.Context, i int, pool *pgxpool.Pool) (sample, error) {
	workers, err := health.Workers(ctx, pool, s.schema)
	if err != nil {
		return sample{}, err
	}
	queues, err := health.QueueStats(ctx, pool, s.schema)
	if err != nil {
		return sample{}, err
	}
	smp := sample{At: time.Now(), ClaimP99MS: math.NaN()}
	for _, q := range queues {
		if !q.Paused && q.OldestReadyAgeSeconds > smp.LagSeconds {
			smp.LagSeconds = q.OldestReadyAgeSeconds
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	marks := s.marks[i]
	seen := make(map[string]bool, len(workers))
	for _, w := range workers {
		seen[w.ID] = true
		prev, ok := marks[w.ID]
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
		marks[w.ID] = cur
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
	for id := range marks {
		if !seen[id] {
			delete(marks, id)
		}
	}
	s.rings[i].add(smp)
	return smp, nil
}

// samples returns ring i (a database's, or all()), oldest first.
func (s *sampler) samples(i int) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &s.rings[i]
	if !r.full {
		return append([]sample(nil), r.buf[:r.next]...)
	}
	out := make([]sample, 0, ringSize)
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// latest returns ring i's newest sample (ok false before the first).
func (s *sampler) latest(i int) (sample, bool) {
	all := s.samples(i)
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

func (s *sampler) series(i int) series {
	all := s.samples(i)
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
