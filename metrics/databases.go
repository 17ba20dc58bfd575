package metrics

import (
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Database is one database of a process that serves several (a
// skiplock.Fleet, `skiplock work` with --database-url repeated), for
// HandlerForDatabases.
type Database struct {
	// Name is the value of the database label: a name for people, such as
	// host:port/dbname or the shard's name; never a URL (it may hold a
	// password).
	Name string
	// Pool reads the database's health views; Schema (default "skiplock")
	// holds its skiplock tables.
	Pool   *pgxpool.Pool
	Schema string
	// Collectors are more collectors of this database (NewClientCollector
	// of its client, NewReplicaCollector of its replica): their metrics
	// get the database label too.
	Collectors []prometheus.Collector
	// ProcessOnly leaves the fleet metrics (NewCollector) out: only
	// Collectors, for a worker process that serves its own metrics
	// (ProcessHandler over several databases).
	ProcessOnly bool
}

// HandlerForDatabases is Handler for a process over several databases: each
// database's skiplock metrics (NewCollector, and its Collectors) carry a
// database label, so every series exists once per database; add them up in
// PromQL (sum without (database) (...)). The Go runtime and process
// collectors, and extra, are registered once, unlabelled.
func HandlerForDatabases(dbs []Database, extra ...prometheus.Collector) http.Handler {
	reg := registryForDatabases(dbs, extra...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
}

// registryForDatabases is what HandlerForDatabases serves.
func registryForDatabases(dbs []Database, extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	reg.MustRegister(extra...)
	for _, d := range dbs {
		schema := d.Schema
		if schema == "" {
			schema = "skiplock"
		}
		r := prometheus.WrapRegistererWith(prometheus.Labels{"database": d.Name}, reg)
		if !d.ProcessOnly {
			r.MustRegister(newCollector(d.Pool, schema, DefaultTimeout, DefaultCacheFor))
		}
		r.MustRegister(d.Collectors...)
	}
	return reg
}
