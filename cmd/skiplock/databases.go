package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// database is one of several --database-url a command reads: its pool and
// its label (host:port/name, never the URL).
type database struct {
	name string
	pool *pgxpool.Pool
}

// checkDistinctURLs refuses the same --database-url given twice.
func checkDistinctURLs(urls []string) error {
	seen := map[string]bool{}
	for _, u := range urls {
		if seen[u] {
			return usageError("--database-url: the same URL is given twice")
		}
		seen[u] = true
	}
	return nil
}

// connectDatabases connects to every URL (maxConns each), in order, and
// labels each database by databaseLabel; two URLs that reach the same
// host:port/name (as two users, say) get "#2", "#3" after the label so
// every label is distinct. closeAll closes every pool. On an error nothing
// stays open.
func connectDatabases(ctx context.Context, urls []string, maxConns int32) (dbs []database, closeAll func(), err error) {
	if err := checkDistinctURLs(urls); err != nil {
		return nil, nil, err
	}
	closeAll = func() {
		for _, d := range dbs {
			d.pool.Close()
		}
	}
	used := map[string]int{}
	for _, u := range urls {
		pool, err := connectTo(ctx, u, "--database-url", maxConns, nil)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		name := databaseLabel(pool)
		if used[name]++; used[name] > 1 {
			name = fmt.Sprintf("%s#%d", name, used[name])
		}
		dbs = append(dbs, database{name: name, pool: pool})
	}
	return dbs, closeAll, nil
}
