package skiplock

import (
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ParsePoolConfig parses a connection string like pgxpool.ParseConfig but
// picks a statement mode that works both on a direct connection and
// through a transaction-mode pooler such as PgBouncer, so the URL users
// already have works unchanged either way.
//
// pgx's default mode prepares named statements ("stmtcache_…") once per
// connection; a transaction-mode pooler lends each transaction whichever
// server session is free, so those names collide (SQLSTATE 42P05) or are
// missing there. Unless the string sets default_query_exec_mode itself
// (which is honoured as given), ParsePoolConfig uses
// pgx.QueryExecModeCacheDescribe instead: every statement is an unnamed
// prepared statement sent with its Bind and Execute in one round trip, and
// only its parameter and result types are cached per connection. The cost
// on skiplock's hot path is measured in docs/operations.md (PgBouncer).
func ParsePoolConfig(connString string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(connString, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	return cfg, nil
}
