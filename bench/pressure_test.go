package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestPressureOptionsValidate(t *testing.T) {
	require.NoError(t, PressureOptions{}.Validate(), "defaults are valid")
	d := PressureOptions{}.withDefaults()
	require.Equal(t, ScenarioAll, d.Scenario)
	require.Equal(t, 2000, d.Rate)
	require.Equal(t, 256, d.PayloadBytes)
	require.Equal(t, 32, d.Workers)
	require.Equal(t, time.Millisecond, d.HandlerTime)
	require.Equal(t, []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second, 90 * time.Second},
		[]time.Duration{d.Warmup, d.Clean, d.Stress, d.Recovery})

	bad := []struct {
		o   PressureOptions
		opt string
	}{
		{PressureOptions{Scenario: "idle"}, "pressure"},
		{PressureOptions{Rate: -1}, "rate"},
		{PressureOptions{PayloadBytes: 10}, "payload-bytes"},
		{PressureOptions{Workers: -1}, "workers"},
		{PressureOptions{Batch: 5000}, "batch"},
		{PressureOptions{HandlerTime: -time.Second}, "handler-time"},
		{PressureOptions{Stress: -time.Second}, "stress"},
		{PressureOptions{PinDuration: -time.Second}, "pin-duration"},
		{PressureOptions{OverloadFactor: -2}, "overload-factor"},
		{PressureOptions{Readers: 100}, "readers"},
		{PressureOptions{Tenants: -1}, "tenants"},
		{PressureOptions{TenantCap: 1001}, "tenant-cap"},
		{PressureOptions{Schema: "no such"}, "schema"},
	}
	for _, b := range bad {
		var oe *OptionError
		require.True(t, errors.As(b.o.Validate(), &oe), "%+v", b.o)
		require.Equal(t, b.opt, oe.Option)
	}
	ps := PressureOptions{Clean: -1, PinDuration: time.Minute}.withDefaults().phases(ScenarioIdleTx)
	require.Len(t, ps, 3, "a negative clean phase is skipped")
	require.Equal(t, time.Minute, ps[1].planned, "the pin duration is the idle-tx stress phase")
}

// TestPressureEndToEnd runs every scenario with phases of a second or two
// and checks the report is measured and consistent, and that nothing offered
// is lost. It asserts no speed.
func TestPressureEndToEnd(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	var progress, tl bytes.Buffer
	rep, err := RunPressure(ctx, db.Pool, PressureOptions{Rate: 300, Workers: 8, Batch: 10,
		Warmup: time.Second, Clean: time.Second, Stress: 2 * time.Second, Recovery: time.Second,
		Progress: &progress, Timeline: &tl})
	require.NoError(t, err, progress.String())
	require.Len(t, rep.Scenarios, 4)
	for i, s := range rep.Scenarios {
		require.Equal(t, Scenarios[i], s.Scenario)
		require.Len(t, s.Phases, 4)
		require.Positive(t, s.Offered, s.Scenario)
		require.Zero(t, s.Lost, "%s: every job offered finished", s.Scenario)
		require.Equal(t, s.Offered, s.Completed+s.DeadLettered, s.Scenario)
		var offered, completed, pickups, samples int64
		for _, p := range s.Phases {
			require.Positive(t, p.Seconds, p.Phase)
			require.LessOrEqual(t, p.Completed, s.Offered)
			require.GreaterOrEqual(t, p.PickupP99MS, p.PickupP50MS, "%s %s", s.Scenario, p.Phase)
			require.GreaterOrEqual(t, p.PickupMaxMS, p.PickupP99MS)
			require.GreaterOrEqual(t, p.BacklogMax, p.BacklogAtEnd)
			require.GreaterOrEqual(t, p.PctOfOffered, 0.0)
			require.Equal(t, p.Phase == "stress", p.StressorRunning)
			offered += p.Offered
			completed += p.Completed
			pickups += p.Pickups
			samples += p.TableSamples
			if p.TableSamples > 0 {
				require.Positive(t, p.TableBytesMax)
				require.GreaterOrEqual(t, p.TotalBytesMax, p.TableBytesMax)
			}
		}
		require.LessOrEqual(t, offered, s.Offered)
		require.LessOrEqual(t, completed, s.Offered, "nothing completes that was not offered")
		require.Positive(t, pickups)
		require.LessOrEqual(t, pickups, s.Completed+s.DeadLettered)
		require.Positive(t, samples, "the jobs table was sampled")
		require.Equal(t, s.Phases[2].Phase, "stress")
		switch s.Scenario {
		case ScenarioIdleTx:
			require.Positive(t, s.PinnedXid)
		case ScenarioRRReaders:
			require.Positive(t, s.ReaderScans)
		case ScenarioOverload:
			require.Equal(t, 450.0, s.Phases[2].TargetPerS)
		}
		if s.DrainSeconds != nil {
			require.GreaterOrEqual(t, *s.DrainSeconds, 0.0)
		}
	}

	sc := bufio.NewScanner(&tl)
	lines := 0
	for sc.Scan() {
		var p TimelinePoint
		require.NoError(t, json.Unmarshal(sc.Bytes(), &p))
		require.NotEmpty(t, p.Scenario)
		require.GreaterOrEqual(t, p.Offered, p.Completed)
		lines++
	}
	require.GreaterOrEqual(t, lines, 8, "about one timeline line per second")

	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM skiplock.jobs)
		+ (SELECT count(*) FROM skiplock.jobs_done) + (SELECT count(*) FROM skiplock.workers)`).Scan(&left))
	require.Zero(t, left, "the suite cleans up after itself")
	var stressors int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name LIKE 'skiplock-pressure-%'`).Scan(&stressors))
	require.Zero(t, stressors, "the stressors' connections are closed")
}

// TestPressureOnTenantCappedPool runs the idle-tx scenario with the offered
// jobs on tenants and a tenant-capped pool: nothing offered is lost, and the
// report says how it ran. It asserts no speed.
func TestPressureOnTenantCappedPool(t *testing.T) {
	db := dbtest.New(t)
	var progress bytes.Buffer
	rep, err := RunPressure(context.Background(), db.Pool, PressureOptions{Scenario: ScenarioIdleTx, Rate: 300,
		Workers: 8, Batch: 10, Tenants: 7, TenantCap: 2, Warmup: time.Second, Clean: -1, Stress: 2 * time.Second,
		Recovery: time.Second, Progress: &progress})
	require.NoError(t, err, progress.String())
	require.Equal(t, 7, rep.Tenants)
	require.Equal(t, 2, rep.TenantCap)
	require.Len(t, rep.Scenarios, 1)
	s := rep.Scenarios[0]
	require.Positive(t, s.Offered)
	require.Zero(t, s.Lost, "every job offered finished")
	require.Equal(t, s.Offered, s.Completed+s.DeadLettered)
}
