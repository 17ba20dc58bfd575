package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// InvalidField reads the field out of the SQL functions' validation errors
// only: SQLSTATE 22023 with "skiplock: FIELD: MESSAGE", wrapped or not.
func TestInvalidField(t *testing.T) {
	for _, tc := range []struct {
		err        error
		field, msg string
		ok         bool
	}{
		{err: &pgconn.PgError{Code: "22023", Message: "skiplock: queue: must not be empty"}, field: "queue", msg: "must not be empty", ok: true},
		{err: fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "22023", Message: "skiplock: id: no workflow 7"}), field: "id", msg: "no workflow 7", ok: true},
		{err: &pgconn.PgError{Code: "22023", Message: "skiplock: no field here"}},
		{err: &pgconn.PgError{Code: "22023", Message: "queue: must not be empty"}},
		{err: &pgconn.PgError{Code: "23505", Message: "skiplock: queue: must not be empty"}},
		{err: errors.New("skiplock: queue: must not be empty")},
	} {
		field, msg, ok := InvalidField(tc.err)
		require.Equal(t, tc.ok, ok, tc.err)
		require.Equal(t, tc.field, field, tc.err)
		require.Equal(t, tc.msg, msg, tc.err)
	}
}
