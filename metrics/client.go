package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock"
)

// NewClientCollector returns a collector of one process's own worker
// counters, read from c.Stats() and c.KindStats() at scrape time (no
// database query):
//
//	skiplock_process_jobs_claimed_total        jobs this process claimed
//	skiplock_process_jobs_handed_off_total     of those, jobs its own Enqueue claimed for its idle pools
//	skiplock_process_jobs_completed_total      jobs it completed
//	skiplock_process_jobs_failed_total         failed attempts (retried or dead-lettered)
//	skiplock_process_jobs_dead_lettered_total  jobs it moved to the dead-letter table (handlers and its reaper)
//	skiplock_process_jobs_lease_lost_total     results discarded because the lease was gone
//	skiplock_process_jobs_running              jobs running in it now
//	skiplock_process_listener_up               1 while its LISTEN connection works
//	skiplock_process_reaps_total               reaper turns it took (the fleet takes about one per interval)
//	skiplock_process_claim_duration_seconds    histogram of its claim statements' latency
//	skiplock_process_job_runs_total            {queue, kind, outcome}: what became of the jobs it ran
//	skiplock_process_job_duration_seconds      {queue, kind}: histogram of its handlers' run time
//
// These move per job and per claim, and only this process's work: register
// it in the registry of each worker process (ProcessHandler; Prometheus adds
// the instance label) and sum over the fleet. Labels carry queues, kinds
// (at most skiplock.MaxKindSeries per process, the rest as
// skiplock.OtherKind) and outcomes, never a job id or payload.
func NewClientCollector(c *skiplock.Client) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("skiplock_"+name, help, labels, nil)
	}
	return &clientCollector{c: c,
		claimed:   d("process_jobs_claimed_total", "Jobs claimed by this process."),
		handedOff: d("process_jobs_handed_off_total", "Of the jobs claimed by this process, those its own Enqueue claimed for one of its idle worker pools (no claim of the pool's)."),
		completed: d("process_jobs_completed_total", "Jobs completed by this process."),
		failed:    d("process_jobs_failed_total", "Failed attempts in this process (retried or dead-lettered)."),
		dead:      d("process_jobs_dead_lettered_total", "Jobs this process moved to the dead-letter table (a handler's final failure, or its reaper)."),
		leaseLost: d("process_jobs_lease_lost_total", "Results this process discarded because the job's lease was gone."),
		running:   d("process_jobs_running", "Jobs running in this process now."),
		listener:  d("process_listener_up", "1 while this process's LISTEN connection works (0 in poll-only mode)."),
		claimDur:  d("process_claim_duration_seconds", "Latency of this process's claim statements."),
		reaps:     d("process_reaps_total", "Reaper turns this process took (each reads the running set for expired leases)."),
		runs: d("process_job_runs_total", "Jobs this process ran, by queue, kind and outcome: completed, retried, snoozed, released, dead_lettered, lease_lost, unwritten.",
			"queue", "kind", "outcome"),
		runDur: d("process_job_duration_seconds", "How long this process's handlers ran, by queue and kind.", "queue", "kind"),
	}
}

type clientCollector struct {
	c                                                      *skiplock.Client
	claimed, handedOff, completed, failed, dead, leaseLost *prometheus.Desc
	running                                                *prometheus.Desc
	listener, claimDur, reaps, runs, runDur                *prometheus.Desc
}

// Describe sends the collector's metric descriptions.
func (cc *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cc.claimed, cc.handedOff, cc.completed, cc.failed, cc.dead, cc.leaseLost,
		cc.running, cc.listener, cc.claimDur, cc.reaps, cc.runs, cc.runDur} {
		ch <- d
	}
}

// Collect reads the client's counters.
func (cc *clientCollector) Collect(ch chan<- prometheus.Metric) {
	s := cc.c.Stats()
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(cc.claimed, s.Claimed)
	counter(cc.handedOff, s.HandedOff)
	counter(cc.completed, s.Completed)
	counter(cc.failed, s.Failed)
	counter(cc.dead, s.DeadLettered)
	counter(cc.leaseLost, s.LeaseLost)
	counter(cc.reaps, s.Reaps)
	ch <- prometheus.MustNewConstMetric(cc.running, prometheus.GaugeValue, float64(s.Running))
	ch <- prometheus.MustNewConstMetric(cc.listener, prometheus.GaugeValue, boolFloat(s.ListenerUp))
	ch <- prometheus.MustNewConstHistogram(cc.claimDur, s.Claims, s.ClaimSum.Seconds(), histogramBuckets(skiplock.ClaimBuckets, s.ClaimCounts))
	for _, k := range cc.c.KindStats() {
		for _, o := range []struct {
			name string
			n    int64
		}{{"completed", k.Completed}, {"retried", k.Retried}, {"snoozed", k.Snoozed}, {"released", k.Released},
			{"dead_lettered", k.DeadLettered}, {"lease_lost", k.LeaseLost}, {"unwritten", k.Unwritten}} {
			if o.n > 0 {
				ch <- prometheus.MustNewConstMetric(cc.runs, prometheus.CounterValue, float64(o.n), k.Queue, k.Kind, o.name)
			}
		}
		ch <- prometheus.MustNewConstHistogram(cc.runDur, k.Runs, k.RunSum.Seconds(),
			histogramBuckets(skiplock.RunBuckets, k.RunCounts), k.Queue, k.Kind)
	}
}

// histogramBuckets pairs cumulative counts with their upper bounds.
func histogramBuckets(bounds []float64, counts []uint64) map[float64]uint64 {
	out := make(map[float64]uint64, len(bounds))
	for i, le := range bounds {
		if i < len(counts) {
			out[le] = counts[i]
		} else {
			out[le] = 0
		}
	}
	return out
}
