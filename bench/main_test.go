package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// A run starts a client, its pool and the WAL watcher's sampler: none may
// outlive the run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
