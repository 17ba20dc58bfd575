package skiplock

import (
	"context"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// stepWriter is Step's group commit. A checkpoint must be durable before
// Step returns, and one commit per step made a three-step handler cost
// three transactions besides its job's share of a batched claim and
// completion. Instead, the checkpoints that handlers ask for while a write
// is in flight wait, and go together in the next write: one statement
// (store.StepPutMany), one commit. No goroutine of its own: the first
// caller that finds no write in flight writes, and when it is done hands
// the next batch to the first caller still waiting, so a Step never waits
// for more than the write in flight and its own. Step's semantics are
// unchanged: it returns once its checkpoint committed, or with the reason it
// did not (lease lost, recorded already, the database's error).
type stepWriter struct {
	mu     sync.Mutex
	busy   bool
	queue  []*stepWrite
	writes int // batches written (tests)
}

// stepWrite is one checkpoint waiting to be written.
type stepWrite struct {
	cp   store.StepCheckpoint
	lead chan struct{} // closed: this caller writes the next batch
	done chan struct{} // closed: held, recorded and err are set
	held bool
	dup  bool
	err  error
}

// maxStepBatch bounds the checkpoints of one write.
const maxStepBatch = 500

// stepWriteTimeout bounds one write; it runs without the caller's context,
// whose cancellation must not fail the other callers' checkpoints.
const stepWriteTimeout = 30 * time.Second

// put records cp for c's worker id (the one every run of c holds its leases
// under) and returns whether the lease was held and whether the step had
// been recorded already, as Store.StepPut reports them.
func (w *stepWriter) put(ctx context.Context, c *Client, cp store.StepCheckpoint) (held, recorded bool, err error) {
	r := &stepWrite{cp: cp, lead: make(chan struct{}), done: make(chan struct{})}
	w.mu.Lock()
	w.queue = append(w.queue, r)
	lead := !w.busy
	w.busy = true
	w.mu.Unlock()
	if !lead {
		select {
		case <-r.done:
			return r.held, r.dup, r.err
		case <-r.lead:
		}
	}
	w.write(context.WithoutCancel(ctx), c)
	<-r.done // the batch just written held r: it was first in the queue
	return r.held, r.dup, r.err
}

// write writes the next batch: at most maxStepBatch of the queue's
// checkpoints, each (job, step) once (a second one waits for the next); then hands the writing to the
// first caller still queued, or ends the busy spell.
func (w *stepWriter) write(ctx context.Context, c *Client) {
	w.mu.Lock()
	var batch, rest []*stepWrite
	type key struct {
		id   int64
		name string
	}
	seen := map[key]bool{}
	for _, r := range w.queue {
		k := key{r.cp.Lease.ID, r.cp.Name}
		if len(batch) < maxStepBatch && !seen[k] {
			seen[k] = true
			batch = append(batch, r)
		} else {
			rest = append(rest, r)
		}
	}
	w.queue = rest
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, stepWriteTimeout)
	cps := make([]store.StepCheckpoint, len(batch))
	for i, r := range batch {
		cps[i] = r.cp
	}
	worker := c.cfg.WorkerID
	held, dup, err := c.store.StepPutMany(ctx, c.pool, worker, cps)
	if err != nil && len(batch) > 1 {
		// The batch failed as a whole: write each on its own, so that one
		// checkpoint the database refuses fails only its own Step.
		for _, r := range batch {
			_, r.held, r.err = c.store.StepPut(ctx, c.pool, r.cp.Lease, worker, r.cp.Name, r.cp.Output)
			close(r.done)
		}
	} else {
		for i, r := range batch {
			if err != nil {
				r.err = err
			} else {
				r.held, r.dup = held[i], dup[i]
			}
			close(r.done)
		}
	}
	cancel()

	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if len(w.queue) == 0 {
		w.busy = false
		return
	}
	close(w.queue[0].lead)
}
