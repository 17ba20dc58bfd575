package skiplock_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// The workflow functions that write in the caller's transaction take a Tx,
// so a database/sql transaction (SQLTx) works as a pgx one does: a task
// adds its fan-out, sets its output and completes in one *sql.Tx, and a
// signal sent in one exists only once it commits. The first run rolls its
// transaction back: nothing it added or set survives. SetOutputTx leaves
// the transaction's planner settings as it found them (as CompleteTx does).
func TestWorkflowFunctionsInADatabaseSQLTransaction(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	sqlDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	c := newClient(t, db.Pool, fastConfig())

	var mu sync.Mutex
	runs := map[string]int{}
	var seqscan []string // enable_seqscan inside the transaction after SetOutputTx
	var read int         // the split's output, as the leaf read it
	var payload string   // what the waiter received
	require.NoError(t, skiplock.Handle(c, "step", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		mu.Lock()
		runs[j.Args.Name]++
		mu.Unlock()
		switch j.Args.Name {
		case "split":
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // a no-op after Commit
			leaf := skiplock.Task{Name: "leaf", Kind: "step", Args: stepArgs{Name: "leaf"}, DependsOn: []string{"split"}}
			if err := skiplock.AddTasksTx(ctx, skiplock.SQLTx(tx), leaf); err != nil {
				return err
			}
			if err := skiplock.SetOutputTx(ctx, skiplock.SQLTx(tx), 42); err != nil {
				return err
			}
			var s string
			if err := tx.QueryRowContext(ctx, "SHOW enable_seqscan").Scan(&s); err != nil {
				return err
			}
			mu.Lock()
			seqscan = append(seqscan, s)
			mu.Unlock()
			if j.Attempt == 1 {
				return errors.New("roll back the first run") // the deferred Rollback
			}
			if err := skiplock.CompleteTx(ctx, c, skiplock.SQLTx(tx), j); err != nil {
				return err
			}
			return tx.Commit()
		case "leaf":
			v, err := skiplock.TaskOutput[int](ctx, "split")
			if err != nil {
				return err
			}
			mu.Lock()
			read = v
			mu.Unlock()
		case "waiter":
			p, err := skiplock.WaitSignal(ctx, "go", time.Minute)
			if err != nil {
				return err
			}
			mu.Lock()
			payload = string(p)
			mu.Unlock()
		}
		return nil
	}))
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "sqltx", Tasks: []skiplock.Task{
		{Name: "split", Kind: "step", Args: stepArgs{Name: "split"}},
		{Name: "waiter", Kind: "step", Args: stepArgs{Name: "waiter"}},
	}})
	require.NoError(t, err)

	// A signal sent in a database/sql transaction that rolls back does not
	// exist; the one committed is the one received.
	for _, commit := range []bool{false, true} {
		tx, err := sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = c.SignalSendTx(ctx, skiplock.SQLTx(tx), "go", skiplock.SignalTarget{WorkflowID: id}, map[string]bool{"committed": commit})
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
	}

	require.NoError(t, c.Start(ctx))
	st := waitWorkflow(t, c, id)
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, "completed", st.State)
	require.Equal(t, 3, st.Tasks, "the leaf was added once, by the run that committed")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, runs["split"])
	require.Equal(t, 1, runs["leaf"])
	require.Equal(t, 42, read)
	require.Equal(t, []string{"on", "on"}, seqscan, "SetOutputTx puts the caller's planner settings back")
	var got map[string]bool
	require.NoError(t, json.Unmarshal([]byte(payload), &got))
	require.Equal(t, map[string]bool{"committed": true}, got)
}
