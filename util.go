package skiplock

import (
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
)

func isNoRows(err error) bool {
	return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows)
}
