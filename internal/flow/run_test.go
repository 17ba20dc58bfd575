package flow

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// EndRun is the engine's part of a run's Result: a refused checkpoint fails
// a run that returned nil unless it completed in its own transaction, a
// handler's own error stands, and a signal wait that sent the job back to
// the table itself is reported as SnoozedTx. No database: the refused
// checkpoint is one the writer has answered already.
func TestEndRun(t *testing.T) {
	handlerErr := errors.New("the handler's error")
	for _, tc := range []struct {
		name    string
		refused bool // a checkpoint of the run was refused (the lease was lost)
		snoozed bool // a signal wait returned the job to the table
		in      worker.Result
		wantErr error // nil: none
	}{
		{name: "nothing to settle", in: worker.Result{}},
		{name: "refused checkpoint fails a nil return", refused: true, in: worker.Result{}, wantErr: worker.ErrLeaseLost},
		{name: "the handler's error stands", refused: true, in: worker.Result{Err: handlerErr}, wantErr: handlerErr},
		{name: "completed in its own transaction", refused: true, in: worker.Result{CompletedTx: true}},
		{name: "signal wait", snoozed: true, in: worker.Result{Err: handlerErr}, wantErr: handlerErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := &Run{engine: &Engine{}, id: 1, token: 7, worker: "w"}
			if tc.refused {
				w := &stepWrite{cp: store.StepCheckpoint{Lease: run.lease(), Name: "a"}, owner: &run.pending, done: make(chan struct{})}
				run.pending.add(w)
				run.pending.failed.Store(true)
				close(w.done) // answered: the lease was not held
			}
			run.snoozedTx.Store(tc.snoozed)
			out := run.EndRun(tc.in)
			if tc.wantErr == nil {
				require.NoError(t, out.Err)
			} else {
				require.ErrorIs(t, out.Err, tc.wantErr)
			}
			require.Equal(t, tc.snoozed, out.SnoozedTx)
			require.Equal(t, tc.in.CompletedTx, out.CompletedTx)
		})
	}
}
