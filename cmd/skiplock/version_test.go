package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDescribeStamp(t *testing.T) {
	require.Equal(t, "v0.1.0 (commit 0123456789ab, 2026-12-01T09:00:00Z) go1.26.8",
		describeStamp("v0.1.0", "0123456789abcdef0123456789abcdef01234567", "2026-12-01T09:00:00Z", "go1.26.8"))
	require.Equal(t, "v0.1.0 go1.26.8", describeStamp("v0.1.0", "", "", "go1.26.8"))
}

// A release build's stamp wins over the build info, and --version prints it.
func TestVersionPrefersStamp(t *testing.T) {
	saved := [3]string{buildVersion, buildCommit, buildDate}
	t.Cleanup(func() { buildVersion, buildCommit, buildDate = saved[0], saved[1], saved[2] })
	buildVersion, buildCommit, buildDate = "v9.8.7", "fedcba9876543210", "2026-12-01T09:00:00Z"

	want := "v9.8.7 (commit fedcba987654, 2026-12-01T09:00:00Z) " + runtime.Version()
	require.Equal(t, want, version())
	code, out, stderr := runCLI(t, "--version")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "skiplock "+want, strings.TrimSpace(out))
}
