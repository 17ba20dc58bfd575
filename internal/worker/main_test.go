package worker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// Runner a test starts must be stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
