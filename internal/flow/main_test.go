package flow

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: Step's
// writer goroutine must end with its queue.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
