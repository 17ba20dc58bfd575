package main

import (
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
)

// startDevDashboard serves the dashboard for `skiplock dev` and prints its
// URL on stderr; it returns a function that shuts it down. Payloads may be revealed
// only on the throwaway cluster dev started itself, whose payloads are the
// demo's, and, as everywhere, only to an authenticated user: with
// SKIPLOCK_DASHBOARD_* credentials set. On a configured DATABASE_URL they
// stay hidden, as in `skiplock serve` without --show-payloads.
// Authentication, the host check and the loopback rule apply as in
// `skiplock serve`.
func (g *globals) startDevDashboard(stderr io.Writer, pool *pgxpool.Pool, addr string, throwaway bool, log *slog.Logger) (func(), error) {
	opts := g.dashboardOptions(false, false, "", log)
	opts.ShowPayloads = throwaway && authConfigured(opts)
	url, stop, _, err := startDashboard(pool, addr, opts, nil, false)
	if err != nil {
		return nil, err
	}
	g.say(stderr, "dev: dashboard on "+url, slog.String("url", url))
	return stop, nil
}
