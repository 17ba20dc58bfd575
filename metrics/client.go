package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock"
)

// NewClientCollector returns a collector of one process's own worker
// counters, read from c.Stats() at scrape time (no database query):
//
//	skiplock_process_jobs_claimed_total       jobs this process claimed
//	skiplock_process_jobs_completed_total     jobs it completed
//	skiplock_process_jobs_failed_total        failed attempts (retried or dead-lettered)
//	skiplock_process_jobs_dead_lettered_total jobs it moved to the dead-letter table
//	skiplock_process_jobs_lease_lost_total    results discarded because the lease was gone
//	skiplock_process_jobs_running             jobs running in it now
//	skiplock_process_listener_up              1 while its LISTEN connection works
//	skiplock_process_reaps_total              reaper turns it took (the fleet takes about one per interval)
//	skiplock_claim_duration_seconds           histogram of its claim statements' latency
//
// Unlike the counters of NewCollector (summed over every process from the
// workers table at each heartbeat), these move per job and per claim. Register
// it in the registry of each worker process (Prometheus adds the instance
// label). No label carries a job id or payload.
func NewClientCollector(c *skiplock.Client) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc("skiplock_"+name, help, nil, nil) }
	return &clientCollector{c: c,
		claimed:   d("process_jobs_claimed_total", "Jobs claimed by this process."),
		completed: d("process_jobs_completed_total", "Jobs completed by this process."),
		failed:    d("process_jobs_failed_total", "Failed attempts in this process (retried or dead-lettered)."),
		dead:      d("process_jobs_dead_lettered_total", "Jobs this process moved to the dead-letter table."),
		leaseLost: d("process_jobs_lease_lost_total", "Results this process discarded because the job's lease was gone."),
		running:   d("process_jobs_running", "Jobs running in this process now."),
		listener:  d("process_listener_up", "1 while this process's LISTEN connection works (0 in poll-only mode)."),
		claimDur:  d("claim_duration_seconds", "Latency of this process's claim statements."),
		reaps:     d("process_reaps_total", "Reaper turns this process took (each reads the running set for expired leases)."),
	}
}

type clientCollector struct {
	c                                                    *skiplock.Client
	claimed, completed, failed, dead, leaseLost, running *prometheus.Desc
	listener, claimDur, reaps                            *prometheus.Desc
}

func (cc *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cc.claimed, cc.completed, cc.failed, cc.dead, cc.leaseLost,
		cc.running, cc.listener, cc.claimDur, cc.reaps} {
		ch <- d
	}
}

func (cc *clientCollector) Collect(ch chan<- prometheus.Metric) {
	s := cc.c.Stats()
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(cc.claimed, s.Claimed)
	counter(cc.completed, s.Completed)
	counter(cc.failed, s.Failed)
	counter(cc.dead, s.DeadLettered)
	counter(cc.leaseLost, s.LeaseLost)
	counter(cc.reaps, s.Reaps)
	ch <- prometheus.MustNewConstMetric(cc.running, prometheus.GaugeValue, float64(s.Running))
	ch <- prometheus.MustNewConstMetric(cc.listener, prometheus.GaugeValue, boolFloat(s.ListenerUp))
	buckets := make(map[float64]uint64, len(skiplock.ClaimBuckets))
	for i, le := range skiplock.ClaimBuckets {
		if i < len(s.ClaimCounts) {
			buckets[le] = s.ClaimCounts[i]
		} else {
			buckets[le] = 0
		}
	}
	ch <- prometheus.MustNewConstHistogram(cc.claimDur, s.Claims, s.ClaimSum.Seconds(), buckets)
}
