package dbtest

import (
	"bytes"
	"sync"
)

// LogBuffer is a log sink (or a process's stderr) that goroutines write and
// a test reads at once: slog.NewTextHandler(&dbtest.LogBuffer{}, nil).
type LogBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
