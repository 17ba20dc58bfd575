package metrics

import (
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

// metricsReference is the table this test keeps true.
const metricsReference = "../docs/reference/metrics.md"

// referenceRow is one metric of the reference's table.
type referenceRow struct {
	typ, source string
	labels      []string
}

var (
	// | `name` | type | labels | source | meaning |
	referenceRowRe = regexp.MustCompile("(?m)^\\| `(skiplock_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\| ([a-z]+) \\| [^|]+\\|$")
	backticked     = regexp.MustCompile("`([a-z_]+)`")
	// A descriptor's name and variable labels, as prometheus.Desc.String
	// prints them (the descriptor has no accessors).
	descRe = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)
)

// neverExported are descriptors a collector describes but never sends as a
// metric: collectErr carries a failed read's error to the registry.
var neverExported = map[string]bool{"skiplock_collector_error": true}

// mayBeAbsent are metrics the test database cannot be made to show:
// autovacuum's last run is the server's to decide.
var mayBeAbsent = map[string]bool{"skiplock_last_autovacuum_age_seconds": true}

// TestMetricsReference keeps docs/reference/metrics.md the list of every
// metric skiplock exports. Every collector of this package is registered
// against a test database in which each metric has something to report (a
// worker process that claimed, completed and dead-lettered jobs, a job no
// live worker handles, a concurrency and a rate limit): the table must list
// exactly the metrics the collectors describe, each with the labels they
// declare and the collector it comes from, and the type it is gathered with.
// Nothing else but the Go runtime and process collectors' go_* and process_*
// is served, and over several databases every skiplock metric carries the
// database label.
func TestMetricsReference(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema, PollInterval: 50 * time.Millisecond,
		LeaseDuration: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		Pools: []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 2}}})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(c, "ok", func(ctx context.Context, j *skiplock.Job[struct{}]) error { return nil }))
	require.NoError(t, skiplock.Handle(c, "bad", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		return skiplock.Discard(errors.New("refused"))
	}))
	for _, k := range []string{"ok", "ok", "ok", "bad"} {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: k})
		require.NoError(t, err)
	}
	// No live worker serves this queue: skiplock_unhandled_ready_jobs.
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "orphans", Kind: "nobody"})
	require.NoError(t, err)
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "conc", Queue: "default", Concurrency: 5}))
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "rate", Kind: "ok", Rate: 100, Per: time.Second}))

	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	require.Eventually(t, func() bool {
		if s := c.Stats(); s.Completed != 3 || s.DeadLettered != 1 {
			return false
		}
		ws, err := health.Workers(ctx, db.Pool, db.Schema)
		return err == nil && slices.ContainsFunc(ws, func(w health.Worker) bool { return w.Live && w.ClaimP99MS != nil })
	}, 10*time.Second, 20*time.Millisecond, "the worker never completed its jobs and reported its claim p99")

	// What each collector declares.
	sources := map[string]prometheus.Collector{
		"fleet":   NewCollector(db.Pool, db.Schema),
		"process": NewClientCollector(c),
		"replica": NewReplicaCollector(db.Pool, db.Schema), // the primary answers as a replica that is not in recovery
	}
	described := map[string]referenceRow{}
	for source, col := range sources {
		ch := make(chan *prometheus.Desc, 100)
		col.Describe(ch)
		close(ch)
		for d := range ch {
			m := descRe.FindStringSubmatch(d.String())
			require.NotNil(t, m, "cannot read the name of %s (client_golang changed Desc.String?)", d)
			if neverExported[m[1]] {
				continue
			}
			_, dup := described[m[1]]
			require.False(t, dup, "%s is described twice", m[1])
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			described[m[1]] = referenceRow{source: source, labels: labels}
		}
	}

	// What a process serving them all gathers: the type of each.
	reg := registry(db.Pool, db.Schema, NewClientCollector(c), NewReplicaCollector(db.Pool, db.Schema))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	gathered := map[string]string{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "skiplock_") {
			require.True(t, strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_"),
				"%s is served but is neither skiplock's nor the Go runtime's or process collector's", name)
			continue
		}
		_, ok := described[name]
		require.True(t, ok, "%s is gathered but no collector describes it", name)
		gathered[name] = strings.ToLower(mf.GetType().String())
	}
	for name := range described {
		if !mayBeAbsent[name] {
			require.Contains(t, gathered, name, "the test database shows no %s: give it something to report", name)
		}
	}

	// The table.
	raw, err := os.ReadFile(metricsReference)
	require.NoError(t, err)
	table := map[string]referenceRow{}
	for _, m := range referenceRowRe.FindAllStringSubmatch(string(raw), -1) {
		_, dup := table[m[1]]
		require.False(t, dup, "%s lists %s twice", metricsReference, m[1])
		var labels []string
		for _, l := range backticked.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		table[m[1]] = referenceRow{typ: m[2], labels: labels, source: m[4]}
	}
	var unlisted, gone []string
	for name, d := range described {
		if _, ok := table[name]; !ok {
			unlisted = append(unlisted, name+" ("+d.source+")")
		}
	}
	for name := range table {
		if _, ok := described[name]; !ok {
			gone = append(gone, name)
		}
	}
	sort.Strings(unlisted)
	sort.Strings(gone)
	require.Empty(t, unlisted, "%s does not list these metrics: %v", metricsReference, unlisted)
	require.Empty(t, gone, "%s lists metrics no collector exports: %v", metricsReference, gone)
	for name, row := range table {
		d := described[name]
		require.Equal(t, d.source, row.source, "%s: the source of %s", metricsReference, name)
		require.ElementsMatch(t, d.labels, row.labels, "%s: the labels of %s", metricsReference, name)
		if typ, ok := gathered[name]; ok {
			require.Equal(t, typ, row.typ, "%s: the type of %s", metricsReference, name)
		}
	}

	// Over several databases, every skiplock metric carries the database
	// label; the runtime's do not.
	reg = registryForDatabases([]Database{{Name: "db1", Pool: db.Pool, Schema: db.Schema,
		Collectors: []prometheus.Collector{NewClientCollector(c)}}})
	mfs, err = reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var has bool
			for _, l := range m.GetLabel() {
				has = has || l.GetName() == "database"
			}
			require.Equal(t, strings.HasPrefix(mf.GetName(), "skiplock_"), has, "%s: the database label", mf.GetName())
		}
	}
	require.NoError(t, c.Stop(ctx))
}
