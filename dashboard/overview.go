package dashboard

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/health"
)

// status colours a panel: ok (green), warn (amber), fail (red).
type status string

const (
	statusOK   status = "ok"
	statusWarn status = "warn"
	statusFail status = "fail"
)

func worst(ss ...status) status {
	out := statusOK
	for _, s := range ss {
		if s == statusFail {
			return statusFail
		}
		if s == statusWarn {
			out = statusWarn
		}
	}
	return out
}

// Panel thresholds (docs/dashboard.md explains each). The lag, dead-letter
// and vacuum thresholds are the doctor's defaults, so the overview and
// `skiplock doctor` agree.
const (
	lagWarn           = 60.0  // seconds: half the SLO
	lagFail           = 120.0 // seconds: the SLO
	claimP99Warn      = 10.0  // ms: a few milliseconds is normal
	claimP99Fail      = 50.0  // ms: the vacuum-debt spiral has started
	deadWarn          = 10    // new dead letters in 24 h
	deadFail          = 100   // new dead letters in 24 h, and more than the day before
	deadTuplesWarn    = 1000  // over the autovacuum threshold and not vacuumed for 3 m
	deadTuplesFail    = 10000 // over the threshold and not vacuumed for 10 m
	xminWarn          = 120.0 // seconds a transaction holds the xmin horizon
	xminFail          = 600.0
	xminListAfter     = 5.0         // seconds before a transaction is listed as a holder
	stalledCompletion = time.Minute // running jobs and no completion for this long
)

// queueRow is one queue on the lag panel and the queues page.
type queueRow struct {
	health.QueueStat
	WaitP50, WaitP99 float64
	// Pools are the distinct queue sets of the live workers serving the
	// queue, e.g. "default" or "bulk,reports".
	Pools   []string
	Workers int
	Status  status
}

type dayCount struct {
	Day   time.Time
	Count int64
	Width int // bar width in percent of the busiest day
}

// overviewData is the five panels.
type overviewData struct {
	Now time.Time

	Queues    []queueRow
	LagStatus status
	MaxLag    float64

	HaveSample                        bool
	ClaimRate, CompleteRate, FailRate float64
	ClaimP99                          *float64
	ClaimStatus                       status
	LiveWorkers                       int
	Running                           int64
	Runners                           []runnerRow
	ExpiredLeases                     int
	RunningStatus                     status
	RunningNote                       string
	Dead                              health.DeadLetterSize
	DeadDays                          []dayCount
	DeadStatus                        status
	Vacuum                            health.VacuumState
	Holders                           []health.HorizonHolder
	// PinHolder is the oldest transaction holding the horizon (any
	// database: an xid anywhere on the server is in every snapshot), and
	// PinCost what it costs the claim, read once it has held for
	// xminListAfter.
	PinHolder                           *health.HorizonHolder
	PinCost                             *health.ClaimCost
	VacuumStatus                        status
	DeadTuplesStatus, XminStatus        status
	LastVacuum                          *time.Time
	HOTShare                            float64
	QueueErr, ClaimErr, RunErr, DeadErr string
	VacuumErr                           string
	ReadyTotal, ScheduledTotal          int64
	// Unhandled are due jobs whose kind no live worker handles (a warning
	// under the queue-lag panel); UnhandledErr says why it is missing.
	Unhandled    []health.UnhandledKind
	UnhandledErr string
	// Databases is the per-database breakdown of a dashboard over several
	// (nil for one database's panels); VacuumDB names the database whose
	// vacuum state the vacuum panel shows (the worst one).
	Databases []dbSummary
	VacuumDB  string
}

// runnerRow is a long runner on the running panel, with the link prefix
// of its database's pages (job ids are per database) and, over several
// databases, its database's name.
type runnerRow struct {
	health.LongRunner
	Base, DB string
}

// loadOverview reads database sh's five panels.
func (d *Dashboard) loadOverview(ctx context.Context, sh *shard) overviewData {
	ctx, cancel := context.WithTimeout(ctx, d.opts.QueryTimeout)
	defer cancel()
	o := overviewData{Now: time.Now()}
	broken := func(what string, err error) string {
		d.logFor(sh).Error("dashboard: overview: "+what, slog.String("error", err.Error()))
		return what + " unavailable (see the server log)"
	}

	// 1. Queue lag per queue, with the pools (worker queue sets) serving it.
	workers, werr := health.Workers(ctx, sh.read, d.opts.Schema)
	qs, err := d.queueRows(ctx, sh, workers)
	if err != nil {
		o.QueueErr = broken("queue stats", err)
		o.LagStatus = statusFail
	} else {
		o.Queues = qs
		for _, q := range qs {
			o.LagStatus = worst(o.LagStatus, q.Status)
			o.ReadyTotal += q.Ready
			o.ScheduledTotal += q.Scheduled
			o.Running += q.Running
			if !q.Paused && q.OldestReadyAgeSeconds > o.MaxLag {
				o.MaxLag = q.OldestReadyAgeSeconds
			}
		}
		if o.LagStatus == "" {
			o.LagStatus = statusOK
		}
	}

	// Kinds no live worker handles wait forever: name them under the lag.
	if u, err := health.UnhandledKinds(ctx, sh.read, d.opts.Schema); err != nil {
		o.UnhandledErr = broken("unhandled kinds", err)
	} else {
		o.Unhandled = u
		if len(u) > 0 {
			o.LagStatus = worst(o.LagStatus, statusWarn)
		}
	}

	// 2. Claim rate and claim p99, from the sampler's latest point.
	if werr != nil {
		o.ClaimErr = broken("workers", werr)
		o.ClaimStatus = statusFail
	} else {
		for _, w := range workers {
			if !w.Live {
				continue
			}
			o.LiveWorkers++
			if w.ClaimP99MS != nil && (o.ClaimP99 == nil || *w.ClaimP99MS > *o.ClaimP99) {
				v := *w.ClaimP99MS
				o.ClaimP99 = &v
			}
		}
		o.ClaimStatus = statusOK
		if o.ClaimP99 != nil {
			switch {
			case *o.ClaimP99 >= claimP99Fail:
				o.ClaimStatus = statusFail
			case *o.ClaimP99 >= claimP99Warn:
				o.ClaimStatus = statusWarn
			}
		}
	}
	if s, ok := d.sampler.latest(sh.idx); ok {
		o.HaveSample = true
		o.ClaimRate, o.CompleteRate, o.FailRate = s.Claimed, s.Completed, s.Failed
	}

	// 3. Running jobs: the longest runners and leases the reaper has yet to
	// return.
	runners, err := health.LongRunners(ctx, sh.read, d.opts.Schema, 200)
	if err != nil {
		o.RunErr = broken("running jobs", err)
		o.RunningStatus = statusFail
	} else {
		for _, r := range runners {
			if r.LeaseExpired {
				o.ExpiredLeases++
			}
		}
		for _, r := range runners[:min(len(runners), 5)] {
			o.Runners = append(o.Runners, runnerRow{LongRunner: r, Base: d.opts.Prefix + d.scopePath(sh)})
		}
		o.RunningStatus = statusOK
		switch {
		case o.ExpiredLeases > 0:
			o.RunningStatus = statusFail
			o.RunningNote = "leases expired and not returned: is any worker (and so the reaper) running?"
		case o.Running > 0 && d.completionsStalled(sh.idx):
			o.RunningStatus = statusWarn
			o.RunningNote = "jobs are running but none completed in the last minute: a stuck handler or a downstream outage?"
		}
	}

	// 4. Dead-letter size and daily delta.
	size, err := health.DeadLetterSizeOf(ctx, sh.read, d.opts.Schema)
	if err == nil {
		var days []health.DeadDay
		days, err = health.DeadLetterDaily(ctx, sh.read, d.opts.Schema, 7)
		o.DeadDays = perDay(days, o.Now, 7)
	}
	if err != nil {
		o.DeadErr = broken("dead letters", err)
		o.DeadStatus = statusFail
	} else {
		o.Dead = size
		o.DeadStatus = statusOK
		switch {
		case size.Last24h >= deadFail && size.Last24h > size.Prev24h:
			o.DeadStatus = statusFail
		case size.Last24h >= deadWarn:
			o.DeadStatus = statusWarn
		}
	}

	// 5. Vacuum state of the hot table and the xmin horizon holders.
	v, err := health.Vacuum(ctx, sh.pool, d.opts.Schema)
	if err == nil {
		var holders []health.HorizonHolder
		holders, err = health.HorizonHolders(ctx, sh.pool, d.opts.Schema, 10)
		for i, h := range holders {
			// Short statements come and go; list what actually pins the
			// horizon (slots and prepared transactions always).
			if (h.XactAgeSeconds >= xminListAfter || h.Holder != "backend") && len(o.Holders) < 3 {
				o.Holders = append(o.Holders, h)
			}
			if h.Holder != "replication_slot" && h.XactAgeSeconds >= xminListAfter &&
				(o.PinHolder == nil || h.XactAgeSeconds > o.PinHolder.XactAgeSeconds) {
				o.PinHolder = &holders[i]
			}
		}
		if err == nil && o.PinHolder != nil {
			if cost, cerr := health.ClaimCostNow(ctx, sh.pool, d.opts.Schema); cerr == nil {
				o.PinCost = &cost
			}
			v.OldestXminAgeSeconds = max(v.OldestXminAgeSeconds, o.PinHolder.XactAgeSeconds)
		}
	}
	if err != nil {
		o.VacuumErr = broken("vacuum state", err)
		o.VacuumStatus = statusFail
	} else {
		o.Vacuum = v
		o.LastVacuum = v.LastAutovacuum
		if v.LastVacuum != nil && (o.LastVacuum == nil || v.LastVacuum.After(*o.LastVacuum)) {
			o.LastVacuum = v.LastVacuum
		}
		if v.Updates > 0 {
			o.HOTShare = float64(v.HOTUpdates) / float64(v.Updates)
		}
		o.DeadTuplesStatus, o.XminStatus = vacuumStatus(v, o.LastVacuum)
		o.VacuumStatus = worst(o.DeadTuplesStatus, o.XminStatus)
	}
	return o
}

// vacuumStatus mirrors the doctor's dead_tuples and xmin_horizon checks.
func vacuumStatus(v health.VacuumState, last *time.Time) (deadTuples, xmin status) {
	since := time.Duration(math.MaxInt64)
	if last != nil {
		since = time.Since(*last)
	}
	over := float64(v.DeadTuples) > v.AutovacuumThreshold
	deadTuples = statusOK
	switch {
	case over && v.DeadTuples >= deadTuplesFail && since > 10*time.Minute:
		deadTuples = statusFail
	case over && v.DeadTuples >= deadTuplesWarn && since > 3*time.Minute:
		deadTuples = statusWarn
	}
	xmin = statusOK
	switch {
	case v.OldestXminAgeSeconds > xminFail:
		xmin = statusFail
	case v.OldestXminAgeSeconds > xminWarn:
		xmin = statusWarn
	}
	return deadTuples, xmin
}

// completionsStalled reports a minute of samples of ring i with live
// workers and no completions.
func (d *Dashboard) completionsStalled(i int) bool {
	all := d.sampler.samples(i)
	if len(all) < 2 {
		return false
	}
	newest := all[len(all)-1].At
	if newest.Sub(all[0].At) < stalledCompletion {
		return false
	}
	for i := len(all) - 1; i >= 0 && newest.Sub(all[i].At) <= stalledCompletion; i-- {
		if all[i].Completed > 0 || all[i].Failed > 0 || all[i].LiveWorkers == 0 {
			return false
		}
	}
	return true
}

// queueRows joins queue stats, wait percentiles and the live workers'
// queue sets.
func (d *Dashboard) queueRows(ctx context.Context, sh *shard, workers []health.Worker) ([]queueRow, error) {
	stats, err := health.QueueStats(ctx, sh.read, d.opts.Schema)
	if err != nil {
		return nil, err
	}
	waits, err := health.WaitP99(ctx, sh.read, d.opts.Schema)
	if err != nil {
		return nil, err
	}
	wait := map[string]health.QueueWait{}
	for _, w := range waits {
		wait[w.Queue] = w
	}
	pools := map[string]map[string]bool{}
	count := map[string]int{}
	for _, w := range workers {
		if !w.Live {
			continue
		}
		qs := append([]string(nil), w.Queues...)
		sort.Strings(qs)
		label := strings.Join(qs, ",")
		for _, q := range w.Queues {
			if pools[q] == nil {
				pools[q] = map[string]bool{}
			}
			pools[q][label] = true
			count[q]++
		}
	}
	out := make([]queueRow, 0, len(stats))
	for _, s := range stats {
		row := queueRow{QueueStat: s, WaitP50: wait[s.Queue].WaitP50Seconds, WaitP99: wait[s.Queue].WaitP99Seconds,
			Workers: count[s.Queue], Status: statusOK}
		for p := range pools[s.Queue] {
			row.Pools = append(row.Pools, p)
		}
		sort.Strings(row.Pools)
		if !s.Paused {
			switch {
			case s.OldestReadyAgeSeconds > lagFail:
				row.Status = statusFail
			case s.OldestReadyAgeSeconds > lagWarn:
				row.Status = statusWarn
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// perDay sums dead letters per UTC day over the last n days, oldest first.
func perDay(days []health.DeadDay, now time.Time, n int) []dayCount {
	byDay := map[time.Time]int64{}
	for _, x := range days {
		byDay[x.Day] += x.Count
	}
	today := time.Date(now.UTC().Year(), now.UTC().Month(), now.UTC().Day(), 0, 0, 0, 0, time.UTC)
	out := make([]dayCount, n)
	var top int64
	for i := range n {
		day := today.AddDate(0, 0, i-n+1)
		out[i] = dayCount{Day: day, Count: byDay[day]}
		top = max(top, byDay[day])
	}
	for i := range out {
		if top > 0 {
			out[i].Width = int(math.Round(100 * float64(out[i].Count) / float64(top)))
		}
	}
	return out
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, http.StatusOK, "overview", "", d.view("overview", "Overview", d.loadScoped(r)))
}

// overviewPanels is the fragment htmx polls.
func (d *Dashboard) overviewPanels(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, http.StatusOK, "overview", "panels", d.view("overview", "Overview", d.loadScoped(r)))
}

// loadScoped reads the panels of the request's database, or of every
// database added up when it has none.
func (d *Dashboard) loadScoped(r *http.Request) overviewData {
	if sh := d.scoped(r); sh != nil {
		return d.overviewFor(r.Context(), sh)
	}
	return d.loadAll(r.Context())
}

// series serves the charts' data: the request's database's, or every
// database's summed.
func (d *Dashboard) series(w http.ResponseWriter, r *http.Request) {
	i := d.sampler.all()
	if sh := d.scoped(r); sh != nil {
		i = sh.idx
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d.sampler.series(i))
}
