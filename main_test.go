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
