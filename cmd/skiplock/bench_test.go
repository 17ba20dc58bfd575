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
