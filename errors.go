package skiplock

import (
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/internal/sentinel"
)

// ErrInvalidJob is the sentinel behind every validation failure of a job's
// parameters; the concrete error is a *FieldError naming the field.
var ErrInvalidJob = errors.New("skiplock: invalid job")

// ErrInvalidConfig is the sentinel behind every Config validation failure.
var ErrInvalidConfig = errors.New("skiplock: invalid config")

// ErrLeaseLost is returned when a write for a job is refused because this
// worker no longer holds the job's lease (it expired and another worker may
// own the job now). Nothing was written; a transaction it happened in must
// not commit. It is also the context.Cause of a handler's context cancelled
// because the heartbeat found the lease gone.
var ErrLeaseLost = sentinel.ErrLeaseLost

// FieldError reports one invalid field. It never carries the value of a
// payload, only what is wrong with it.
type FieldError struct {
	Field   string // e.g. "queue", "payload", "run_at", "Config.LeaseDuration"
	Message string
	base    error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Message) }

// Unwrap makes errors.Is(err, ErrInvalidJob) (or ErrInvalidConfig) work.
func (e *FieldError) Unwrap() error { return e.base }

func invalidJob(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...), base: ErrInvalidJob}
}

func invalidConfig(field, format string, args ...any) error {
	return &FieldError{Field: "Config." + field, Message: fmt.Sprintf(format, args...), base: ErrInvalidConfig}
}
