package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/internal/errtext"
	"github.com/skiplock/skiplock/metrics"
)

type workFlags struct {
	queues       []string
	kinds        string
	concurrency  int
	batch        int
	lease        time.Duration
	maxAttempts  int
	tenantCap    int
	timeout      time.Duration
	killGrace    time.Duration
	drainTimeout time.Duration
	pollOnly     bool
	pollInterval time.Duration
	execCmd      string
	metricsAddr  string
	fleetMetrics bool
	// metricsHosts and insecureNoAuth are --metrics-allowed-host and
	// --insecure-no-auth: the metrics listener follows serve's rules.
	metricsHosts   []string
	insecureNoAuth bool
	// history of finished jobs (Config.DeleteCompleted, CompletedRetention)
	deleteCompleted    bool
	completedRetention time.Duration
	historyExportDir   string
	workflowRetention  time.Duration
	// listenURLs are the --listen-url values, matched by position to the
	// --database-url values (see workListenURLs).
	listenURLs []string
}

func newWorkCmd(g *globals) *cobra.Command {
	var f workFlags
	cmd := &cobra.Command{
		Use:   "work --exec CMD",
		Short: "Run jobs with any program: CMD runs through sh -c once per job, payload on stdin",
		Long: `Claims jobs and runs CMD through "sh -c" once per job, with the payload on stdin and
SKIPLOCK_JOB_ID, SKIPLOCK_JOB_QUEUE, SKIPLOCK_JOB_KIND, SKIPLOCK_JOB_ATTEMPT (and
SKIPLOCK_JOB_MAX_ATTEMPTS, SKIPLOCK_JOB_LEASE_TOKEN (the fencing token), SKIPLOCK_WORKER_ID and
SKIPLOCK_WORKER_PID) in its environment.
Exit 0 completes the job, and what the child wrote to stdout is its result (JSON as it is,
other text as a JSON string; at most 64 KiB, more fails the attempt; never logged; see 'job
wait'); any other exit fails the attempt with the tail of stderr as the error. Progress: the
child may write lines "DONE [TOTAL [NOTE]]" (e.g. "412 10000 rows imported") to the file
descriptor named by $SKIPLOCK_PROGRESS_FD (3); they are coalesced to one write per second and
shown by 'job get', 'job wait --progress' and the dashboard. If the lease is lost, on --timeout and on hard stop, the child's whole process group
gets SIGTERM, then SIGKILL after --kill-grace (5s); the attempt's outcome is written within
timeout + grace + 1s, whatever the child left behind. When sh exits, its exit status is the
outcome at once, and what it left in its process group is ended the same way; a process that
left the group (setsid) is not tracked, but its output is no longer read 1s after sh exits.
At most 1 MiB of each run's stderr is copied to the worker's stderr (then one "truncated" line).
SIGTERM drains (running jobs get --drain-timeout); a second SIGTERM stops at once.
The worker also runs the reaper and the recurring-job scheduler.

With --database-url repeated, one process serves every database given (each with its
own migrated skiplock schema): one client per database, each with --concurrency slots of
its own, its own claim loop, LISTEN connection, reaper and scheduler, so a backlog in one
database never takes slots from another, and a database that is down (at start or
later) holds up none of the others. Log lines then carry database=host:port/name, and
--metrics-addr serves every database's metrics with a database label.
--metrics-addr serves this process's own metrics (sum them over the fleet); the queue's
health read from the database comes from one place: skiplock serve, or --fleet-metrics on
one worker. Behind a
transaction-mode pooler, give --listen-url once per --database-url, in the same order:
the first --listen-url is the first database's direct URL for LISTEN, and so on ("" for a
database reached directly).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return g.runWork(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.queues, "queue", nil, "queue to claim from (repeatable; default \"default\")")
	fl.StringVar(&f.kinds, "kinds", "", "comma-separated kinds to claim (default any)")
	fl.IntVar(&f.concurrency, "concurrency", 10, "jobs run at once")
	fl.IntVar(&f.batch, "batch", 0, "jobs per claim: the pool's batch (a pool bound by its claims takes five batches a claim; default min(concurrency, 50))")
	fl.DurationVar(&f.lease, "lease", 30*time.Second, "lease duration (heartbeat every lease/3)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "cap on attempts for jobs run here (default: each job's own)")
	fl.IntVar(&f.tenantCap, "tenant-cap", 0, "most jobs of one tenant in one claim batch (0: no cap)")
	fl.DurationVar(&f.timeout, "timeout", 0, "per-job timeout (0: none)")
	fl.DurationVar(&f.killGrace, "kill-grace", defaultKillGrace, "how long a handler's process group has between SIGTERM and SIGKILL (on timeout, lost lease, hard stop, and for what sh leaves running)")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 25*time.Second, "how long SIGTERM lets running jobs finish")
	fl.BoolVar(&f.pollOnly, "poll-only", false, "no LISTEN: find jobs by polling only (a pooler is detected without it)")
	fl.StringArrayVar(&f.listenURLs, "listen-url", nil, "direct PostgreSQL URL used only for LISTEN, when --database-url goes through a transaction-mode pooler such as PgBouncer "+
		"(default $SKIPLOCK_LISTEN_URL); with --database-url repeated, give it once per --database-url, in the same order (\"\" for a database that LISTENs on its own URL)")
	fl.DurationVar(&f.pollInterval, "poll-interval", time.Second, "backstop poll interval")
	fl.StringVar(&f.execCmd, "exec", "", "command run through sh -c for each job (required)")
	fl.BoolVar(&f.deleteCompleted, "delete-completed", false, "delete finished jobs instead of keeping them for 'job get' (Config.DeleteCompleted)")
	fl.DurationVar(&f.completedRetention, "completed-retention", 0, "how long finished jobs stay answerable by 'job get' (default 24h; at least 1h; negative: forever)")
	fl.StringVar(&f.historyExportDir, "history-export-dir", "", "export each finished day, and each day of dead letters, to this directory or bucket URL (file://, s3://; compressed NDJSON and a manifest) before retention drops or purges it; a day whose export fails is kept")
	fl.DurationVar(&f.workflowRetention, "workflow-retention", 0, "how long finished workflows and batches stay answerable by 'workflow get' (default 168h; at least 1h; negative: forever)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics (this process's counters: claims, runs and outcomes by queue and kind, durations) and /healthz on this address, e.g. 127.0.0.1:9464; "+
		"beyond loopback it needs SKIPLOCK_DASHBOARD_USER and SKIPLOCK_DASHBOARD_PASSWORD (or SKIPLOCK_DASHBOARD_TOKEN), as serve does")
	fl.BoolVar(&f.fleetMetrics, "fleet-metrics", false, "also serve the fleet metrics (the queue's health read from the database) at --metrics-addr; give it to one process of the fleet only, or serve them with 'skiplock serve' instead")
	fl.StringArrayVar(&f.metricsHosts, "metrics-allowed-host", nil, "a host name the --metrics-addr listener also answers to (repeatable; * for any)")
	fl.BoolVar(&f.insecureNoAuth, "insecure-no-auth", false, "allow --metrics-addr beyond loopback with no SKIPLOCK_DASHBOARD_* credentials (anyone who reaches the port can read queue and kind names and counts)")
	g.addEncryptionKeys(cmd)
	return cmd
}

// workConfigFlags maps the Config fields runWork sets to their flags, so a
// rejected value is reported by the flag that gave it.
var workConfigFlags = map[string]string{
	"Pools[0].Queues": "--queue", "Pools[0].Kinds": "--kinds", "Pools[0].Concurrency": "--concurrency",
	"Pools[0].BatchSize": "--batch", "Pools[0].TenantCap": "--tenant-cap", "LeaseDuration": "--lease",
	"HeartbeatInterval": "--lease", "PollInterval": "--poll-interval", "Schema": "--schema",
	"CompletedRetention": "--completed-retention", "DeleteCompleted": "--delete-completed", "HistoryExportDir": "--history-export-dir",
	"WorkflowRetention": "--workflow-retention",
	"ListenURL":         "--listen-url",
}

func (g *globals) runWork(cmd *cobra.Command, f workFlags) error {
	if strings.TrimSpace(f.execCmd) == "" {
		return usageError("--exec: required")
	}
	if f.concurrency < 1 || f.concurrency > 10000 {
		return usageError("--concurrency: must be between 1 and 10000")
	}
	if f.batch < 0 || f.batch > 1000 {
		return usageError("--batch: must be between 1 and 1000")
	}
	if f.maxAttempts < 0 || f.maxAttempts > skiplock.MaxAttemptsLimit {
		return usageError("--max-attempts: must be between 1 and %d", skiplock.MaxAttemptsLimit)
	}
	if f.tenantCap < 0 {
		return usageError("--tenant-cap: must not be negative")
	}
	if f.lease < time.Second {
		return usageError("--lease: must be at least 1s")
	}
	if f.killGrace < 0 {
		return usageError("--kill-grace: must not be negative")
	}
	if len(f.queues) == 0 {
		f.queues = []string{skiplock.DefaultQueue}
	}
	var kinds []string
	if f.kinds != "" {
		for _, k := range strings.Split(f.kinds, ",") {
			if k = strings.TrimSpace(k); k != "" {
				kinds = append(kinds, k)
			}
		}
	}
	// Every writer of stderr goes through one lock: the worker's log records
	// and its children's output (copied raw, or as records under
	// --log-format json) never interleave within a line.
	stderr := &lockedWriter{w: cmd.ErrOrStderr()}
	log := g.logger(stderr)
	if f.fleetMetrics && f.metricsAddr == "" {
		return usageError("--fleet-metrics: needs --metrics-addr")
	}
	metricsAccess, err := g.workMetricsAccess(f, log)
	if err != nil {
		return err
	}
	// The worker outlives the first signal (it drains), so it runs on a
	// context of its own; signals are handled here.
	sigs := make(chan os.Signal, 2)
	g.notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer g.stopNotify(sigs)
	ctx := context.WithoutCancel(cmd.Context())

	urls := g.workDatabaseURLs()
	if len(urls) > 1 {
		if err := checkDistinctURLs(urls); err != nil {
			return err
		}
	}
	listens, err := g.workListenURLs(f.listenURLs, len(urls))
	if err != nil {
		return err
	}
	var clients []*skiplock.Client
	var dbs []metrics.Database
	for i, u := range urls {
		pool, err := connectTo(ctx, u, "--database-url", int32(6), nil)
		var ee *exitError
		if err != nil && len(urls) > 1 && !errors.As(err, &ee) {
			// One database of several is down: serve the others, and this
			// one as soon as it answers (its claim loop retries).
			if pool, err = lazyPool(u, int32(6)); err != nil {
				return err
			}
			log.Warn("skiplock: database unreachable at start; its jobs are claimed once it answers",
				slog.String("database", databaseLabel(pool)))
		}
		if err != nil {
			return err
		}
		defer pool.Close()
		dlog := log
		if len(urls) > 1 {
			dlog = log.With(slog.String("database", databaseLabel(pool)))
		}
		c, err := g.newWorkClient(ctx, f, pool, listens[i], dlog, kinds, stderr)
		if err != nil {
			return err
		}
		clients = append(clients, c)
		dbs = append(dbs, metrics.Database{Name: databaseLabel(pool), Pool: pool, Schema: g.schema,
			Collectors: []prometheus.Collector{metrics.NewClientCollector(c)}, ProcessOnly: !f.fleetMetrics})
	}
	if f.metricsAddr != "" {
		h := g.workMetricsHandler(dbs[0].Pool, f.fleetMetrics, dbs[0].Collectors...)
		if len(dbs) > 1 {
			h = metrics.HandlerForDatabases(dbs)
		}
		stop, err := serveWorkerMetrics(f.metricsAddr, h, metricsAccess, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	fleet, err := skiplock.NewFleet(clients, nil)
	if err != nil {
		return err
	}
	if err := fleet.Start(ctx); err != nil {
		return err
	}
	<-sigs
	log.Info("skiplock: draining; send the signal again to stop at once", "drain_timeout", f.drainTimeout)
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, f.drainTimeout)
		defer cancel()
		stopped <- fleet.Stop(sctx)
	}()
	select {
	case err := <-stopped:
		return err
	case <-sigs:
		log.Warn("skiplock: second signal; stopping at once")
		return fleet.StopAndCancel(ctx)
	}
}

// workListenURLs matches the --listen-url values to n databases by
// position: none (every database LISTENs on its own URL), or exactly one
// per --database-url ("" for one that LISTENs on its own URL). With one
// database, $SKIPLOCK_LISTEN_URL stands in for the flag; with several it
// cannot say which database it is for, so it is refused.
func (g *globals) workListenURLs(flags []string, n int) ([]string, error) {
	out := make([]string, n)
	switch {
	case len(flags) == 0 && n == 1:
		out[0] = g.listenURL("")
	case len(flags) == 0:
		if g.getenv("SKIPLOCK_LISTEN_URL") != "" {
			return nil, usageError("SKIPLOCK_LISTEN_URL: not with several --database-url (it cannot say which database it is for); " +
				"give --listen-url once per --database-url instead")
		}
	case len(flags) != n && n == 1:
		return nil, usageError("--listen-url: given %d times for one database; give it once", len(flags))
	case len(flags) != n:
		return nil, usageError("--listen-url: given %d times for %d --database-url; give it once per --database-url, in the same order "+
			"(\"\" for a database that LISTENs on its own URL)", len(flags), n)
	default:
		copy(out, flags)
	}
	for i, u := range out {
		if u == "" {
			continue
		}
		if _, err := pgx.ParseConfig(u); err != nil {
			if n == 1 {
				return nil, usageError("--listen-url: cannot parse the connection string")
			}
			return nil, usageError("--listen-url: the one for --database-url number %d cannot be parsed as a connection string", i+1)
		}
	}
	return out, nil
}

// workDatabaseURLs are the databases `work` serves: every --database-url
// given, else the one databaseURL resolves.
func (g *globals) workDatabaseURLs() []string {
	if len(g.databaseURLs) > 1 {
		return g.databaseURLs
	}
	return []string{g.databaseURL()}
}

// lazyPool is a pool that connects on first use, with connect's settings
// (but pgx's default statement mode: no pooler probe is possible while the
// database is down).
func lazyPool(dbURL string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, usageError("--database-url: cannot parse the connection string")
	}
	cfg.MaxConns = maxConns
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "skiplock"
	}
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// databaseLabel names a pool's database for log lines: host, port and
// database name, never the URL (it may hold a password).
func databaseLabel(pool *pgxpool.Pool) string {
	cc := pool.Config().ConnConfig
	return fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database)
}

// newWorkClient is the client `work` runs on one database: one pool of
// --concurrency slots claiming --queue, the --exec handler for every kind.
func (g *globals) newWorkClient(ctx context.Context, f workFlags, pool *pgxpool.Pool, listen string, log *slog.Logger, kinds []string,
	stderr *lockedWriter) (*skiplock.Client, error) {
	g.warnNotMigrated(ctx, pool, log)
	keys, err := g.keyring()
	if err != nil {
		return nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{
		Schema: g.schema, Logger: log, Encryption: keys, LeaseDuration: f.lease, PollOnly: f.pollOnly, PollInterval: f.pollInterval,
		ShutdownTimeout: f.drainTimeout, DeleteCompleted: f.deleteCompleted, CompletedRetention: f.completedRetention, HistoryExportDir: f.historyExportDir,
		WorkflowRetention: f.workflowRetention,
		ListenURL:         listen,
		Pools: []skiplock.WorkerPool{{Name: "exec", Queues: f.queues, Kinds: kinds, Concurrency: f.concurrency,
			BatchSize: f.batch, TenantCap: f.tenantCap}},
	})
	if err != nil {
		var fe *skiplock.FieldError
		if errors.As(err, &fe) {
			if flag, ok := workConfigFlags[strings.TrimPrefix(fe.Field, "Config.")]; ok {
				return nil, usageError("%s: %s", flag, fe.Message)
			}
			return nil, usageError("%v", err)
		}
		return nil, err
	}
	var opts []skiplock.HandlerOption
	if f.timeout > 0 {
		opts = append(opts, skiplock.WithTimeout(f.timeout))
	}
	if f.maxAttempts > 0 {
		opts = append(opts, skiplock.WithMaxAttempts(f.maxAttempts))
	}
	var outLog *slog.Logger // nil: the children's output is copied raw
	if g.logFormat == "json" {
		outLog = g.loggerAt(stderr, slog.LevelDebug)
	}
	if err := skiplock.HandleFallback(c, execHandler(f.execCmd, f.killGrace, stderr, outLog), opts...); err != nil {
		return nil, err
	}
	return c, nil
}

// execHandler runs command for each job through sh -c, in a process group
// of its own, and contains what it starts:
//
//   - when sh exits, the run's outcome is sh's exit status (0 completes),
//     whatever it left running: what is left in its process group gets
//     SIGTERM, and SIGKILL once grace has passed;
//   - on timeout, lease loss or hard stop the whole group gets SIGTERM, and
//     SIGKILL once grace has passed; the attempt fails ("killed: ...")
//     whatever sh's status;
//   - the child's stdout and stderr are read from pipes of our own, so a
//     process that leaves the group (setsid, a daemon) and keeps them open
//     cannot hold the run: they are read for at most execOutputDrain after
//     sh ends, then closed.
//
// So the outcome is written within the timeout + grace + execOutputDrain.
// The child's output is copied to the worker's stderr up to execOutputCap
// bytes per run (then one "truncated" line), or, with outLog (--log-format
// json), logged as records of at most execLineBytes each (outputLog); the
// tail of its stderr (stderrTailBytes) is the error text of a failed
// attempt.
func execHandler(command string, grace time.Duration, stderr *lockedWriter, outLog *slog.Logger) skiplock.HandlerFunc[json.RawMessage] {
	return func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
		c := exec.Command("sh", "-c", command)
		c.Stdin = bytes.NewReader(j.Payload)
		c.Env = append(os.Environ(),
			"SKIPLOCK_JOB_ID="+strconv.FormatInt(j.ID, 10),
			"SKIPLOCK_JOB_QUEUE="+j.Queue,
			"SKIPLOCK_JOB_KIND="+j.Kind,
			"SKIPLOCK_JOB_ATTEMPT="+strconv.Itoa(j.Attempt),
			"SKIPLOCK_JOB_MAX_ATTEMPTS="+strconv.Itoa(j.MaxAttempts),
			"SKIPLOCK_JOB_LEASE_TOKEN="+strconv.FormatInt(j.LeaseToken, 10),
			"SKIPLOCK_WORKER_ID="+j.WorkerID,
			"SKIPLOCK_WORKER_PID="+strconv.Itoa(os.Getpid()),
		)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// The payload goes through a pipe exec copies to: a grandchild that
		// holds stdin without reading cannot make Wait wait for that copy
		// longer than this.
		c.WaitDelay = execOutputDrain
		tail := &tailBuffer{max: stderrTailBytes}
		// stdout is the job's result: kept (bounded), never logged; stderr
		// goes to the worker's log (as records with --log-format json).
		result := &resultBuffer{}
		var stderrW io.Writer
		if outLog != nil {
			run := &outputLog{log: outLog, left: execOutputCap,
				job: []slog.Attr{slog.Int64("job_id", j.ID), slog.String("queue", j.Queue), slog.String("kind", j.Kind)}}
			e := run.stream("stderr")
			defer e.flush()
			stderrW = e
		} else {
			stderrW = &cappedWriter{w: stderr, left: execOutputCap, jobID: j.ID}
		}
		out, err := startOutputPipes(c, result, multiWriter{tail, stderrW})
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		progress, err := startProgressPipe(c)
		if err != nil {
			out.close()
			return fmt.Errorf("start: %w", err)
		}
		if err := c.Start(); err != nil {
			out.close()
			progress.close()
			return fmt.Errorf("start: %w", err)
		}
		out.started()
		progress.started(ctx)
		pgid := c.Process.Pid
		exited := make(chan error, 1)
		go func() { exited <- c.Wait() }()
		var waitErr, stopped error
		select {
		case waitErr = <-exited:
			endGroup(pgid, time.Now().Add(grace), nil)
		case <-ctx.Done():
			stopped = context.Cause(ctx)
			waitErr = endGroup(pgid, time.Now().Add(grace), exited)
		}
		out.drain(execOutputDrain)
		progress.drain(execOutputDrain)
		switch {
		case stopped != nil:
			return fmt.Errorf("killed: %v", stopped)
		case waitErr != nil && !errors.Is(waitErr, exec.ErrWaitDelay):
			return fmt.Errorf("%v: %s", waitErr, strings.TrimSpace(tail.String()))
		}
		return result.set(ctx)
	}
}

// resultBuffer is an --exec child's stdout: its job's result, kept up to
// skiplock.MaxResultBytes (one byte more tells a longer one).
type resultBuffer struct {
	mu   sync.Mutex // guards buf and over
	buf  []byte
	over bool
}

func (r *resultBuffer) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if room := skiplock.MaxResultBytes - len(r.buf); len(p) > room {
		r.buf, r.over = append(r.buf, p[:max(room, 0)]...), true
		return len(p), nil
	}
	r.buf = append(r.buf, p...)
	return len(p), nil
}

// set makes the child's stdout its job's result: JSON as it is, any other
// text as a JSON string (without its final newline); nothing when the
// child wrote nothing. A stdout over the bound fails the attempt.
func (r *resultBuffer) set(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.over {
		return fmt.Errorf("%w: the handler wrote more than %d bytes to stdout", skiplock.ErrResultTooLarge, skiplock.MaxResultBytes)
	}
	out := bytes.TrimRight(r.buf, "\r\n")
	if len(bytes.TrimSpace(out)) == 0 {
		return nil
	}
	if json.Valid(out) {
		return skiplock.SetResult(ctx, json.RawMessage(out))
	}
	return skiplock.SetResult(ctx, strings.ToValidUTF8(string(out), "\uFFFD"))
}

const (
	// defaultKillGrace is --kill-grace's default: how long a handler's
	// process group has between SIGTERM and SIGKILL.
	defaultKillGrace = 5 * time.Second
	// execOutputDrain is how long a handler's output is still read after sh
	// has ended (what it wrote last, still in the pipe); a process that keeps
	// the pipes open longer is cut off.
	execOutputDrain = time.Second
	// execOutputCap bounds what one run of a handler copies to the worker's
	// stderr (stdout and stderr together); the rest is dropped, with one
	// line saying so.
	execOutputCap = 1 << 20
)

// endGroup ends the process group pgid: SIGTERM to all of it now, SIGKILL
// to what is left at deadline. With exited (sh not yet waited for), it
// returns sh's Wait result once sh is gone, and then still waits (until
// deadline) for the rest of the group; with nil, sh was waited for already
// and it only ends the rest. It returns at the latest just after deadline.
func endGroup(pgid int, deadline time.Time, exited <-chan error) error {
	if syscall.Kill(-pgid, syscall.SIGTERM) == syscall.ESRCH {
		// Nothing left in the group (sh itself, while not waited for, is
		// always in it).
		if exited != nil {
			return <-exited
		}
		return nil
	}
	kill := time.NewTimer(time.Until(deadline))
	defer kill.Stop()
	var waitErr error
	if exited != nil {
		select {
		case waitErr = <-exited:
		case <-kill.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return <-exited
		}
	}
	// sh has been waited for: its pid, the group's id, stays reserved only
	// while a member is left, so poll for none (ESRCH) rather than signal a
	// group that may no longer be this one's.
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for syscall.Kill(-pgid, 0) != syscall.ESRCH {
		select {
		case <-poll.C:
		case <-kill.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return waitErr
		}
	}
	return waitErr
}

// outputPipes are a handler's stdout and stderr: pipes whose write ends
// the child gets as files (so exec.Cmd.Wait returns when sh exits, not when
// the last holder of the pipes closes them) and whose read ends are copied
// by two goroutines of ours.
type outputPipes struct {
	readers, writers []*os.File
	dsts             []io.Writer
	done             chan struct{} // closed when both copies have ended
}

func startOutputPipes(c *exec.Cmd, stdout, stderr io.Writer) (*outputPipes, error) {
	p := &outputPipes{dsts: []io.Writer{stdout, stderr}, done: make(chan struct{})}
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			p.close()
			return nil, err
		}
		p.readers, p.writers = append(p.readers, r), append(p.writers, w)
	}
	c.Stdout, c.Stderr = p.writers[0], p.writers[1]
	return p, nil
}

// started closes our copies of the write ends (the child has its own) and
// starts copying.
func (p *outputPipes) started() {
	for _, w := range p.writers {
		_ = w.Close()
	}
	var wg sync.WaitGroup
	for i, r := range p.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(p.dsts[i], r)
		}()
	}
	go func() {
		wg.Wait()
		close(p.done)
	}()
}

// drain waits up to d for both pipes to reach their end, then closes the
// read ends (which ends the copies) and waits for the copies to stop.
func (p *outputPipes) drain(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	}
	p.close()
	<-p.done
}

func (p *outputPipes) close() {
	for _, f := range append(p.readers, p.writers...) {
		_ = f.Close()
	}
}

// cappedWriter copies a run's output to the worker's stderr until left
// bytes have gone, then writes one line saying the rest was dropped.
type cappedWriter struct {
	mu    sync.Mutex // guards left and cut
	w     io.Writer
	left  int
	cut   bool
	jobID int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return len(p), nil
	}
	if len(p) <= c.left {
		c.left -= len(p)
		_, _ = c.w.Write(p)
		return len(p), nil
	}
	_, _ = c.w.Write(p[:c.left])
	c.left, c.cut = 0, true
	_, _ = fmt.Fprintf(c.w, "\nskiplock: job %d: output truncated: more than %d bytes in one run; the rest is not copied to the worker's log\n",
		c.jobID, execOutputCap)
	return len(p), nil
}

// execLineBytes bounds one record of a child's output under --log-format
// json: a longer line is logged in parts of at most this many bytes.
const execLineBytes = 4096

// outputLog logs one run's output under --log-format json: each line (or
// part of a line, execLineBytes at most) of the child's stdout or stderr
// becomes one record "skiplock: job output" with the job's id, queue and
// kind, the stream, and the text made safe to carry (outputText). Like the
// raw copy it stops after execOutputCap bytes of the run, with one record
// saying so.
type outputLog struct {
	log *slog.Logger
	job []slog.Attr
	mu  sync.Mutex // guards left and cut
	// left is what the run may still log; cut is set once it is spent.
	left int
	cut  bool
}

// stream is the writer of one of the run's streams.
func (o *outputLog) stream(name string) *outputLines {
	return &outputLines{run: o, name: name}
}

// emit logs one line of stream, within the run's cap.
func (o *outputLog) emit(stream string, line []byte, part bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cut {
		return
	}
	if len(line) > o.left {
		line, o.cut = line[:o.left], true
	}
	o.left -= len(line)
	attrs := append(append([]slog.Attr{}, o.job...), slog.String("stream", stream), slog.String("line", outputText(line)))
	if part {
		attrs = append(attrs, slog.Bool("part", true))
	}
	o.log.LogAttrs(context.Background(), slog.LevelInfo, "skiplock: job output", attrs...)
	if o.cut {
		o.log.LogAttrs(context.Background(), slog.LevelWarn, "skiplock: job output truncated; the rest is not logged",
			append(append([]slog.Attr{}, o.job...), slog.Int("max_bytes", execOutputCap))...)
	}
}

// outputLines splits one stream into lines for outputLog. Only its pipe's
// copy goroutine writes to it, and flush runs after that copy ended.
type outputLines struct {
	run  *outputLog
	name string
	buf  []byte
	part bool // the buffered text continues a line already logged in part
}

func (l *outputLines) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	l.lines()
	l.buf = append([]byte(nil), l.buf...) // let the pipe's buffer go
	return len(p), nil
}

// lines logs every whole line in buf, and the parts of a line longer than
// execLineBytes; what is left is the start of a line.
func (l *outputLines) lines() {
	for {
		i := bytes.IndexByte(l.buf, '\n')
		switch {
		case i >= 0 && i <= execLineBytes:
			l.run.emit(l.name, l.buf[:i], l.part)
			l.buf, l.part = l.buf[i+1:], false
		case len(l.buf) > execLineBytes:
			l.run.emit(l.name, l.buf[:execLineBytes], true)
			l.buf, l.part = l.buf[execLineBytes:], true
		default:
			return
		}
	}
}

// flush logs what is left of a last line without a newline.
func (l *outputLines) flush() {
	l.lines()
	if len(l.buf) > 0 {
		l.run.emit(l.name, l.buf, l.part)
		l.buf = nil
	}
}

// ansiEscape matches terminal escape sequences: CSI (colours, cursor
// moves) and OSC (titles, links), and any other ESC-introduced pair.
var ansiEscape = regexp.MustCompile(`\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])`)

// outputText makes a child's output safe to carry in a log record: valid
// UTF-8 (invalid bytes become U+FFFD), without terminal escape sequences,
// and with control characters (NUL included) but tab shown as U+FFFD. A
// trailing carriage return (CRLF) is dropped.
func outputText(b []byte) string {
	b = bytes.TrimSuffix(b, []byte("\r"))
	s := ansiEscape.ReplaceAllString(strings.ToValidUTF8(string(b), "\uFFFD"), "")
	return strings.Map(func(r rune) rune {
		if r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
			return '\uFFFD'
		}
		return r
	}, s)
}

// lockedWriter serializes writes from concurrent children.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  interface{ Write([]byte) (int, error) }
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type multiWriter []interface{ Write([]byte) (int, error) }

func (m multiWriter) Write(p []byte) (int, error) {
	for _, w := range m {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

// stderrTailBytes is how much of the end of a failed child's stderr becomes
// the job's error text.
const stderrTailBytes = 2048

// tailBuffer keeps the end of what was written: String returns at most max
// bytes of it. It keeps a few bytes more, so that String can tell a
// character cut by the limit from one that was never whole.
type tailBuffer struct {
	mu  sync.Mutex // guards buf
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if keep := t.max + utf8.UTFMax; len(t.buf) > keep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-keep:]...)
	}
	return len(p), nil
}

// String is the tail as error text: cut on a character boundary and made
// storable (errtext.Tail), whatever bytes the child wrote.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return errtext.Tail(t.buf, t.max)
}

// workMetricsHandler is what --metrics-addr serves over one database: this
// process's metrics, and with fleet (--fleet-metrics) the queue's health.
func (g *globals) workMetricsHandler(pool *pgxpool.Pool, fleet bool, cs ...prometheus.Collector) http.Handler {
	if fleet {
		return metrics.Handler(pool, g.schema, cs...)
	}
	return metrics.ProcessHandler(cs...)
}

// workerMetricsServer is the --metrics-addr server: /metrics and /healthz,
// with the same timeouts as serve.
func (g *globals) workerMetricsServer(pool *pgxpool.Pool, c *skiplock.Client, log *slog.Logger) *http.Server {
	return metricsServer(g.workMetricsHandler(pool, false, metrics.NewClientCollector(c)), log)
}

// metricsServer serves h at /metrics, and /healthz.
func metricsServer(h http.Handler, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return newHTTPServer(mux, log)
}

// workMetricsAccess is who may reach --metrics-addr: serve's rules
// (checkListenerSecurity), its credentials (SKIPLOCK_DASHBOARD_*) and its
// Host check (the address's own names and --metrics-allowed-host).
func (g *globals) workMetricsAccess(f workFlags, log *slog.Logger) (dashboard.Options, error) {
	if f.metricsAddr == "" {
		return dashboard.Options{}, nil
	}
	o := g.dashboardOptions(false, false, "", log)
	if err := checkListenerSecurity("--metrics-addr", f.metricsAddr, "metrics",
		"anyone who reaches it could read queue and kind names and counts", o, f.insecureNoAuth); err != nil {
		return o, err
	}
	for _, h := range f.metricsHosts {
		if err := dashboard.CheckAllowedHost(h); err != nil {
			return o, usageError("--metrics-allowed-host: %v", err)
		}
	}
	o.AllowedHosts = allowedHosts(f.metricsAddr, f.metricsHosts)
	return o, nil
}

// serveWorkerMetrics serves h at /metrics (the process collector, the
// queue's health views, Go runtime; per database with several) and /healthz
// on addr until stop is called, behind access's Host check and credentials
// (dashboard.Protect: failed logins throttled and logged).
func serveWorkerMetrics(addr string, h http.Handler, access dashboard.Options, log *slog.Logger) (stop func(), err error) {
	srv := metricsServer(h, log)
	if srv.Handler, err = dashboard.Protect(srv.Handler, access); err != nil {
		return nil, usageError("--metrics-addr: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError("--metrics-addr: %v", err)
	}
	if !authConfigured(access) && !isLoopback(addr) {
		log.Warn("skiplock: --insecure-no-auth: metrics are served beyond loopback without authentication", slog.String("addr", addr))
	}
	go func() { _ = srv.Serve(ln) }()
	log.Info("skiplock: serving metrics", slog.String("url", "http://"+ln.Addr().String()+"/metrics"))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
