package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SealedRow is a ready job whose payload is sealed.
type SealedRow struct {
	ID      int64
	Tenant  string
	Payload string
}

// SealedReadyBatch locks and returns up to limit ready jobs with sealed
// payloads after id after (sealed_ready_batch); db is the batch's
// transaction.
func (s *Store) SealedReadyBatch(ctx context.Context, db DBTX, after int64, limit int) ([]SealedRow, error) {
	rows, err := db.Query(ctx, s.SQL("sealed_ready_batch"), after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SealedRow, error) {
		var x SealedRow
		err := r.Scan(&x.ID, &x.Tenant, &x.Payload)
		return x, err
	})
}

// ResealPayload writes a ready job's re-sealed payload (reseal_payload).
func (s *Store) ResealPayload(ctx context.Context, db DBTX, id int64, payload string) error {
	_, err := db.Exec(ctx, s.SQL("reseal_payload"), id, payload)
	return err
}
