package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// TestReplicaCollector: given a primary (a replica URL that reaches one
// after a failover) it reports in_recovery 0 and no lag; given a replica
// that does not answer, up 0 and nothing else. The standby case is tested
// against a real standby in cmd/skiplock (TestReplicaURL).
func TestReplicaCollector(t *testing.T) {
	db := dbtest.New(t)
	c := NewReplicaCollector(db.Pool, db.Schema)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP skiplock_replica_in_recovery 1 while the replica is a standby (0: it is a primary).
# TYPE skiplock_replica_in_recovery gauge
skiplock_replica_in_recovery 0
# HELP skiplock_replica_lag_seconds How far the replica's data is behind the primary (0 when caught up).
# TYPE skiplock_replica_lag_seconds gauge
skiplock_replica_lag_seconds 0
# HELP skiplock_replica_streaming 1 while the replica's WAL receiver runs.
# TYPE skiplock_replica_streaming gauge
skiplock_replica_streaming 0
# HELP skiplock_replica_up 1 when the replica answered the last scrape.
# TYPE skiplock_replica_up gauge
skiplock_replica_up 1
`)))

	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	dead, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer dead.Close()
	require.NoError(t, testutil.CollectAndCompare(NewReplicaCollector(dead, ""), strings.NewReader(`
# HELP skiplock_replica_up 1 when the replica answered the last scrape.
# TYPE skiplock_replica_up gauge
skiplock_replica_up 0
`)))
}

// TestHandlerForDatabases: two databases' series side by side, each with
// its database label, the runtime collectors once.
func TestHandlerForDatabases(t *testing.T) {
	a, b := dbtest.New(t), dbtest.New(t)
	seed(t, a)
	h := HandlerForDatabases([]Database{{Name: "shard-a", Pool: a.Pool, Schema: a.Schema}, {Name: "shard-b", Pool: b.Pool}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	require.Contains(t, body, `skiplock_queue_jobs{database="shard-a",queue="mail",state="ready"} 3`)
	require.Contains(t, body, `skiplock_up{database="shard-a"} 1`)
	require.Contains(t, body, `skiplock_up{database="shard-b"} 1`)
	require.Contains(t, body, `skiplock_dead_letters{database="shard-b"} 0`)
	require.Equal(t, 1, strings.Count(body, "\ngo_goroutines "), "runtime collectors once, unlabelled")
	require.NotContains(t, body, secret)
}
