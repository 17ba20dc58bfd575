package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
)

// startDevDashboard serves the dashboard for `skiplock dev` and prints its
// URL; it returns a function that shuts it down. Payloads may be revealed
// only on the throwaway cluster dev started itself, whose payloads are the
// demo's; on a configured DATABASE_URL they stay hidden, as in `skiplock
// serve` without --show-payloads. SKIPLOCK_DASHBOARD_* authentication
// applies as in `skiplock serve`.
func startDevDashboard(pool *pgxpool.Pool, addr string, throwaway bool, log *slog.Logger) (func(), error) {
	url, stop, _, err := startDashboard(pool, addr, dashboardOptions(false, throwaway, "", log))
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "dev: dashboard on", url)
	return stop, nil
}
