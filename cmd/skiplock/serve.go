package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/metrics"
)

type serveFlags struct {
	httpAddr       string
	readOnly       bool
	showPayloads   bool
	prefix         string
	allowedHosts   []string
	insecureNoAuth bool
	replicaURL     string
}

func newServeCmd(g *globals) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the dashboard, /metrics, /healthz and /readyz",
		Long: `Serve the dashboard (the five panels, job search, dead-letter triage, queues,
schedules, workers), Prometheus /metrics, /healthz and /readyz.

With SKIPLOCK_DASHBOARD_USER and SKIPLOCK_DASHBOARD_PASSWORD set, every path
but /healthz and /readyz asks for basic auth; SKIPLOCK_DASHBOARD_TOKEN is
accepted as "Authorization: Bearer <token>". Without credentials, serve
listens on loopback only (--insecure-no-auth to listen further, when
something in front of it authenticates). It answers only to the host names
it listens on (loopback names on loopback; this machine's names and
addresses on 0.0.0.0) and those given with --allowed-host, against DNS
rebinding. Payloads are never shown unless --show-payloads lets an
authenticated user reveal one job's payload at a time (it needs
credentials, and is not allowed with --read-only). A read-only dashboard
also hides error text, unique keys and entities. SIGINT or SIGTERM shuts
down gracefully.

With --replica-url the pages read their figures and lists on that streaming
replica and each says how far behind the primary it is; actions, /readyz,
/metrics and the primary's own vacuum and xmin figures use --database-url
(/metrics adds skiplock_replica_lag_seconds and the replica's state).

With --database-url repeated (an application split across databases, each
with its own skiplock schema), the overview adds the databases up (counts
summed, lags and p99s the worst, the vacuum panel the worst database's)
beside a line per database, labelled host:port/name (never the URL); every
other page and every action is one database's, under /db/{label}/
(?db=label redirects there), and goes to that database. /metrics labels
each database's series with database; /readyz needs every database ready.
Not with --replica-url.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return g.runServe(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "address to listen on")
	fl.BoolVar(&f.readOnly, "read-only", false, "hide and refuse every action (pause, resume, cancel, replay, purge) and hide error text")
	fl.BoolVar(&f.showPayloads, "show-payloads", false, "let authenticated users reveal a job's payload (personal data; logged; needs credentials)")
	fl.StringVar(&f.prefix, "prefix", "", "URL path prefix to serve under, e.g. /skiplock (for a reverse proxy)")
	fl.StringArrayVar(&f.allowedHosts, "allowed-host", nil, "a host name the dashboard also answers to, e.g. queue.example.com (repeatable; * for any)")
	replicaURLFlag(cmd, &f.replicaURL)
	fl.BoolVar(&f.insecureNoAuth, "insecure-no-auth", false, "allow listening beyond loopback with no SKIPLOCK_DASHBOARD_* credentials (anyone who reaches the port can read job data and act)")
	g.addEncryptionKeys(cmd)
	return cmd
}

// dashboardOptions reads the authentication from the environment.
func (g *globals) dashboardOptions(readOnly, showPayloads bool, prefix string, log *slog.Logger) dashboard.Options {
	return dashboard.Options{
		Schema:       g.schema,
		Prefix:       prefix,
		ReadOnly:     readOnly,
		ShowPayloads: showPayloads,
		User:         g.getenv("SKIPLOCK_DASHBOARD_USER"),
		Password:     g.getenv("SKIPLOCK_DASHBOARD_PASSWORD"),
		Token:        g.getenv("SKIPLOCK_DASHBOARD_TOKEN"),
		Logger:       log,
	}
}

// credentialsHint says how to configure authentication.
const credentialsHint = "set SKIPLOCK_DASHBOARD_USER and SKIPLOCK_DASHBOARD_PASSWORD (or SKIPLOCK_DASHBOARD_TOKEN)"

// authConfigured reports whether the options ask for credentials.
func authConfigured(o dashboard.Options) bool { return o.User != "" || o.Token != "" }

// checkDashboardSecurity refuses, before anything starts, a configuration
// that would hand job data to whoever reaches the port: payload reveal
// without authentication, and an unauthenticated dashboard beyond loopback
// unless insecureNoAuth says so (checkListenerSecurity).
func checkDashboardSecurity(addr string, o dashboard.Options, insecureNoAuth bool) error {
	if (o.User == "") != (o.Password == "") {
		return usageError("set both SKIPLOCK_DASHBOARD_USER and SKIPLOCK_DASHBOARD_PASSWORD, or neither")
	}
	if o.ShowPayloads && !authConfigured(o) {
		return usageError("--show-payloads: revealing payloads requires an authenticated user; %s", credentialsHint)
	}
	return checkListenerSecurity("--http-addr", addr, "the dashboard",
		"anyone who reaches it could read job data and pause, cancel, replay or purge", o, insecureNoAuth)
}

// minSecretBytes is the shortest password or token a listener beyond
// loopback accepts: guessing is throttled (dashboard.SourceLoginRate,
// UserLoginRate), and a short secret would still fall to it.
const minSecretBytes = 12

// checkListenerSecurity is the rule for every listener of the CLI that
// shows queue data (serve's and dev's dashboard, work --metrics-addr): on
// loopback anything goes; beyond it, authentication is required unless
// insecureNoAuth (the --insecure-no-auth flag) says something in front of
// it authenticates, and a password or token shorter than minSecretBytes is
// refused. flag names the address's flag, what the server, risk what an
// open one would give away.
func checkListenerSecurity(flag, addr, what, risk string, o dashboard.Options, insecureNoAuth bool) error {
	if (o.User == "") != (o.Password == "") {
		return usageError("set both SKIPLOCK_DASHBOARD_USER and SKIPLOCK_DASHBOARD_PASSWORD, or neither")
	}
	if isLoopback(addr) {
		return nil
	}
	if !authConfigured(o) {
		if insecureNoAuth {
			return nil
		}
		return usageError("%s %s: refusing to serve %s beyond loopback without authentication "+
			"(%s); %s, or pass --insecure-no-auth if something in front of it authenticates", flag, addr, what, risk, credentialsHint)
	}
	if o.Password != "" && len(o.Password) < minSecretBytes {
		return usageError("%s %s: SKIPLOCK_DASHBOARD_PASSWORD is shorter than %d bytes; beyond loopback use a longer one", flag, addr, minSecretBytes)
	}
	if o.Token != "" && len(o.Token) < minSecretBytes {
		return usageError("%s %s: SKIPLOCK_DASHBOARD_TOKEN is shorter than %d bytes; beyond loopback use a longer one", flag, addr, minSecretBytes)
	}
	return nil
}

func (g *globals) runServe(cmd *cobra.Command, f serveFlags) error {
	if f.readOnly && f.showPayloads {
		return usageError("--show-payloads: not allowed with --read-only (a read-only dashboard never reveals payloads)")
	}
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	log := g.logger(stderr)
	opts := g.dashboardOptions(f.readOnly, f.showPayloads, f.prefix, log)
	keys, err := g.keyring()
	if err != nil {
		return err
	}
	opts.Encryption = keys
	if err := checkDashboardSecurity(f.httpAddr, opts, f.insecureNoAuth); err != nil {
		return err
	}
	for _, h := range f.allowedHosts {
		if err := dashboard.CheckAllowedHost(h); err != nil {
			return usageError("--allowed-host: %v", err)
		}
	}
	if len(g.databaseURLs) > 1 {
		if g.replicaURL(f.replicaURL) != "" {
			return usageError("--replica-url: not with several --database-url")
		}
		conns, closeAll, err := connectDatabases(ctx, g.databaseURLs, 10)
		if err != nil {
			return err
		}
		defer closeAll()
		dbs := make([]dashboard.Database, len(conns))
		for i, c := range conns {
			dbs[i] = dashboard.Database{Name: c.name, Pool: c.pool}
		}
		url, stop, failed, err := startDashboardFor(dbs, f.httpAddr, opts, f.allowedHosts, f.insecureNoAuth)
		if err != nil {
			return err
		}
		return g.serveUntilDone(ctx, stderr, url, stop, failed)
	}
	pool, err := g.connect(ctx, 10)
	if err != nil {
		return err
	}
	defer pool.Close()
	replica, err := g.connectReplica(ctx, f.replicaURL, 10)
	if err != nil {
		return err
	}
	if replica != nil {
		defer replica.Close()
		opts.Replica = replica
	}
	url, stop, failed, err := startDashboard(pool, f.httpAddr, opts, f.allowedHosts, f.insecureNoAuth)
	if err != nil {
		return err
	}
	return g.serveUntilDone(ctx, stderr, url, stop, failed)
}

// serveUntilDone serves until ctx ends (a signal) or the server fails.
func (g *globals) serveUntilDone(ctx context.Context, stderr io.Writer, url string, stop func(), failed <-chan error) error {
	g.say(stderr, "serve: dashboard on "+url, slog.String("url", url))
	select {
	case <-ctx.Done():
		g.say(stderr, "serve: shutting down")
		stop()
		return nil
	case err := <-failed:
		stop()
		return fmt.Errorf("serve: the HTTP server stopped: %w", err)
	}
}

// newHTTPServer is the server behind every listener of the CLI (serve, dev
// and work --metrics-addr): bounded header, body, response and idle times,
// so a slow or idle client cannot hold a connection forever.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// startDashboard listens on addr and serves the dashboard with /metrics; it
// returns the dashboard's URL, a function that drains the server (at most
// 10 s) and stops the dashboard's background work, and a channel that gets
// the error should the server stop on its own. The dashboard answers to the
// host names of addr (see allowedHosts) and extraHosts. It refuses what
// checkDashboardSecurity refuses, and warns when insecureNoAuth let it
// listen beyond loopback without authentication.
func startDashboard(pool *pgxpool.Pool, addr string, opts dashboard.Options, extraHosts []string,
	insecureNoAuth bool) (string, func(), <-chan error, error) {
	return startDashboardFor([]dashboard.Database{{Pool: pool}}, addr, opts, extraHosts, insecureNoAuth)
}

// startDashboardFor is startDashboard over one database or several (the
// overview adds them up, /metrics labels each one's series by database).
func startDashboardFor(dbs []dashboard.Database, addr string, opts dashboard.Options, extraHosts []string,
	insecureNoAuth bool) (string, func(), <-chan error, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := checkDashboardSecurity(addr, opts, insecureNoAuth); err != nil {
		return "", nil, nil, err
	}
	opts.AllowedHosts = allowedHosts(addr, extraHosts)
	if len(dbs) == 1 {
		var extra []prometheus.Collector
		if opts.Replica != nil {
			extra = append(extra, metrics.NewReplicaCollector(opts.Replica, opts.Schema))
		}
		opts.Metrics = metrics.Handler(dbs[0].Pool, opts.Schema, extra...)
	} else {
		mdbs := make([]metrics.Database, len(dbs))
		for i, db := range dbs {
			mdbs[i] = metrics.Database{Name: db.Name, Pool: db.Pool, Schema: opts.Schema}
		}
		opts.Metrics = metrics.HandlerForDatabases(mdbs)
	}
	h, err := dashboard.NewForDatabases(dbs, opts)
	if err != nil {
		return "", nil, nil, usageError("%v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = h.(*dashboard.Dashboard).Close()
		return "", nil, nil, fmt.Errorf("serve: %w", err)
	}
	if !authConfigured(opts) && !isLoopback(addr) {
		opts.Logger.Warn("serve: --insecure-no-auth: the dashboard is listening beyond loopback without authentication",
			slog.String("addr", addr))
	}
	srv := newHTTPServer(h, opts.Logger)
	served := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			opts.Logger.Error("serve: http server stopped", slog.String("error", err.Error()))
			failed <- err
		}
	}()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-served
		_ = h.(*dashboard.Dashboard).Close()
	}
	host := ln.Addr().String()
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		host = net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
	}
	return "http://" + host + strings.TrimRight(opts.Prefix, "/") + "/", stop, failed, nil
}

// allowedHosts lists the Host names the dashboard answers to when it
// listens on addr: loopback names on a loopback address; on an unspecified
// one (":8080", "0.0.0.0:8080"), those plus this machine's host name and
// interface addresses (a kubelet or Prometheus addresses a pod by its IP);
// otherwise the address's own host; and every extra one ("*": any).
func allowedHosts(addr string, extra []string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	var out []string
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified()):
		out = append(out, "localhost", "127.0.0.1", "::1")
		if name, err := os.Hostname(); err == nil && name != "" {
			out = append(out, name)
		}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					out = append(out, n.IP.String())
				}
			}
		}
	case dashboard.IsLoopbackHost(host):
		out = append(out, "localhost", "127.0.0.1", "::1", host)
	default:
		out = append(out, host)
	}
	return append(out, extra...)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && dashboard.IsLoopbackHost(host)
}
