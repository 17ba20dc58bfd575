package health

import "context"

// TableSample is one reading of the hot table's size and vacuum debt.
type TableSample struct {
	// DeadTuples is pg_stat_user_tables.n_dead_tup.
	DeadTuples int64 `json:"dead_tuples"`
	// HeapBytes is the table's heap alone; TotalBytes adds its indexes and
	// TOAST.
	HeapBytes  int64 `json:"heap_bytes"`
	TotalBytes int64 `json:"total_bytes"`
	// Autovacuums is pg_stat_user_tables.autovacuum_count.
	Autovacuums int64 `json:"autovacuums"`
	// OtherXactSeconds is the age of the oldest transaction holding an xid
	// on the server, the pressure suite's stressors excepted: a pin the
	// suite did not make.
	OtherXactSeconds float64 `json:"other_xact_seconds"`
}

// JobsTable samples the hot table's dead tuples, sizes and autovacuum count
// from the statistics and the catalog (it never scans the table).
func JobsTable(ctx context.Context, db DBTX, schema string) (TableSample, error) {
	var s TableSample
	q, err := query(schema, "jobs_table_sample")
	if err != nil {
		return s, err
	}
	err = db.QueryRow(ctx, q).Scan(&s.DeadTuples, &s.HeapBytes, &s.TotalBytes, &s.Autovacuums, &s.OtherXactSeconds)
	return s, wrap("jobs table sample", err)
}

// PinHorizon takes a transaction id inside tx, so the xmin horizon stays
// pinned until tx ends: the pressure suite's idle-in-transaction stressor.
func PinHorizon(ctx context.Context, tx DBTX, schema string) (xid int64, err error) {
	q, err := query(schema, "pressure_pin_horizon")
	if err != nil {
		return 0, err
	}
	err = tx.QueryRow(ctx, q).Scan(&xid)
	return xid, wrap("pin horizon", err)
}

// ScanJobs reads the whole hot table once and returns its row count: the
// pressure suite's REPEATABLE READ reader runs it in a long transaction.
func ScanJobs(ctx context.Context, tx DBTX, schema string) (rows int64, err error) {
	q, err := query(schema, "pressure_scan_jobs")
	if err != nil {
		return 0, err
	}
	var kinds int64
	err = tx.QueryRow(ctx, q).Scan(&rows, &kinds)
	return rows, wrap("scan jobs", err)
}
