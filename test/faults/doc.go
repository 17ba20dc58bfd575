// Package faults holds skiplock's fault-injection tests: real worker
// processes killed with SIGKILL, paused with SIGSTOP past their lease,
// drained with SIGTERM; a PostgreSQL server crashed and restarted; the
// listener's and the pool's backends terminated; poison jobs that panic or
// kill their own process; enqueues rolled back or cut off mid-transaction.
// After each fault heals and the queue drains, one checker verifies the
// invariants of PRODUCT §4 from an audit trail kept by triggers and from
// the runs table the workers write. See docs/reliability.md.
//
// The package has no non-test code; `go test ./test/faults/` runs it.
package faults
