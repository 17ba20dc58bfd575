package maintenance

import (
	"testing"

	"go.uber.org/goleak"
)

// The services start goroutines: none may outlive its Stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
