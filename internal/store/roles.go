package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// GrantRole gives role the privileges of kind (grant_role) and returns the
// statements that ran, in order.
func (s *Store) GrantRole(ctx context.Context, db DBTX, kind, role string) ([]string, error) {
	rows, err := db.Query(ctx, s.SQL("grant_role"), kind, role)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
