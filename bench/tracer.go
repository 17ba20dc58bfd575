package bench

import (
	"strings"
	"sync"

	"github.com/skiplock/skiplock/bench/measure"
	"github.com/skiplock/skiplock/internal/store"
)

// tracedStatements are the store statements worth naming in a report.
var tracedStatements = []string{"claim", "claim_capped", "claim_capped_after", "claim_limited", "complete_delete", "complete_archive", "heartbeat",
	"reschedule", "dead_letter", "reap", "worker_beat", "enqueue", "notify_queues", "workflow_create", "step_get", "step_put", "step_put_many"}

// Statement is one statement's count in a Result.
type Statement = measure.Statement

// newTracer counts the runtime's round trips by store statement name and
// times every claim. It is installed on the benchmark's own pool only.
func newTracer(st *store.Store) *measure.Tracer {
	names := map[string]string{}
	for _, n := range tracedStatements {
		names[st.SQL(n)] = n
	}
	// Names of other statements, worked out once each: lower-casing and
	// splitting a whole statement for every execution was 9 % of the
	// benchmark process's CPU in a no-op drain.
	var others sync.Map
	name := func(sql string) string {
		if n, ok := names[sql]; ok {
			return n
		}
		if n, ok := others.Load(sql); ok {
			return n.(string)
		}
		n := otherName(sql)
		others.Store(sql, n)
		return n
	}
	return measure.NewTracer(name, func(n string) bool {
		return n == "claim" || n == "claim_capped" || n == "claim_capped_after" || n == "claim_limited"
	})
}

// otherName names a statement the tracer does not know by its first word.
func otherName(sql string) string {
	s := strings.ToLower(strings.TrimSpace(sql))
	switch {
	case s == "begin" || strings.HasPrefix(s, "begin "):
		return "begin"
	case s == "commit":
		return "commit"
	case s == "rollback":
		return "rollback"
	}
	if f := strings.Fields(s); len(f) > 0 {
		return "other:" + f[0]
	}
	return "other"
}
