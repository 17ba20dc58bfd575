package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// tokenTracer makes every lease write of this process say, to the audit
// trigger of test/faults, which lease token it presented for each job: the
// checker then fences per lease token, not only per process, so a stale
// write from this very process under an older lease is caught (as a build
// without the fence would make).
//
// Before a statement (or a batch) that carries (job id, lease token) pairs
// reaches the connection, the tracer sets the session variable
// skiplock_test.presented to {md5(statement text): {job id: token}}, on the
// same connection and outside the library's own statement. The trigger
// looks up md5(current_query()) in it, so a value left over from an earlier
// statement is never taken for another statement's. The tracer runs while
// the connection is idle (pgx calls TraceQueryStart and TraceBatchStart
// before it sends anything); if setting the variable fails, the connection
// is broken or the context done, and the statement that follows fails too.
type tokenTracer struct{}

// The shapes of the lease writes in internal/store/sql/lease.sql: arrays of
// ids and tokens as $1 and $2, or one id and one token (CompleteTx).
var (
	batchLeaseWrite = regexp.MustCompile(`unnest\(\$1::bigint\[\], \$2::bigint\[\]`)
	oneLeaseWrite   = regexp.MustCompile(`j\.id = \$1 AND \(?j\.lease_token = \$2`)
)

// presentedTokens returns the job id -> token pairs a statement carries,
// or nil when it is not a lease write.
func presentedTokens(sql string, args []any) map[string]int64 {
	if len(args) < 2 {
		return nil
	}
	switch {
	case batchLeaseWrite.MatchString(sql):
		ids, ok1 := args[0].([]int64)
		tokens, ok2 := args[1].([]int64)
		if !ok1 || !ok2 || len(ids) != len(tokens) {
			return nil
		}
		m := make(map[string]int64, len(ids))
		for i, id := range ids {
			m[strconv.FormatInt(id, 10)] = tokens[i]
		}
		return m
	case oneLeaseWrite.MatchString(sql):
		id, ok1 := args[0].(int64)
		token, ok2 := args[1].(int64)
		if !ok1 || !ok2 {
			return nil
		}
		return map[string]int64{strconv.FormatInt(id, 10): token}
	}
	return nil
}

func statementKey(sql string) string {
	sum := md5.Sum([]byte(sql))
	return hex.EncodeToString(sum[:])
}

// present sets the session variable for the statements in m.
func present(ctx context.Context, conn *pgx.Conn, m map[string]map[string]int64) {
	if len(m) == 0 {
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	rr := conn.PgConn().ExecParams(ctx, "SELECT set_config('skiplock_test.presented', $1, false)",
		[][]byte{b}, nil, nil, nil)
	_, _ = rr.Close()
}

// TraceQueryStart implements pgx.QueryTracer.
func (tokenTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if t := presentedTokens(d.SQL, d.Args); t != nil {
		present(ctx, conn, map[string]map[string]int64{statementKey(d.SQL): t})
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (tokenTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer: the completer writes
// completions, retries and dead letters as one batch.
func (tokenTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	m := map[string]map[string]int64{}
	for _, q := range d.Batch.QueuedQueries {
		if t := presentedTokens(q.SQL, q.Arguments); t != nil {
			k := statementKey(q.SQL)
			if m[k] == nil {
				m[k] = t
				continue
			}
			for id, tok := range t {
				m[k][id] = tok
			}
		}
	}
	present(ctx, conn, m)
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (tokenTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (tokenTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
