package skiplock_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// Client, Runner, listener and service must be fully stopped by Stop.
// A client's Wait loop lingers a few seconds after its last wait (with its
// LISTEN connection) and then ends by itself: the check waits for that
// first, so such a loop that never ended is still a leak.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(lingerThenRun{m})
}

type lingerThenRun struct{ m *testing.M }

func (l lingerThenRun) Run() int {
	code := l.m.Run()
	for deadline := time.Now().Add(15 * time.Second); waitsLinger() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	return code
}

// waitsLinger reports whether a client's Wait loop runs (lingering, or
// closing its LISTEN subscription).
func waitsLinger() bool {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return strings.Contains(string(buf[:n]), "skiplock.(*waiters).loop")
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
