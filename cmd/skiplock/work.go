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
	drainTimeout time.Duration
	pollOnly     bool
	pollInterval time.Duration
	execCmd      string
	metricsAddr  string
	// history of finished jobs (Config.DeleteCompleted, CompletedRetention)
	deleteCompleted    bool
	completedRetention time.Duration
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
Exit 0 completes the job; any other exit fails the attempt with the tail of stderr as the
error. The child's process group is killed if the lease is lost, on timeout and on hard stop.
SIGTERM drains (running jobs get --drain-timeout); a second SIGTERM stops at once.
The worker also runs the reaper and the recurring-job scheduler.

With --database-url repeated, one process serves every database given (each with its
own migrated skiplock schema): one client per database, each with --concurrency slots of
its own, its own claim loop, LISTEN connection, reaper and scheduler, so a backlog in one
database never takes slots from another, and a database that is down (at start or
later) holds up none of the others. Log lines then carry database=host:port/name, and
--metrics-addr serves every database's metrics with a database label. Behind a
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
	fl.IntVar(&f.batch, "batch", 0, "most jobs per claim (default min(concurrency, 50))")
	fl.DurationVar(&f.lease, "lease", 30*time.Second, "lease duration (heartbeat every lease/3)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "cap on attempts for jobs run here (default: each job's own)")
	fl.IntVar(&f.tenantCap, "tenant-cap", 0, "most jobs of one tenant in one claim batch (0: no cap)")
	fl.DurationVar(&f.timeout, "timeout", 0, "per-job timeout (0: none)")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 25*time.Second, "how long SIGTERM lets running jobs finish")
	fl.BoolVar(&f.pollOnly, "poll-only", false, "no LISTEN: find jobs by polling only (a pooler is detected without it)")
	fl.StringArrayVar(&f.listenURLs, "listen-url", nil, "direct PostgreSQL URL used only for LISTEN, when --database-url goes through a transaction-mode pooler such as PgBouncer "+
		"(default $SKIPLOCK_LISTEN_URL); with --database-url repeated, give it once per --database-url, in the same order (\"\" for a database that LISTENs on its own URL)")
	fl.DurationVar(&f.pollInterval, "poll-interval", time.Second, "backstop poll interval")
	fl.StringVar(&f.execCmd, "exec", "", "command run through sh -c for each job (required)")
	fl.BoolVar(&f.deleteCompleted, "delete-completed", false, "delete finished jobs instead of keeping them for `job get` (Config.DeleteCompleted)")
	fl.DurationVar(&f.completedRetention, "completed-retention", 0, "how long finished jobs stay answerable by `job get` (default 24h; at least 1h; negative: forever)")
	fl.DurationVar(&f.workflowRetention, "workflow-retention", 0, "how long finished workflows and batches stay answerable by `workflow get` (default 168h; at least 1h; negative: forever)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics (this process's counters and claim histogram, and the queue's health) and /healthz on this address, e.g. 127.0.0.1:9464")
	return cmd
}

// workConfigFlags maps the Config fields runWork sets to their flags, so a
// rejected value is reported by the flag that gave it.
var workConfigFlags = map[string]string{
	"Pools[0].Queues": "--queue", "Pools[0].Kinds": "--kinds", "Pools[0].Concurrency": "--concurrency",
	"Pools[0].BatchSize": "--batch", "Pools[0].TenantCap": "--tenant-cap", "LeaseDuration": "--lease",
	"HeartbeatInterval": "--lease", "PollInterval": "--poll-interval", "Schema": "--schema",
	"CompletedRetention": "--completed-retention", "DeleteCompleted": "--delete-completed",
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
	log := g.logger(cmd.ErrOrStderr())
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
	stderr := &lockedWriter{w: cmd.ErrOrStderr()}
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
			Collectors: []prometheus.Collector{metrics.NewClientCollector(c)}})
	}
	if f.metricsAddr != "" {
		h := metrics.Handler(dbs[0].Pool, g.schema, dbs[0].Collectors...)
		if len(dbs) > 1 {
			h = metrics.HandlerForDatabases(dbs)
		}
		stop, err := serveWorkerMetrics(f.metricsAddr, h, log)
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
	c, err := skiplock.NewClient(pool, skiplock.Config{
		Schema: g.schema, Logger: log, LeaseDuration: f.lease, PollOnly: f.pollOnly, PollInterval: f.pollInterval,
		ShutdownTimeout: f.drainTimeout, DeleteCompleted: f.deleteCompleted, CompletedRetention: f.completedRetention,
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
	if err := skiplock.HandleFallback(c, execHandler(f.execCmd, stderr), opts...); err != nil {
		return nil, err
	}
	return c, nil
}

// execHandler runs command for each job, in its own process group so the
// whole tree can be killed.
func execHandler(command string, stderr *lockedWriter) skiplock.HandlerFunc[json.RawMessage] {
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
		tail := &tailBuffer{max: stderrTailBytes}
		c.Stdout = stderr
		c.Stderr = multiWriter{tail, stderr}
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%v: %s", err, strings.TrimSpace(tail.String()))
			}
			return nil
		case <-ctx.Done():
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-done
			return fmt.Errorf("killed: %v", context.Cause(ctx))
		}
	}
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

// workerMetricsServer is the --metrics-addr server: /metrics and /healthz,
// with the same timeouts as serve.
func (g *globals) workerMetricsServer(pool *pgxpool.Pool, c *skiplock.Client, log *slog.Logger) *http.Server {
	return metricsServer(metrics.Handler(pool, g.schema, metrics.NewClientCollector(c)), log)
}

// metricsServer serves h at /metrics, and /healthz.
func metricsServer(h http.Handler, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return newHTTPServer(mux, log)
}

// serveWorkerMetrics serves h at /metrics (the process collector, the
// queue's health views, Go runtime; per database with several) and /healthz
// on addr until stop is called.
func serveWorkerMetrics(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError("--metrics-addr: %v", err)
	}
	srv := metricsServer(h, log)
	go func() { _ = srv.Serve(ln) }()
	log.Info("skiplock: serving metrics", slog.String("url", "http://"+ln.Addr().String()+"/metrics"))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
