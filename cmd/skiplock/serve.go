package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/metrics"
)

func init() { register(newServeCmd) }

type serveFlags struct {
	httpAddr     string
	readOnly     bool
	showPayloads bool
	prefix       string
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the dashboard, /metrics, /healthz and /readyz",
		Long: `Serve the dashboard (the five panels, job search, dead-letter triage, queues,
schedules, workers), Prometheus /metrics, /healthz and /readyz.

With SKIPLOCK_DASHBOARD_USER and SKIPLOCK_DASHBOARD_PASSWORD set, every path
but /healthz and /readyz asks for basic auth; SKIPLOCK_DASHBOARD_TOKEN is
accepted as "Authorization: Bearer <token>". Payloads are never shown unless
--show-payloads lets an authenticated user reveal one job's payload at a time
(not allowed with --read-only). SIGINT or SIGTERM shuts down gracefully.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "address to listen on")
	fl.BoolVar(&f.readOnly, "read-only", false, "hide and refuse every action (pause, resume, cancel, replay, purge)")
	fl.BoolVar(&f.showPayloads, "show-payloads", false, "let authenticated users reveal a job's payload (personal data; logged)")
	fl.StringVar(&f.prefix, "prefix", "", "URL path prefix to serve under, e.g. /skiplock (for a reverse proxy)")
	return cmd
}

// dashboardOptions reads the authentication from the environment.
func dashboardOptions(readOnly, showPayloads bool, prefix string, log *slog.Logger) dashboard.Options {
	return dashboard.Options{
		Schema:       g.schema,
		Prefix:       prefix,
		ReadOnly:     readOnly,
		ShowPayloads: showPayloads,
		User:         os.Getenv("SKIPLOCK_DASHBOARD_USER"),
		Password:     os.Getenv("SKIPLOCK_DASHBOARD_PASSWORD"),
		Token:        os.Getenv("SKIPLOCK_DASHBOARD_TOKEN"),
		Logger:       log,
	}
}

func runServe(cmd *cobra.Command, f serveFlags) error {
	if f.readOnly && f.showPayloads {
		return usageError("--show-payloads: not allowed with --read-only (a read-only dashboard never reveals payloads)")
	}
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	log := logger(stderr)
	opts := dashboardOptions(f.readOnly, f.showPayloads, f.prefix, log)
	if (opts.User == "") != (opts.Password == "") {
		return usageError("set both SKIPLOCK_DASHBOARD_USER and SKIPLOCK_DASHBOARD_PASSWORD, or neither")
	}
	pool, err := connect(ctx, 10)
	if err != nil {
		return err
	}
	defer pool.Close()
	url, stop, failed, err := startDashboard(pool, f.httpAddr, opts)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, "serve: dashboard on", url)
	select {
	case <-ctx.Done():
		fmt.Fprintln(stderr, "serve: shutting down")
		stop()
		return nil
	case err := <-failed:
		stop()
		return fmt.Errorf("serve: the HTTP server stopped: %w", err)
	}
}

// startDashboard listens on addr and serves the dashboard with /metrics; it
// returns the dashboard's URL, a function that drains the server (at most
// 10 s) and stops the dashboard's background work, and a channel that gets
// the error should the server stop on its own. It warns when the dashboard
// listens beyond loopback without authentication.
func startDashboard(pool *pgxpool.Pool, addr string, opts dashboard.Options) (string, func(), <-chan error, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Metrics = metrics.Handler(pool, opts.Schema)
	h, err := dashboard.New(pool, opts)
	if err != nil {
		return "", nil, nil, usageError("%v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = h.(*dashboard.Dashboard).Close()
		return "", nil, nil, fmt.Errorf("serve: %w", err)
	}
	if opts.User == "" && opts.Token == "" && !isLoopback(addr) {
		opts.Logger.Warn("serve: the dashboard is listening beyond loopback without authentication; " +
			"set SKIPLOCK_DASHBOARD_USER and SKIPLOCK_DASHBOARD_PASSWORD (or --read-only)")
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
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

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
