package store

import (
	"context"
	"time"
)

// ExplainRow is one row of job_explain (explain.sql): a reason that holds a
// ready job, or its 'position' row. Which fields a reason fills is listed
// with the statement.
type ExplainRow struct {
	What    string
	Name    *string
	Key     *string
	N       *int64
	Cap     *int64
	At      *time.Time
	Holders []int64
}

// JobExplain returns why the ready job id is not running: no rows when it
// is not ready. live is how recently a worker must have heartbeaten to
// count as live.
func (s *Store) JobExplain(ctx context.Context, db DBTX, id int64, live time.Duration) ([]ExplainRow, error) {
	rows, err := db.Query(ctx, s.SQL("job_explain"), id, live.Microseconds())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ExplainRow
	for rows.Next() {
		var r ExplainRow
		if err := rows.Scan(&r.What, &r.Name, &r.Key, &r.N, &r.Cap, &r.At, &r.Holders); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// TaskExplainRow is a workflow task as task_explain reads it: its state,
// its job (once enqueued) and the parents it still waits for.
type TaskExplainRow struct {
	WorkflowID  int64
	Name        string
	State       string
	JobID       *int64
	Queue, Kind string
	WaitingIDs  []int64
	WaitingFor  []string
}

// TaskExplain reads the workflow task id; found is false when there is none.
func (s *Store) TaskExplain(ctx context.Context, db DBTX, id int64) (row TaskExplainRow, found bool, err error) {
	err = db.QueryRow(ctx, s.SQL("task_explain"), id).Scan(&row.WorkflowID, &row.Name, &row.State, &row.JobID,
		&row.Queue, &row.Kind, &row.WaitingIDs, &row.WaitingFor)
	if isNoRows(err) {
		return row, false, nil
	}
	return row, err == nil, err
}
