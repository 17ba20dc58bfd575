package skiplock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/store"
)

// ParsePoolConfig parses a connection string like pgxpool.ParseConfig and
// picks the statement mode for where it leads, so the URL users already
// have works unchanged both on a direct connection and through a
// transaction-mode pooler such as PgBouncer.
//
// pgx's default mode prepares named statements ("stmtcache_…") once per
// connection; a transaction-mode pooler lends each transaction whichever
// server session is free, so those names collide there (SQLSTATE 42P05) or
// are missing. Unless the string sets default_query_exec_mode itself (which
// is honoured as given, without connecting), ParsePoolConfig opens one
// connection and checks whether the backend serving a statement is the one
// the connection was given at startup. Directly it is, and pgx's default
// stays (it is the fastest: the claim is planned once per connection).
// Through a pooler it is not, and the mode becomes
// pgx.QueryExecModeCacheDescribe: every statement an unnamed prepared
// statement sent with its Bind and Execute in one round trip, only its
// parameter and result types cached per connection. docs/operations.md
// (PgBouncer) has the measured cost of each mode.
func ParsePoolConfig(ctx context.Context, connString string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	if strings.Contains(connString, "default_query_exec_mode") {
		return cfg, nil
	}
	pooled, err := behindPooler(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, err
	}
	if pooled {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	return cfg, nil
}

// behindPooler connects once and reports whether the connection goes
// through a pooler. Errors never include the connection string.
func behindPooler(ctx context.Context, cc *pgx.ConnConfig) (bool, error) {
	cc = cc.Copy()
	cc.RuntimeParams["application_name"] = "skiplock-probe"
	if cc.ConnectTimeout == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, fmt.Errorf("skiplock: connect to %s:%d/%s: %w", cc.Host, cc.Port, cc.Database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	direct, err := store.New("skiplock").DirectSession(ctx, conn)
	if err != nil {
		return false, fmt.Errorf("skiplock: checking for a connection pooler: %w", err)
	}
	return !direct, nil
}
