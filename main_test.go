package skiplock_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// Client, Runner, listener and service must be fully stopped by Stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// skipInShort leaves a test that runs for seconds of wall time (rate
// windows, reaper turns, aging passes) out of `make test-fast` (-short);
// `make test` still runs it.
func skipInShort(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s; make test runs it", why)
	}
}
