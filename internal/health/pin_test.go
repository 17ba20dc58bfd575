package health_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/store"
)

// holdXid opens a connection named app on url and leaves it idle in a
// transaction that took an xid, then runs a last statement with literals.
func holdXid(t *testing.T, url, app string) (pid int) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	_, err = tx.Exec(ctx, `SELECT txid_current()`)
	require.NoError(t, err)
	// The last statement carries a literal that must never be shown.
	_, err = tx.Exec(ctx, `/* report */ SELECT length('pii-secret-payload') + 42`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	return pid
}

func TestDoctorNamesThePinAndItsCost(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	// A live worker whose claim p99 is eight times its baseline.
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.workers (id, hostname, pid, claim_p99_ms, claim_p99_baseline_ms)
		VALUES ('w1', 'h', 1, 20, 2.5)`)
	require.NoError(t, err)

	pid := holdXid(t, db.URL, "nightly-report")
	checks, err := health.DoctorWith(ctx, db.Pool, db.Schema, health.DoctorOptions{XactWarn: time.Millisecond, XactFail: time.Hour})
	require.NoError(t, err)
	var c health.Check
	for _, x := range checks {
		if x.Name == "xmin_horizon" {
			c = x
		}
	}
	require.Equal(t, health.StatusWarn, c.Status, c.Figure)
	require.NotNil(t, c.Pin)
	h := c.Pin.Holder
	require.NotNil(t, h)
	if h.PID == pid { // another test's older transaction may be the oldest
		require.Equal(t, "nightly-report", h.Application)
		require.Equal(t, "idle in transaction", h.State)
		require.Equal(t, "client backend", h.BackendType)
		require.False(t, h.OtherDatabase)
		require.Equal(t, "SELECT length(", h.Query, "the statement is cut before its first literal")
		require.Contains(t, c.Figure, "nightly-report")
	}
	require.InDelta(t, 20, *c.Pin.Cost.ClaimP99MS, 1e-9)
	require.InDelta(t, 2.5, *c.Pin.Cost.BaselineMS, 1e-9)
	require.InDelta(t, 8, c.Pin.Cost.Ratio, 1e-9)
	require.Equal(t, 1, c.Pin.Cost.LiveWorkers)
	require.Contains(t, c.Figure, "claim p99 20.0 ms against a 2.5 ms baseline (8.0×)")
	b, err := json.Marshal(checks)
	require.NoError(t, err)
	require.NotContains(t, string(b), "pii-secret", "never a literal of the holder's statement")

	hs, err := health.HorizonHolders(ctx, db.Pool, db.Schema, 50)
	require.NoError(t, err)
	var mine *health.HorizonHolder
	for i := range hs {
		if hs[i].PID == pid {
			mine = &hs[i]
		}
	}
	require.NotNil(t, mine, "the held transaction is named")
	require.Greater(t, mine.XminAgeXIDs, int64(-1))
	require.Greater(t, mine.XactAgeSeconds, 0.0)

	p, err := health.PinNow(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.NotNil(t, p.Holder)
	require.GreaterOrEqual(t, p.Holders, 1)
	require.Positive(t, p.Age())
}

// An xid held in another database is in every snapshot on the server, so it
// pins this database's horizon too: it is listed, marked as such.
func TestHorizonHoldersOtherDatabase(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	other := dbtest.New(t)
	pid := holdXid(t, other.URL, "elsewhere")
	hs, err := health.HorizonHolders(context.Background(), db.Pool, db.Schema, 100)
	require.NoError(t, err)
	for _, h := range hs {
		if h.PID == pid {
			require.True(t, h.OtherDatabase)
			require.Contains(t, h.Who(), "database ")
			return
		}
	}
	t.Fatalf("the other database's xid holder is not listed: %+v", hs)
}

// The worker beat records the claim's baseline while nothing pins the
// horizon for 30 s, and leaves it alone while something does.
func TestBeatRecordsClaimBaseline(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New(db.Schema)
	beat := func(p99 float64) {
		require.NoError(t, st.BeatWorker(ctx, db.Pool, store.WorkerBeat{ID: "w", Hostname: "h", PID: 1, Queues: []string{"q"}, ClaimP99MS: &p99}))
	}
	var pinnedElsewhere bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity AS a
		WHERE a.xact_start < now() - interval '25 seconds' AND a.backend_xid IS NOT NULL)`).Scan(&pinnedElsewhere))
	beat(4)
	beat(4)
	beat(14)
	var base *float64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT claim_p99_baseline_ms FROM skiplock.workers WHERE id = 'w'`).Scan(&base))
	if pinnedElsewhere {
		require.Nil(t, base, "another session on the server pins the horizon: the baseline is left alone")
		return
	}
	require.NotNil(t, base)
	require.InDelta(t, 0.9*4+0.1*14, *base, 1e-9, "a moving average of the unpinned beats")
}
