package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated is returned (wrapped) when the schema lacks the objects a
// statement needs: it was never migrated, or not far enough. health's
// ErrNotMigrated is this same error.
var ErrNotMigrated = errors.New("the schema lacks the health views (run `skiplock migrate up`)")

// Annotate adds what (the operation, for people) to a statement's error and
// turns "relation, function or schema does not exist" into ErrNotMigrated,
// so callers can tell an unmigrated schema from a failure. nil stays nil.
func Annotate(what string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42883" || pe.Code == "3F000") {
		return fmt.Errorf("%s: %w (%s)", what, ErrNotMigrated, pe.Message)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// InvalidField reads the field and the message out of a validation error
// of skiplock's SQL functions (enqueue_job, add_tasks, signal, ...): SQLSTATE
// 22023 with a message "skiplock: FIELD: MESSAGE". ok is false for any
// other error.
func InvalidField(err error) (field, message string, ok bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22023" {
		return "", "", false
	}
	msg, found := strings.CutPrefix(pe.Message, "skiplock: ")
	if !found || msg == "" {
		return "", "", false
	}
	field, message, found = strings.Cut(msg, ":")
	if !found {
		return "", "", false
	}
	return field, strings.TrimLeft(message, " "), true
}
