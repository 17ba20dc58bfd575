package skiplock

import (
	"bytes"
	"sync"
)

// LogBuffer is a log sink that a client's goroutines write and a test
// reads at once (slog.NewTextHandler(&LogBuffer{}, nil)). Exported to this
// package's external tests only: it is defined in a test file.
type LogBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *LogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *LogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
