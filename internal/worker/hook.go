package worker

import "context"

// RunHook is a feature's one hook into each run of a handler. The root
// package's handler runner (runJob) calls BeginRun before the handler, and
// the HookedRun's methods while and after it runs, so that a feature that
// keeps state per run (the workflow engine in internal/flow: durable steps,
// timers, signal waits, workflow tasks) reaches the run without the core
// knowing the feature.
type RunHook interface {
	// BeginRun is called before the handler runs j; the handler gets the
	// context it returns (the hook finds its run there).
	BeginRun(ctx context.Context, j *Job) (context.Context, HookedRun)
}

// HookedRun is one run as its RunHook sees it.
type HookedRun interface {
	// BeforeCompleteTx is called before the handler completes its job in
	// its own transaction (CompleteTx): the hook's writes for the job must
	// be done before the job ends. Its error refuses the completion.
	BeforeCompleteTx() error
	// EndRun is called once, when the handler has returned, with the
	// Result so far (Err, CompletedTx and LeaseLostInTx set). It returns
	// that Result with the hook's part set: Err when the handler returned
	// nil but a write of the hook's for the job failed, and SnoozedTx.
	EndRun(res Result) Result
}
