package metrics

import (
	"testing"

	"go.uber.org/goleak"
)

// The client in the tests starts goroutines: none may outlive its Stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
