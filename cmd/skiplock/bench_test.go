package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/bench"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// TestBenchPressureCLI runs one short pressure scenario through the CLI and
// checks its usage errors name the flag.
func TestBenchPressureCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, out, stderr := runCLI(t, "bench", "--database-url", db.URL, "--pressure", "overload", "--rate", "200",
		"--workers", "4", "--warmup", "500ms", "--clean", "0", "--stress", "1s", "--recovery", "500ms", "--json")
	require.Equal(t, 0, code, stderr)
	var rep bench.PressureReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Scenarios, 1)
	s := rep.Scenarios[0]
	require.Equal(t, "overload", s.Scenario)
	require.Len(t, s.Phases, 3, "--clean 0 skips the clean phase")
	require.Zero(t, s.Lost)
	require.Contains(t, stderr, "pressure overload: stress phase")

	for _, c := range []struct{ args []string }{
		{[]string{"--pressure", "sometimes"}},
		{[]string{"--pressure", "clean", "--rate", "0"}},
		{[]string{"--pressure", "clean", "--stress", "-1s"}},
		{[]string{"--pressure", "clean", "--jobs", "10"}},
		{[]string{"--rate", "10"}},
		{[]string{"--pressure-timeline", "x"}},
	} {
		code, _, stderr := runCLI(t, append([]string{"bench", "--database-url", db.URL}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Regexp(t, `--(pressure|rate|stress|jobs|pressure-timeline)\b`, stderr)
	}
}

// TestBenchRepeatCLI runs the drain twice through `bench --repeat` and
// checks the report and the flags it refuses.
func TestBenchRepeatCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, out, stderr := runCLI(t, "bench", "--database-url", db.URL, "--jobs", "50", "--workers", "2", "--batch", "5",
		"--handler", "noop", "--repeat", "2", "--json")
	require.Equal(t, 0, code, stderr)
	var rep bench.Repeated
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Runs, 2)
	require.Greater(t, rep.JobsPerS.Min, 0.0)
	require.LessOrEqual(t, rep.JobsPerS.Min, rep.JobsPerS.Max)

	code, out, stderr = runCLI(t, "bench", "--database-url", db.URL, "--jobs", "20", "--workers", "2", "--batch", "5",
		"--handler", "noop", "--repeat", "2")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "jobs/s       min ")
	require.Contains(t, out, "(max/min ")

	for _, args := range [][]string{{"--repeat", "0"}, {"--repeat", "2", "--latency"}, {"--repeat", "2", "--cpuprofile", "x"}} {
		code, _, stderr := runCLI(t, append([]string{"bench", "--database-url", db.URL}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Regexp(t, `--(repeat|cpuprofile)\b`, stderr)
	}
}

// TestBenchReferenceCLI runs a drain beside the plain-SQL reference
// through `bench --reference` (once, and with --repeat: the ratios'
// spread) and checks the flags it refuses.
func TestBenchReferenceCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, out, stderr := runCLI(t, "bench", "--database-url", db.URL, "--jobs", "50", "--workers", "2", "--batch", "5",
		"--handler", "noop", "--reference", "1s", "--json")
	require.Equal(t, 0, code, stderr)
	var res bench.Result
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.NotNil(t, res.Reference)
	require.Positive(t, res.Reference.B10.JobsPerS)
	require.Positive(t, res.Reference.B50.JobsPerS)
	require.InDelta(t, res.JobsPerS/res.Reference.B10.JobsPerS, res.Reference.VsB10, 1e-9)

	code, out, stderr = runCLI(t, "bench", "--database-url", db.URL, "--jobs", "20", "--workers", "2", "--batch", "5",
		"--handler", "noop", "--repeat", "2", "--reference", "1s")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "against the plain-SQL reference run just before each drain")
	require.Contains(t, out, "÷ ref 10     min ")
	require.Contains(t, out, "ref 50 ÷ 10  min ")

	for _, args := range [][]string{{"--reference", "10ms"}, {"--reference", "1s", "--latency"},
		{"--reference", "1s", "--pressure", "clean"}, {"--reference", "1s", "--workflow", "fanout:2"}} {
		code, _, stderr := runCLI(t, append([]string{"bench", "--database-url", db.URL}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Regexp(t, `--reference\b`, stderr)
	}
}
