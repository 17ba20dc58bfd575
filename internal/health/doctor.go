package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/migrations"
	"github.com/skiplock/skiplock/internal/store"
)

// Check statuses.
const (
	StatusOK   = "ok"
	StatusWarn = "warn"
	StatusFail = "fail"
)

// Check is the outcome of one doctor check: what was looked at, how it
// stands, the figure that says so and what to do about it.
type Check struct {
	// Name identifies the check: schema, queue_lag, dead_tuples,
	// table_settings, claim_index, xmin_horizon, notify_queue, stuck_jobs,
	// workers, unhandled_kinds, orphan_schedules, dead_letters, limits, and replica_lag when
	// DoctorOptions.Replica is set.
	Name string `json:"name"`
	// Status is StatusOK, StatusWarn or StatusFail.
	Status string `json:"status"`
	// Figure is the measurement behind the status, in words.
	Figure string `json:"figure"`
	// Fix is what to do when the status is not ok (empty when ok).
	Fix string `json:"fix,omitempty"`
	// Pin, on xmin_horizon when it is not ok, names the oldest holder of
	// the horizon and what it costs (the claim's p99 against its baseline).
	Pin *Pin `json:"pin,omitempty"`
}

// DoctorOptions are the doctor's thresholds; the zero value of each field
// means its default.
type DoctorOptions struct {
	// LagWarn and LagFail bound the oldest due job's wait in any unpaused
	// queue. Default 1m and 2m (the SLO).
	LagWarn, LagFail time.Duration
	// XactWarn and XactFail bound the age of the oldest transaction holding
	// back the xmin horizon. Default 2m and 10m.
	XactWarn, XactFail time.Duration
	// StuckAfter is how long a running job's lease may have expired before
	// it counts as stuck (the reaper returns expired leases within seconds
	// while any worker runs). Default 5m.
	StuckAfter time.Duration
	// DeadWarn is how many new dead letters in 24 hours warn; DeadFail how
	// many, when more than the 24 hours before, fail. Default 10 and 100.
	DeadWarn, DeadFail int64
	// NotifyWarn and NotifyFail bound pg_notification_queue_usage().
	// Default 0.1 and 0.5.
	NotifyWarn, NotifyFail float64
	// StatementTimeout bounds each query. Default 10s.
	StatementTimeout time.Duration
	// Replica, when set, is a connection to a streaming replica (hot
	// standby) of the database: the checks that read replicated table
	// contents (queue_lag, stuck_jobs, workers, unhandled_kinds, orphan_schedules,
	// dead_letters) run there, their figures say how far behind it is, and
	// a replica_lag check is added. The checks of what only the primary
	// knows stay on db: its statistics (dead tuples, autovacuum), its
	// sessions (xmin horizon), its NOTIFY queue, its settings and the
	// claim's plan.
	Replica DBTX
	// ReplicaLagWarn and ReplicaLagFail bound the replica's lag. Default 30s
	// and 5m.
	ReplicaLagWarn, ReplicaLagFail time.Duration
}

func (o DoctorOptions) withDefaults() DoctorOptions {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.LagWarn, time.Minute)
	def(&o.LagFail, 2*time.Minute)
	def(&o.XactWarn, 2*time.Minute)
	def(&o.XactFail, 10*time.Minute)
	def(&o.StuckAfter, 5*time.Minute)
	def(&o.StatementTimeout, 10*time.Second)
	def(&o.ReplicaLagWarn, 30*time.Second)
	def(&o.ReplicaLagFail, 5*time.Minute)
	if o.DeadWarn <= 0 {
		o.DeadWarn = 10
	}
	if o.DeadFail <= 0 {
		o.DeadFail = 100
	}
	if o.NotifyWarn <= 0 {
		o.NotifyWarn = 0.1
	}
	if o.NotifyFail <= 0 {
		o.NotifyFail = 0.5
	}
	return o
}

// Expected per-table settings of the hot table (PRODUCT §1, migration 001).
var wantReloptions = []struct{ name, value, why string }{
	{"fillfactor", "80", "room on each page keeps updates HOT"},
	{"autovacuum_vacuum_scale_factor", "0.02", "vacuum the high-churn table early"},
	{"autovacuum_vacuum_cost_delay", "0", "never throttle its vacuum"},
}

// Doctor runs the vacuum-debt runbook as checks with the default thresholds:
// schema version, queue lag, dead tuples and autovacuum lag on the hot table,
// its per-table settings, the claim's partial index (present and used by the
// real claim plan), transactions pinning the xmin horizon, NOTIFY queue
// usage, stuck running jobs, live workers, due jobs whose kind no live
// worker handles, schedules that fire into such a kind, and dead-letter growth. It only
// reads (the claim is EXPLAINed, not run, in a transaction it rolls back).
// A check that cannot run reports StatusFail with the error as its figure;
// the error return is for a database that cannot be queried at all.
func Doctor(ctx context.Context, db DBTX, schema string) ([]Check, error) {
	return DoctorWith(ctx, db, schema, DoctorOptions{})
}

// DoctorWith is Doctor with explicit thresholds.
func DoctorWith(ctx context.Context, db DBTX, schema string, o DoctorOptions) ([]Check, error) {
	if _, err := queries(schema); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	d := &doctor{db: db, read: db, schema: schema, o: o}
	var replica *ReplicaStatus
	if o.Replica != nil {
		d.read = o.Replica
		qctx, cancel := d.timeout(ctx)
		st, err := Replica(qctx, o.Replica, schema)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("health: doctor: replica: %w", err)
		}
		replica = &st
	}

	first, ok, err := d.checkSchema(ctx)
	if err != nil {
		return nil, err
	}
	checks := []Check{first}
	if !ok {
		return checks, nil
	}
	onReplica := map[string]bool{"queue_lag": true, "stuck_jobs": true, "workers": true, "unhandled_kinds": true, "orphan_schedules": true,
		"dead_letters": true, "limits": true}
	for _, f := range []func(context.Context) Check{
		d.checkQueueLag, d.checkDeadTuples, d.checkTableSettings, d.checkClaimIndex, d.checkFencedWrites, d.checkXmin,
		d.checkNotify, d.checkStuck, d.checkWorkers, d.checkUnhandledKinds, d.checkOrphanSchedules, d.checkDeadLetters, d.checkLimits,
	} {
		if err := ctx.Err(); err != nil {
			return checks, err
		}
		c := f(ctx)
		if replica != nil && onReplica[c.Name] {
			c.Figure += " (" + replica.Describe() + ")"
		}
		checks = append(checks, c)
	}
	if replica != nil {
		checks = append(checks, d.checkReplicaLag(*replica))
	}
	return checks, nil
}

// checkReplicaLag judges the replica the read checks ran on.
func (d *doctor) checkReplicaLag(s ReplicaStatus) Check {
	c := Check{Name: "replica_lag", Status: StatusOK, Figure: s.Describe()}
	lag := secs(s.LagSeconds)
	switch {
	case !s.InRecovery:
		c.Status = StatusWarn
		c.Fix = "the replica URL reaches a primary: after a failover the old standby is the primary, so point --replica-url at the new standby " +
			"(or at a read-only service name your HA manager keeps on a standby)"
	case !s.Streaming || lag > d.o.ReplicaLagFail:
		c.Status = StatusFail
	case lag > d.o.ReplicaLagWarn:
		c.Status = StatusWarn
	}
	if c.Status != StatusOK && c.Fix == "" {
		c.Fix = "the figures read on the replica are this stale. Check the standby's log and pg_stat_replication on the primary " +
			"(a broken connection, a missing WAL segment, a long query on the standby delaying replay: see max_standby_streaming_delay); " +
			"until it catches up, run these commands without --replica-url"
	}
	return c
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Status == StatusFail {
			return true
		}
	}
	return false
}

type doctor struct {
	db     DBTX
	read   DBTX // the replica when DoctorOptions.Replica is set, else db
	schema string
	o      DoctorOptions
	stats  []QueueStat // read by queue_lag, reused by claim_index and workers
}

func (d *doctor) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.o.StatementTimeout)
}

func (d *doctor) table() string { return pgx.Identifier{d.schema, "jobs"}.Sanitize() }

// keyedTable is the partition of jobs that vacuum keeps (migration 016),
// whose storage options matter.
func (d *doctor) keyedTable() string { return pgx.Identifier{d.schema, "jobs_keyed"}.Sanitize() }

func broken(name string, err error) Check {
	return Check{Name: name, Status: StatusFail, Figure: "could not check: " + err.Error(),
		Fix: "make sure the role can read pg_stat_activity and the skiplock schema (grant pg_read_all_stats), then run the doctor again"}
}

func (d *doctor) checkSchema(ctx context.Context) (Check, bool, error) {
	c := Check{Name: "schema"}
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	st, err := migrations.StatusOf(qctx, d.db, d.schema)
	if err != nil {
		return c, false, fmt.Errorf("health: doctor: schema: %w", err)
	}
	applied, pending, latest := 0, 0, 0
	for _, s := range st {
		if s.AppliedAt != nil {
			applied = max(applied, s.Version)
		} else {
			pending++
		}
		latest = max(latest, s.Version)
	}
	fix := fmt.Sprintf("skiplock migrate up --schema %s", d.schema)
	switch {
	case applied == 0:
		c.Status, c.Figure, c.Fix = StatusFail, fmt.Sprintf("schema %s is not migrated", d.schema), fix
		return c, false, nil
	case applied < 2:
		c.Status, c.Figure, c.Fix = StatusFail,
			fmt.Sprintf("schema %s is at version %d; the health views arrive with version 2 (latest %d)", d.schema, applied, latest), fix
		return c, false, nil
	case pending > 0:
		c.Status, c.Figure, c.Fix = StatusFail, fmt.Sprintf("%d migration(s) pending (at %d, latest %d)", pending, applied, latest), fix
	default:
		c.Status, c.Figure = StatusOK, fmt.Sprintf("schema %s at version %d (latest)", d.schema, applied)
	}
	return c, true, nil
}

func (d *doctor) checkQueueLag(ctx context.Context) Check {
	const name = "queue_lag"
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	stats, err := QueueStats(qctx, d.read, d.schema)
	if err != nil {
		return broken(name, err)
	}
	d.stats = stats
	var worst *QueueStat
	var ready int64
	for i := range stats {
		s := &stats[i]
		if s.Paused {
			continue
		}
		ready += s.Ready
		if worst == nil || s.OldestReadyAgeSeconds > worst.OldestReadyAgeSeconds {
			worst = s
		}
	}
	c := Check{Name: name, Status: StatusOK}
	if worst == nil || worst.Ready == 0 {
		c.Figure = "no job is waiting in any unpaused queue"
		return c
	}
	lag := secs(worst.OldestReadyAgeSeconds)
	c.Figure = fmt.Sprintf("oldest due job has waited %s in queue %s (SLO %s); %d due in all unpaused queues",
		dur(lag), worst.Queue, dur(d.o.LagFail), ready)
	switch {
	case lag > d.o.LagFail:
		c.Status = StatusFail
	case lag > d.o.LagWarn:
		c.Status = StatusWarn
	}
	if c.Status != StatusOK {
		c.Fix = "if unhandled_kinds names kinds, those jobs wait for a handler no worker has. " +
			"If claim p99 is climbing too, this is vacuum debt: see dead_tuples and xmin_horizon, and do not scale the box or add an index. " +
			"Otherwise workers are too few for the load or one kind crowds the others out: run more workers, or give that kind its own pool " +
			"(skiplock work --queue Q --kinds a,b) or a --tenant-cap. Watch it with `skiplock top`."
	}
	return c
}

func (d *doctor) checkDeadTuples(ctx context.Context) Check {
	const name = "dead_tuples"
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	v, err := Vacuum(qctx, d.db, d.schema)
	if err != nil {
		return broken(name, err)
	}
	var last *time.Time
	for _, t := range []*time.Time{v.LastAutovacuum, v.LastVacuum} {
		if t != nil && (last == nil || t.After(*last)) {
			last = t
		}
	}
	since := "never vacuumed since statistics were reset"
	var ago time.Duration = math.MaxInt64
	if last != nil {
		ago = time.Since(*last)
		since = "last vacuumed " + dur(ago) + " ago"
	}
	c := Check{Name: name, Status: StatusOK}
	c.Figure = fmt.Sprintf("%d dead / %d live tuples (%.0f%% dead) on %s; autovacuum starts at %.0f; %s (%d autovacuum runs)",
		v.DeadTuples, v.LiveTuples, 100*v.DeadRatio, d.table(), v.AutovacuumThreshold, since, v.AutovacuumCount)
	over := float64(v.DeadTuples) > v.AutovacuumThreshold
	switch {
	case over && v.DeadTuples >= 10000 && ago > 10*time.Minute:
		c.Status = StatusFail
	case over && v.DeadTuples >= 1000 && ago > 3*time.Minute:
		c.Status = StatusWarn
	}
	if c.Status != StatusOK {
		c.Fix = fmt.Sprintf("vacuum debt: dead tuples pile up faster than autovacuum reclaims them. Stop the bleeding with "+
			"VACUUM (VERBOSE) %s; then check xmin_horizon (a long transaction makes every vacuum useless), "+
			"table_settings (a migration may have reset them) and that partition drops run (archive mode). "+
			"Do not scale the box first and do not add an index.", d.table())
	}
	return c
}

func (d *doctor) checkTableSettings(ctx context.Context) Check {
	const name = "table_settings"
	q, _ := query(d.schema, "doctor_settings")
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	var opts []string
	var autovacuum, trackCounts string
	if err := d.db.QueryRow(qctx, q).Scan(&opts, &autovacuum, &trackCounts); err != nil {
		return broken(name, wrap("table settings", err))
	}
	have := map[string]string{}
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		have[k] = v
	}
	var problems, sets []string
	for _, w := range wantReloptions {
		v, ok := have[w.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s is not set (the server default applies; want %s: %s)", w.name, w.value, w.why))
		case !sameNumber(v, w.value):
			problems = append(problems, fmt.Sprintf("%s = %s (want %s: %s)", w.name, v, w.value, w.why))
		default:
			continue
		}
		sets = append(sets, w.name+" = "+w.value)
	}
	if v, ok := have["autovacuum_enabled"]; ok && !truthy(v) {
		problems = append(problems, "autovacuum_enabled = "+v+" (autovacuum never runs on the hot table)")
		sets = append(sets, "autovacuum_enabled = true")
	}
	var server []string
	if !truthy(autovacuum) {
		server = append(server, "autovacuum = on")
		problems = append(problems, "the server runs with autovacuum = off")
	}
	if !truthy(trackCounts) {
		server = append(server, "track_counts = on")
		problems = append(problems, "the server runs with track_counts = off (autovacuum is blind)")
	}
	c := Check{Name: name, Status: StatusOK}
	if len(problems) == 0 {
		c.Figure = fmt.Sprintf("%s has %s", d.keyedTable(), strings.Join(opts, ", "))
		return c
	}
	c.Status = StatusFail
	c.Figure = strings.Join(problems, "; ")
	var fix []string
	if len(sets) > 0 {
		fix = append(fix, fmt.Sprintf("ALTER TABLE %s SET (%s);", d.keyedTable(), strings.Join(sets, ", ")))
		if _, ok := have["fillfactor"]; !ok || !sameNumber(have["fillfactor"], "80") {
			fix = append(fix, "(fillfactor applies to pages written from now on; VACUUM FULL or pg_repack rewrites the rest)")
		}
		fix = append(fix, "and find the migration that reset them.")
	}
	if len(server) > 0 {
		fix = append(fix, "Set "+strings.Join(server, " and ")+" in postgresql.conf and reload.")
	}
	c.Fix = strings.Join(fix, " ")
	return c
}

func sameNumber(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return x == y
}

func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on", "true", "yes", "1", "t", "y":
		return true
	}
	return false
}

var readyIndexRe = regexp.MustCompile(`(?s)CREATE INDEX jobs_ready ON \{\{schema\}\}\.jobs (.*?);`)

// readyIndexDDL is the statement that recreates the claim index, taken from
// the migration that created it so that it never drifts.
func (d *doctor) readyIndexDDL() string {
	def := "(queue, (tenant IS NOT NULL), priority DESC, run_at, id)\n    WHERE state = 'ready'"
	for _, m := range migrations.All() {
		if g := readyIndexRe.FindStringSubmatch(m.Up); g != nil {
			def = g[1]
		}
	}
	def = strings.Join(strings.Fields(def), " ")
	// jobs is partitioned (migration 016), and PostgreSQL builds an index
	// on a partitioned table only without CONCURRENTLY: the build blocks
	// writes for as long as it reads the ring's few seconds of jobs and
	// jobs_keyed.
	return fmt.Sprintf("CREATE INDEX jobs_ready ON %s %s; ANALYZE %s;", d.table(), def, d.table())
}

func (d *doctor) checkClaimIndex(ctx context.Context) Check {
	const name = "claim_index"
	q, _ := query(d.schema, "doctor_ready_index")
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	var valid, ready bool
	var def, pred string
	err := d.db.QueryRow(qctx, q).Scan(&valid, &ready, &def, &pred)
	missing := errors.Is(err, pgx.ErrNoRows)
	if err != nil && !missing {
		return broken(name, wrap("claim index", err))
	}
	scans, planErr := d.claimPlan(ctx)
	used := false
	for _, s := range scans {
		if strings.Contains(s, "using jobs_ready ") {
			used = true
		}
	}
	planFig := "the claim plan reads " + strings.Join(scans, ", ")
	if planErr != nil {
		planFig = "could not EXPLAIN the claim: " + planErr.Error()
	}
	c := Check{Name: name, Status: StatusOK}
	switch {
	case missing:
		c.Status = StatusFail
		c.Figure = "the partial index jobs_ready is missing: every claim walks the hot table; " + planFig
		c.Fix = "recreate it: " + d.readyIndexDDL()
	case !valid || !ready:
		c.Status = StatusFail
		c.Figure = "the partial index jobs_ready is invalid (a failed CREATE INDEX CONCURRENTLY?); " + planFig
		c.Fix = fmt.Sprintf("REINDEX INDEX CONCURRENTLY %s;", pgx.Identifier{d.schema, "jobs_ready"}.Sanitize())
	case !strings.Contains(pred, "state = 'ready'"):
		c.Status = StatusFail
		c.Figure = "jobs_ready is not partial on ready rows: " + def
		c.Fix = fmt.Sprintf("DROP INDEX %s; then %s", pgx.Identifier{d.schema, "jobs_ready"}.Sanitize(), d.readyIndexDDL())
	case planErr != nil:
		c.Status = StatusFail
		c.Figure = "jobs_ready is present, but " + planFig
		c.Fix = "run the doctor with a role that may EXPLAIN queries on the hot table"
	case !used:
		c.Status = StatusFail
		c.Figure = "jobs_ready is present but unused: " + planFig
		c.Fix = fmt.Sprintf("refresh the planner's statistics: ANALYZE %s; check for planner settings (enable_indexscan) and for a bloated index (REINDEX INDEX CONCURRENTLY %s)",
			d.table(), pgx.Identifier{d.schema, "jobs_ready"}.Sanitize())
	default:
		c.Figure = "jobs_ready is present and valid; " + planFig
	}
	return c
}

// claimPlan EXPLAINs the real claim statement for the busiest queue inside a
// transaction it rolls back, and returns its scans of the jobs table (e.g.
// "Index Scan using jobs_ready on jobs").
func (d *doctor) claimPlan(ctx context.Context) ([]string, error) {
	queue, best := "default", int64(0)
	for _, s := range d.stats {
		if s.Ready > best {
			best, queue = s.Ready, s.Queue
		}
	}
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	tx, err := d.db.Begin(qctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(qctx)) }()
	// As the claim runs: behind claim_settings (no sequential scan).
	st := store.New(d.schema)
	if _, err := tx.Exec(qctx, st.SQL("claim_settings")); err != nil {
		return nil, err
	}
	claim := st.SQL("claim")
	return explainScans(qctx, tx, claim,
		[]string{queue}, nil, 10, "skiplock-doctor", (30 * time.Second).Microseconds(),
		nil, nil, nil) // no bounds: the claim from the front, the one that must use jobs_ready
}

type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

func (n *planNode) walk(f func(*planNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// smallTablePages is the heap size (128 pages, 1 MiB at 8 KiB pages) under
// which a fenced write may honestly be planned as a sequential scan: reading
// the whole table is then cheaper than the key, and harmless.
const smallTablePages = 128

// checkFencedWrites EXPLAINs every fenced write (heartbeat, completions,
// reschedule, dead-lettering) in a transaction it rolls back and fails when
// one reaches the jobs table through anything but its primary key (a partial
// index such as jobs_running keeps an entry per job claimed since the xmin
// horizon was last free, so a write that scans it slows down with every job
// processed while a long transaction pins the horizon; issue 15).
func (d *doctor) checkFencedWrites(ctx context.Context) Check {
	const name = "fenced_writes"
	q, _ := query(d.schema, "doctor_jobs_pages")
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	var pages int64
	if err := d.db.QueryRow(qctx, q).Scan(&pages); err != nil {
		return broken(name, wrap("jobs table size", err))
	}
	tx, err := d.db.Begin(qctx)
	if err != nil {
		return broken(name, wrap("fenced writes", err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(qctx)) }()
	// As they run: every fenced write follows write_settings (no sequential
	// scan), which also keeps an empty generation of the ring, planned as a
	// zero-page table, on its primary key.
	st := store.New(d.schema)
	if _, err := tx.Exec(qctx, st.SQL("write_settings")); err != nil {
		return broken(name, wrap("fenced writes", err))
	}
	var bad, seq []string
	writes := st.FencedWrites("skiplock-doctor")
	for _, w := range writes {
		scans, err := explainScans(qctx, tx, w.SQL, w.Args...)
		if err != nil {
			return Check{Name: name, Status: StatusFail,
				Figure: "could not EXPLAIN " + w.Name + ": " + err.Error(),
				Fix:    "run the doctor with a role that may EXPLAIN queries on the hot table"}
		}
		for _, s := range scans {
			switch {
			case s == "Index Scan using jobs_pkey on jobs":
			case s == "Seq Scan on jobs" && pages <= smallTablePages:
				seq = append(seq, w.Name)
			default:
				bad = append(bad, w.Name+" reads "+s)
			}
		}
	}
	c := Check{Name: name, Status: StatusOK,
		Figure: fmt.Sprintf("all %d fenced writes reach their rows through jobs_pkey", len(writes))}
	if len(seq) > 0 {
		c.Figure = fmt.Sprintf("the fenced writes use jobs_pkey or, on this %d-page table, a sequential scan (%s)",
			pages, strings.Join(seq, ", "))
	}
	if len(bad) > 0 {
		c.Status = StatusFail
		c.Figure = "fenced writes off the primary key: " + strings.Join(bad, "; ") +
			" (such a write slows down with every job processed while the xmin horizon is pinned)"
		c.Fix = fmt.Sprintf("refresh the planner's statistics (ANALYZE %s) and check planner settings (enable_indexscan); "+
			"if the plans stay off jobs_pkey, the statements were changed: their fence must not repeat state = 'running'",
			d.table())
	}
	return c
}

// jobsPartition matches the jobs table and its partitions (migration 016:
// jobs_g0..jobs_g2, jobs_keyed); partitionSuffix is the suffix a partition's
// index carries (jobs_pkey_g0, jobs_ready_keyed), so that a scan of any
// partition reads as a scan of jobs by the parent's index.
var (
	jobsPartition   = regexp.MustCompile(`^jobs(_g[0-9]+|_keyed)?$`)
	partitionSuffix = regexp.MustCompile(`_(g[0-9]+|keyed)$`)
)

// explainScans EXPLAINs one statement and returns its distinct scans of the
// jobs table (e.g. "Index Scan using jobs_pkey on jobs"), sorted.
func explainScans(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]string, error) {
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		return nil, err
	}
	var root []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &root); err != nil {
		return nil, fmt.Errorf("parse plan: %w", err)
	}
	seen := map[string]bool{}
	var scans []string
	for _, r := range root {
		r.Plan.walk(func(n *planNode) {
			if !jobsPartition.MatchString(n.Relation) || !strings.Contains(n.Type, "Scan") {
				return
			}
			s := n.Type
			if n.Index != "" {
				s += " using " + partitionSuffix.ReplaceAllString(n.Index, "")
			}
			s += " on jobs"
			if !seen[s] {
				seen[s] = true
				scans = append(scans, s)
			}
		})
	}
	sort.Strings(scans)
	return scans, nil
}

func (d *doctor) checkXmin(ctx context.Context) Check {
	const name = "xmin_horizon"
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	hs, err := HorizonHolders(qctx, d.db, d.schema, 20)
	if err != nil {
		return broken(name, err)
	}
	c := Check{Name: name, Status: StatusOK}
	var oldest *HorizonHolder
	var slots []string
	for i := range hs {
		h := &hs[i]
		if h.Holder == "replication_slot" {
			if h.State == "inactive" {
				slots = append(slots, fmt.Sprintf("inactive replication slot %s holds xmin %d transactions old", h.Application, h.XminAgeXIDs))
			}
			continue
		}
		if oldest == nil || h.XactAgeSeconds > oldest.XactAgeSeconds {
			oldest = h
		}
	}
	var figs []string
	if oldest != nil {
		age := secs(oldest.XactAgeSeconds)
		state := oldest.State
		if state == "" {
			state = "in a transaction"
		}
		fig := fmt.Sprintf("oldest xmin holder: %s, %s for %s (xmin %d transactions old)", oldest.Who(), state, dur(age), oldest.XminAgeXIDs)
		if oldest.Query != "" {
			fig += fmt.Sprintf(", statement %q", oldest.Query)
		}
		figs = append(figs, fig)
		switch {
		case age >= d.o.XactFail:
			c.Status = StatusFail
		case age >= d.o.XactWarn:
			c.Status = StatusWarn
		}
		if oldest.OtherDatabase && c.Status != StatusOK {
			figs = append(figs, "it is in another database, but its xid is in every snapshot on the server, so it pins this one too")
		}
	} else {
		figs = append(figs, "no transaction holds back the xmin horizon")
	}
	if len(slots) > 0 {
		figs = append(figs, slots...)
		if c.Status == StatusOK {
			c.Status = StatusWarn
		}
	}
	if c.Status != StatusOK {
		// What the pin costs: the claim's p99 against its baseline.
		p := Pin{Holders: len(hs), Holder: oldest}
		if p.Holder == nil && len(hs) > 0 {
			p.Holder = &hs[0]
		}
		if p.Cost, err = ClaimCostNow(qctx, d.db, d.schema); err == nil {
			figs = append(figs, "cost: "+p.Cost.String())
		}
		c.Pin = &p
	}
	c.Figure = strings.Join(figs, "; ")
	if c.Status != StatusOK {
		c.Fix = fmt.Sprintf("vacuum cannot remove any tuple that died after that transaction began, and the claim and completions "+
			"wade through them. See every holder with SELECT * FROM %s; end the offender if it is safe (SELECT pg_terminate_backend(pid); ROLLBACK PREPARED 'gid'; "+
			"pg_drop_replication_slot for a dead slot); set idle_in_transaction_session_timeout, and run long reports on a replica",
			pgx.Identifier{d.schema, "xmin_holders"}.Sanitize())
	}
	return c
}

func (d *doctor) checkNotify(ctx context.Context) Check {
	const name = "notify_queue"
	q, _ := query(d.schema, "doctor_notify")
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	var usage float64
	if err := d.db.QueryRow(qctx, q).Scan(&usage); err != nil {
		return broken(name, wrap("notify queue", err))
	}
	c := Check{Name: name, Status: StatusOK,
		Figure: fmt.Sprintf("the NOTIFY queue is %.2f%% full", 100*usage)}
	switch {
	case usage >= d.o.NotifyFail:
		c.Status = StatusFail
	case usage >= d.o.NotifyWarn:
		c.Status = StatusWarn
	}
	if c.Status != StatusOK {
		c.Fix = "a LISTENing session is not consuming notifications (usually one stuck in a long transaction): find it in " +
			"pg_stat_activity (state 'idle in transaction', oldest xact_start) and end it. When the queue is full every " +
			"NOTIFY, and so every enqueue, fails; workers keep claiming through their poll backstop"
	}
	return c
}

func (d *doctor) checkStuck(ctx context.Context) Check {
	const name = "stuck_jobs"
	q, _ := query(d.schema, "doctor_stuck")
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	var stuck, expired int64
	var oldest float64
	if err := readRow(qctx, d.read, d.schema, q, []any{d.o.StuckAfter.Microseconds()}, &stuck, &expired, &oldest); err != nil {
		return broken(name, wrap("stuck jobs", err))
	}
	c := Check{Name: name, Status: StatusOK}
	switch {
	case stuck > 0:
		c.Status = StatusFail
		c.Figure = fmt.Sprintf("%d running job(s) lost their lease more than %s ago (oldest %s ago): nobody is reaping them",
			stuck, dur(d.o.StuckAfter), dur(secs(oldest)))
		c.Fix = fmt.Sprintf("every started worker runs the reaper, so none is running against schema %s: start one "+
			"(skiplock work), or check the workers' logs. Inspect them with SELECT * FROM %s WHERE lease_expired",
			d.schema, pgx.Identifier{d.schema, "long_runners"}.Sanitize())
	case expired > 0:
		c.Figure = fmt.Sprintf("%d expired lease(s), the oldest %s ago: the reaper will return them", expired, dur(secs(oldest)))
	default:
		c.Figure = "no running job has an expired lease"
	}
	return c
}

// limitHeldTooLong is how long a due job may wait behind a full
// concurrency limit before doctor warns.
const limitHeldTooLong = 5 * time.Minute

// checkLimits warns about a concurrency limit that is full while due jobs
// it covers have waited longer than limitHeldTooLong: the limit, not the
// workers, is what holds them back (set it higher, or accept the wait); and
// about ready jobs heavier than a rate limit's rate, which never start
// under it (naming the first few by id).
func (d *doctor) checkLimits(ctx context.Context) Check {
	const name = "limits"
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	ls, err := Limits(qctx, d.read, d.schema, true)
	if err != nil {
		return broken(name, wrap("limits", err))
	}
	c := Check{Name: name, Status: StatusOK, Figure: fmt.Sprintf("%d limit(s); none holds jobs back for long", len(ls))}
	if len(ls) == 0 {
		c.Figure = "no concurrency or rate limits"
		return c
	}
	var held, heavy []string
	for _, l := range ls {
		if l.TooHeavy > 0 {
			ids := make([]string, len(l.TooHeavyIDs))
			for i, id := range l.TooHeavyIDs {
				ids[i] = strconv.FormatInt(id, 10)
			}
			more := ""
			if l.TooHeavy > int64(len(ids)) {
				more = ", …"
			}
			heavy = append(heavy, fmt.Sprintf("%s (%d ready job(s) weigh more than its rate of %d: ids %s%s)",
				l.Name, l.TooHeavy, l.Rate, strings.Join(ids, ", "), more))
		}
		if l.FullValues > 0 && secs(l.OldestDue) > limitHeldTooLong {
			what := fmt.Sprintf("%d running, %d value(s) at its limit of %d", l.Used, l.FullValues, l.Concurrency)
			if l.Rate > 0 {
				what = fmt.Sprintf("%d started in the last %s, %d value(s) at its limit of %d", l.Used, dur(l.Per), l.FullValues, l.Rate)
			}
			held = append(held, fmt.Sprintf("%s (%s, oldest due job waiting %s)", l.Name, what, dur(secs(l.OldestDue))))
		}
	}
	if len(held) > 0 {
		c.Status = StatusWarn
		c.Figure = "full and holding due jobs back for over " + dur(limitHeldTooLong) + ": " + strings.Join(held, "; ")
		c.Fix = "if the wait is not intended, raise the limit: skiplock limit set NAME ... --concurrency N or --rate N --per D (skiplock limit list shows each)"
	}
	if len(heavy) > 0 {
		// Jobs that can never start: worse than a wait.
		figure, fix := "jobs that can never start: "+strings.Join(heavy, "; "),
			"raise the rate (skiplock limit set NAME ... --rate N --per D), or delete those jobs (skiplock job delete ID) and enqueue them with a --limit-weight the rate allows"
		if c.Status == StatusWarn {
			figure, fix = c.Figure+"; "+figure, c.Fix+"; "+fix
		}
		c.Status, c.Figure, c.Fix = StatusWarn, figure, fix
	}
	return c
}

func (d *doctor) checkWorkers(ctx context.Context) Check {
	const name = "workers"
	q, _ := query(d.schema, "doctor_live_workers")
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	var live int64
	if err := d.read.QueryRow(qctx, q, LiveWindow.Microseconds()).Scan(&live); err != nil {
		return broken(name, wrap("workers", err))
	}
	var due int64
	for _, s := range d.stats {
		if !s.Paused {
			due += s.Ready
		}
	}
	c := Check{Name: name, Status: StatusOK, Figure: fmt.Sprintf("%d live worker process(es); %d job(s) due", live, due)}
	if live == 0 && due > 0 {
		c.Status = StatusWarn
		c.Figure = fmt.Sprintf("%d job(s) are due but no worker process has reported in the last %s", due, dur(LiveWindow))
		c.Fix = "start workers (skiplock work, or Client.Start in your service)"
	}
	return c
}

func (d *doctor) checkDeadLetters(ctx context.Context) Check {
	const name = "dead_letters"
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	s, err := DeadLetterSizeOf(qctx, d.read, d.schema)
	if err != nil {
		return broken(name, err)
	}
	c := Check{Name: name, Status: StatusOK}
	c.Figure = fmt.Sprintf("%d new dead letter(s) in the last 24h (%d in the 24h before); %d kept", s.Last24h, s.Prev24h, s.Total)
	switch {
	case s.Last24h >= d.o.DeadFail && s.Last24h > s.Prev24h:
		c.Status = StatusFail
	case s.Last24h >= d.o.DeadWarn:
		c.Status = StatusWarn
	}
	if c.Status == StatusOK {
		return c
	}
	if gs, err := DeadLetterGroups(qctx, d.read, d.schema, "", 1); err == nil && len(gs) > 0 {
		c.Figure += fmt.Sprintf("; biggest group: kind %s, %q ×%d", gs[0].Kind, gs[0].Signature, gs[0].Count)
	}
	c.Fix = "a growing dead-letter table is a broken handler: group it with `skiplock dlq list`, fix the cause, then " +
		"`skiplock dlq replay --kind K --rate 10 --yes` (a trickle) or `skiplock dlq purge --kind K --yes`"
	return c
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// dur prints a duration rounded for people: 950ms, 42s, 3m12s, 5h3m.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
}
