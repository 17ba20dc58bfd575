package metrics

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock/internal/health"
)

// NewReplicaCollector returns a collector of a streaming replica's state,
// read through replica at scrape time (one query, no table read), for a
// process that sends reads there (`skiplock serve --replica-url` registers
// it beside the main collector, whose figures stay the primary's):
//
//	skiplock_replica_up            1 when the replica answered
//	skiplock_replica_in_recovery   1 while it is a standby (0: it is a primary, e.g. promoted)
//	skiplock_replica_streaming     1 while its WAL receiver runs
//	skiplock_replica_lag_seconds   how far its data is behind the primary (0 when caught up)
//
// schema selects skiplock's installation (default "skiplock" when empty).
func NewReplicaCollector(replica *pgxpool.Pool, schema string) prometheus.Collector {
	if schema == "" {
		schema = "skiplock"
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("skiplock_replica_"+name, help, nil, nil)
	}
	return &replicaCollector{pool: replica, schema: schema,
		up:         d("up", "1 when the replica answered the last scrape."),
		inRecovery: d("in_recovery", "1 while the replica is a standby (0: it is a primary)."),
		streaming:  d("streaming", "1 while the replica's WAL receiver runs."),
		lag:        d("lag_seconds", "How far the replica's data is behind the primary (0 when caught up)."),
	}
}

type replicaCollector struct {
	pool                           *pgxpool.Pool
	schema                         string
	up, inRecovery, streaming, lag *prometheus.Desc
}

func (rc *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{rc.up, rc.inRecovery, rc.streaming, rc.lag} {
		ch <- d
	}
}

func (rc *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	st, err := health.Replica(ctx, rc.pool, rc.schema)
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	if err != nil {
		gauge(rc.up, 0)
		return
	}
	gauge(rc.up, 1)
	gauge(rc.inRecovery, boolFloat(st.InRecovery))
	gauge(rc.streaming, boolFloat(st.Streaming))
	gauge(rc.lag, st.LagSeconds)
}
