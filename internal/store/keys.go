package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SealedRow is a ready job whose payload is sealed, as stored: whole in
// Payload, or split (Payload its key id, Sealed its bytes; migration 24).
type SealedRow struct {
	ID      int64
	Tenant  string
	Payload string
	Sealed  []byte
}

// SealedReadyBatch locks and returns up to limit ready jobs (dead letters
// with dead) with sealed payloads after id after (sealed_ready_batch,
// sealed_dead_batch); db is the batch's transaction.
func (s *Store) SealedReadyBatch(ctx context.Context, db DBTX, dead bool, after int64, limit int) ([]SealedRow, error) {
	q := "sealed_ready_batch"
	if dead {
		q = "sealed_dead_batch"
	}
	rows, err := db.Query(ctx, s.SQL(q), after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SealedRow, error) {
		var x SealedRow
		err := r.Scan(&x.ID, &x.Tenant, &x.Payload, &x.Sealed)
		return x, err
	})
}

// ResealPayload writes a ready job's (a dead letter's with dead) re-sealed
// payload, split: payload the envelope's key id, sealed its ciphertext's
// bytes (reseal_payload, reseal_dead_payload).
func (s *Store) ResealPayload(ctx context.Context, db DBTX, dead bool, id int64, payload string, sealed []byte) error {
	q := "reseal_payload"
	if dead {
		q = "reseal_dead_payload"
	}
	_, err := db.Exec(ctx, s.SQL(q), id, payload, sealed)
	return err
}
