package flow

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// stepWriter is Step's group commit. One commit per step made a three-step
// handler cost three transactions besides its job's share of a batched
// claim and completion, and a Step that waited for its own commit made the
// handler wait for a round trip and a WAL flush per step. Instead, a Step
// queues its checkpoint and returns; one writer at a time (a goroutine that
// lives while the queue is not empty) writes what is queued in one
// statement (store.StepPutMany) and one commit, and every checkpoint queued
// meanwhile goes in the next. The run waits for its checkpoints where it
// must (runSteps.flush): before the job leaves the handler, and before any
// step that writes in a transaction of its own.
type stepWriter struct {
	mu     sync.Mutex
	busy   bool // a writer goroutine is running
	queue  []*stepWrite
	writes int // batches written (tests)
}

// stepWrite is one checkpoint on its way.
type stepWrite struct {
	cp    store.StepCheckpoint
	owner *runSteps     // the run that asked for it
	done  chan struct{} // closed: held, dup and err are set
	held  bool
	dup   bool
	err   error
	// withdrawn: taken off the queue before any write carried it, because
	// the run's completion supersedes it (runSteps.withdraw).
	withdrawn bool
}

// maxStepBatch bounds the checkpoints of one write.
const maxStepBatch = 500

// stepWriteTimeout bounds one write; it runs without the caller's context,
// whose cancellation must not fail the other callers' checkpoints.
const stepWriteTimeout = 30 * time.Second

// errEarlierStepUnwritten fails a checkpoint queued after one of the same
// run that was not written: a run's checkpoints are written in the order
// its steps returned, and none after one that failed.
var errEarlierStepUnwritten = errors.New("an earlier step's checkpoint was not written")

// submit queues cp for e's worker id (the one every run of e holds its
// leases under), notes it among owner's checkpoints on their way, and
// returns at once; the write's done closes when it has been written, or
// refused.
func (w *stepWriter) submit(ctx context.Context, e *Engine, cp store.StepCheckpoint, owner *runSteps) *stepWrite {
	r := &stepWrite{cp: cp, owner: owner, done: make(chan struct{})}
	owner.add(r)
	w.mu.Lock()
	w.queue = append(w.queue, r)
	start := !w.busy
	w.busy = true
	w.mu.Unlock()
	if start {
		go w.drain(context.WithoutCancel(ctx), e)
	}
	return r
}

// drain writes batches until the queue is empty.
func (w *stepWriter) drain(ctx context.Context, e *Engine) {
	for w.write(ctx, e) {
	}
}

// write writes the next batch: at most maxStepBatch of the queue's
// checkpoints, each (job, step) once (a second one waits for the next). It
// reports false, and ends the busy spell, when the queue was empty.
func (w *stepWriter) write(ctx context.Context, e *Engine) bool {
	w.mu.Lock()
	if len(w.queue) == 0 {
		w.busy = false
		w.mu.Unlock()
		return false
	}
	var batch, rest []*stepWrite
	type key struct {
		id   int64
		name string
	}
	seen := map[key]bool{}
	for _, r := range w.queue {
		k := key{r.cp.Lease.ID, r.cp.Name}
		switch {
		case r.owner.failed.Load():
			r.err = errEarlierStepUnwritten
			close(r.done)
		case len(batch) < maxStepBatch && !seen[k]:
			seen[k] = true
			batch = append(batch, r)
		default:
			rest = append(rest, r)
		}
	}
	w.queue = rest
	w.mu.Unlock()
	if len(batch) == 0 { // every one queued was refused
		return true
	}

	ctx, cancel := context.WithTimeout(ctx, stepWriteTimeout)
	defer cancel()
	settle := func(r *stepWrite) {
		if r.err != nil || !r.held || r.dup {
			r.owner.failed.Store(true)
		}
		close(r.done)
	}
	cps := make([]store.StepCheckpoint, len(batch))
	for i, r := range batch {
		cps[i] = r.cp
	}
	held, dup, err := e.store.StepPutMany(ctx, e.pool, e.worker, cps)
	if err != nil && len(batch) > 1 {
		// The batch failed as a whole: write each on its own, in order, so
		// that one checkpoint the database refuses fails only its own run.
		for _, r := range batch {
			if r.owner.failed.Load() {
				r.err = errEarlierStepUnwritten
			} else {
				_, r.held, r.err = e.store.StepPut(ctx, e.pool, r.cp.Lease, e.worker, r.cp.Name, r.cp.Output)
			}
			settle(r)
		}
	} else {
		for i, r := range batch {
			if err != nil {
				r.err = err
			} else {
				r.held, r.dup = held[i], dup[i]
			}
			settle(r)
		}
	}
	w.mu.Lock()
	w.writes++
	w.mu.Unlock()
	return true
}

// runSteps is one run's checkpoints on their way (Step's, through the
// engine's stepWriter).
type runSteps struct {
	mu      sync.Mutex
	pending []*stepWrite
	failed  atomic.Bool // a checkpoint of the run was not written: later ones are refused
}

// add notes a checkpoint of the run on its way.
func (s *runSteps) add(r *stepWrite) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, r)
}

// withdraw takes the run's checkpoints that no write has carried yet off
// w's queue. A run whose handler returned nil is about to complete, and the
// completion removes the job's checkpoints: writing them first is a commit
// spent on rows deleted a moment later. Should the completion not commit (a
// crash, a lost lease), the retry runs those steps again, as it runs a step
// whose checkpoint a crash kept from being written. The checkpoints a write
// carries already stay: flush waits for them.
func (s *runSteps) withdraw(w *stepWriter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.queue[:0]
	for _, r := range w.queue {
		if r.owner == s {
			r.withdrawn = true
			close(r.done)
			continue
		}
		kept = append(kept, r)
	}
	clear(w.queue[len(kept):])
	w.queue = kept
}

// check returns the error of the first of the run's checkpoints that was
// refused, without waiting for those still on their way.
func (s *runSteps) check(run *Run) error {
	if !s.failed.Load() {
		return nil
	}
	return s.settle(run, false)
}

// flush waits until each of the run's checkpoints on their way has been
// written or refused, and returns the error of the first one refused.
func (s *runSteps) flush(run *Run) error {
	return s.settle(run, true)
}

// settle drops the written checkpoints from pending (waiting for each when
// wait is set) and returns the first one's error that was refused; the
// refused one stays, so later calls report it again.
func (s *runSteps) settle(run *Run, wait bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) > 0 {
		r := s.pending[0]
		if wait {
			<-r.done
		} else {
			select {
			case <-r.done:
			default:
				return nil
			}
		}
		if !r.withdrawn {
			if err := run.stepPutError(r.cp.Name, r.held, r.dup, r.err); err != nil {
				return err
			}
		}
		s.pending = s.pending[1:]
	}
	return nil
}
