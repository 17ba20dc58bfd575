package store

import (
	"errors"
	"fmt"

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
