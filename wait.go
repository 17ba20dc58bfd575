package skiplock

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/store"
)

// announcedWithin is how soon after a waiter starts listening every
// worker process announces the ends it writes: at once for those the
// waiter's LISTEN tells (listen_done's NOTIFY), and at their next look
// for waiters for the others (worker.ProgressInterval, with its jitter,
// and a margin).
const announcedWithin = 1500 * time.Millisecond

// toldWithin is how soon after a waiter starts listening the ends that
// worker processes were writing when they heard it are written.
const toldWithin = 100 * time.Millisecond

// waitLinger is how long the look-up loop, and with it the LISTEN
// subscription, stays after the last awaited job ended: a process that
// waits again within it (a web server's next request) finds the workers
// already announcing, where a fresh subscription opens a connection and
// LISTENs first. Worker processes announce ends while it lingers.
const waitLinger = 5 * time.Second

// waitChunk is how many ids one look-up statement reads (jobs_finished):
// a poll of 10,000 awaited jobs is ten short statements, between which
// the loop takes the ids announced meanwhile.
const waitChunk = 1_000

// Wait returns when every job of ids has ended, completed or dead (or is
// gone: JobStateGone), with how each ended, in the order of ids; or when
// ctx ends first, with the ends known so far (State empty for the others)
// and ctx's error.
//
// However many jobs and callers wait, a Client waits with one goroutine and
// one look-up statement per wake-up for all of them, and, unless
// Config.PollOnly, listens on the one LISTEN connection it shares with its
// worker pools (Config.ListenURL's when set) for the jobs worker processes
// announce they finished, in the commit that finishes them: a job that
// completed without a result ends its wait on that announcement, which the
// completing statement makes of the rows it moved (complete_archive); the
// others' announcements are looked up. NOTIFY is not needed for
// correctness: every Config.PollInterval the goroutine looks up every job still
// awaited, so Wait is correct without it (behind a transaction-mode
// pooler, or when the listener is away) and sees jobs finished without an
// announcement (reaped, cancelled while ready, completed by CompleteTx),
// one poll later. The goroutine ends when nothing has been awaited for a
// few seconds (waitLinger), and so does the LISTEN connection unless the
// client's worker pools run.
func (c *Client) Wait(ctx context.Context, ids ...int64) ([]JobEnd, error) {
	for _, id := range ids {
		if err := validateJobID(id); err != nil {
			return nil, err
		}
	}
	w := c.waits()
	call := w.add(ids)
	select {
	case <-call.done:
		// Nothing writes a call's ends once its done is closed (ended closes
		// it after the last): read them without the waiters' lock, which the
		// thousands of callers a batch of announcements releases would
		// otherwise queue for.
		return call.endsOf(ids), nil
	case <-ctx.Done():
		w.remove(call)
	}
	w.mu.Lock()
	ends, left := call.endsOf(ids), call.left
	w.mu.Unlock()
	if left > 0 {
		return ends, fmt.Errorf("skiplock: wait: %d of %d jobs not finished: %w", left, len(ids), context.Cause(ctx))
	}
	return ends, nil
}

// EnqueueAndWait enqueues p and waits for its job to end (Client.Wait): the
// job's result decoded into R when it completed; an error matching
// ErrJobFailed (a *JobFailedError: its reason and last error) when it
// ended in the dead-letter table; ErrJobNotFound when it is gone (deleted
// on completion with Config.DeleteCompleted); ctx's error when ctx ends
// first. A job that returned no result leaves R's zero value. With a
// unique key that matched a job in flight, it waits for that job.
func EnqueueAndWait[R any](ctx context.Context, c *Client, p EnqueueParams) (R, error) {
	var r R
	res, err := c.Enqueue(ctx, p)
	if err != nil {
		return r, err
	}
	ends, err := c.Wait(ctx, res.ID)
	if err != nil {
		return r, err
	}
	return decodeEnd[R](ends[0])
}

func decodeEnd[R any](e JobEnd) (R, error) {
	var r R
	switch e.State {
	case JobStateCompleted:
		if e.Result == nil {
			return r, nil
		}
		if err := json.Unmarshal(e.Result, &r); err != nil {
			return r, fmt.Errorf("skiplock: job %d's result does not decode into %T: %w", e.ID, r, err)
		}
		return r, nil
	case JobStateDead:
		return r, &JobFailedError{ID: e.ID, Reason: e.Reason, Err: e.Error}
	}
	return r, jobNotFound("wait", e.ID)
}

// FleetJob names a job of a Fleet: the database (the index of its client)
// and the id, which is per database.
type FleetJob struct {
	Database int
	ID       int64
}

// Wait waits for jobs across the fleet's databases, each database's through
// its client's Wait (one goroutine per database, not per job), and returns
// how each ended in the order of jobs, or the ends known when ctx ended
// with ctx's error.
func (f *Fleet) Wait(ctx context.Context, jobs ...FleetJob) ([]JobEnd, error) {
	byDB := map[int][]int{} // database → indexes into jobs
	for i, j := range jobs {
		if j.Database < 0 || j.Database >= len(f.clients) {
			return nil, &FieldError{Field: "jobs[" + strconv.Itoa(i) + "].Database", Message: fmt.Sprintf("the fleet has %d databases", len(f.clients)), base: ErrInvalidConfig}
		}
		byDB[j.Database] = append(byDB[j.Database], i)
	}
	ends := make([]JobEnd, len(jobs))
	var wg sync.WaitGroup
	var mu sync.Mutex // guards first
	var first error
	for db, idx := range byDB {
		ids := make([]int64, len(idx))
		for k, i := range idx {
			ids[k] = jobs[i].ID
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := f.clients[db].Wait(ctx, ids...)
			for k, i := range idx {
				if k < len(got) {
					ends[i] = got[k]
				}
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ends, first
}

// waitCall is one Wait call.
type waitCall struct {
	ids  []int64          // its jobs, each once
	left int              // jobs not ended yet; guarded by waiters.mu
	ends map[int64]JobEnd // guarded by waiters.mu until done is closed, then read-only
	done chan struct{}    // closed when left reaches 0
}

// endsOf is the call's ends in the order of ids (as Wait was given them,
// an id twice reported twice); a job not ended yet has only its ID.
func (call *waitCall) endsOf(ids []int64) []JobEnd {
	ends := make([]JobEnd, len(ids))
	for i, id := range ids {
		ends[i] = call.ends[id]
		ends[i].ID = id
	}
	return ends
}

// waiters is a Client's side of Wait: the awaited jobs and the one loop
// that looks them up.
type waiters struct {
	c *Client

	mu       sync.Mutex // guards byID, heard, lookAll, running, noLinger and every waitCall's fields
	byID     map[int64][]*waitCall
	heard    map[int64]struct{} // ids announced (or newly awaited) since the last look
	lookAll  bool               // look every awaited id up (a poll, a reconnect)
	running  bool               // the loop runs (or lingers)
	noLinger bool               // the loop ends with the last awaited job (Client.Stop); cleared when it ends
	kick     chan struct{}      // wakes the loop; capacity 1

	// lookUp reads which of ids ended (store.JobsFinished on the client's
	// pool); a field so that a test can make one read wrong.
	lookUp func(ctx context.Context, ids []int64) ([]store.Finished, error)
}

// waits returns the client's waiters, made on first use.
func (c *Client) waits() *waiters {
	c.waitOnce.Do(func() {
		c.waiters = &waiters{c: c, byID: map[int64][]*waitCall{}, heard: map[int64]struct{}{},
			kick: make(chan struct{}, 1),
			lookUp: func(ctx context.Context, ids []int64) ([]store.Finished, error) {
				return c.store.JobsFinished(ctx, c.pool, ids)
			}}
	})
	return c.waiters
}

func (w *waiters) add(ids []int64) *waitCall {
	call := &waitCall{ends: make(map[int64]JobEnd, len(ids)), done: make(chan struct{})}
	w.mu.Lock()
	for _, id := range ids {
		if slices.Contains(w.byID[id], call) {
			continue // the same id twice in one call
		}
		w.byID[id] = append(w.byID[id], call)
		w.heard[id] = struct{}{} // look it up at once: it may have ended already
		call.ids = append(call.ids, id)
		call.left++
	}
	if call.left == 0 {
		close(call.done)
	}
	if !w.running && call.left > 0 {
		w.running = true
		go w.loop()
	}
	w.mu.Unlock()
	w.wake()
	return call
}

// remove forgets call's jobs not ended yet (its context ended).
func (w *waiters) remove(call *waitCall) {
	w.mu.Lock()
	defer w.wakeIfIdle()
	defer w.mu.Unlock()
	for _, id := range call.ids {
		calls := w.byID[id]
		if i := slices.Index(calls, call); i >= 0 {
			calls = slices.Delete(calls, i, i+1)
			if len(calls) == 0 {
				delete(w.byID, id)
			} else {
				w.byID[id] = calls
			}
		}
	}
}

// wakeIfIdle wakes the loop when nothing is awaited any more, so that it
// starts lingering (and ends, with its LISTEN connection, waitLinger
// later) now rather than at its next poll.
func (w *waiters) wakeIfIdle() {
	w.mu.Lock()
	idle := len(w.byID) == 0
	w.mu.Unlock()
	if idle {
		w.wake()
	}
}

// endLinger makes the loop end as soon as nothing is awaited, without
// lingering (Client.Stop).
func (w *waiters) endLinger() {
	w.mu.Lock()
	w.noLinger = w.running
	w.mu.Unlock()
	w.wake()
}

// lookAllNow makes the loop look every awaited job up at once.
func (w *waiters) lookAllNow() {
	w.mu.Lock()
	w.lookAll = true
	w.mu.Unlock()
	w.wake()
}

func (w *waiters) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// heardDone takes a payload of the finished jobs' channel. Three forms:
// ids of jobs that just ended, comma-separated, to look up (notify_done:
// dead letters, completions without history); the same ending in "c@" and
// a time in microseconds since the epoch: jobs complete_archive completed
// then, without a result; and complete_archive_result's JSON object
// {"at": …, "ended": {"id": result or null}, "look": [id, …]}. The jobs
// told with their end end here, with no look-up. A token that is not a
// number is skipped, so an older waiter takes the first form's ids of the
// second and looks them up (and polls for the third's).
func (w *waiters) heardDone(payload string) {
	told := map[int64]json.RawMessage{} // ends told, with their results
	var look []int64                    // ends to look up
	var at time.Time
	if strings.HasPrefix(payload, "{") {
		var m struct {
			At    int64                     `json:"at"`
			Ended map[int64]json.RawMessage `json:"ended"`
			Look  []int64                   `json:"look"`
		}
		if json.Unmarshal([]byte(payload), &m) != nil {
			return // not ours; the poll finds the jobs
		}
		at, told, look = time.UnixMicro(m.At), m.Ended, m.Look
	} else {
		ids := strings.Split(payload, ",")
		if us, ok := strings.CutPrefix(ids[len(ids)-1], "c@"); ok {
			if n, err := strconv.ParseInt(us, 10, 64); err == nil {
				at = time.UnixMicro(n)
			}
		}
		for _, s := range ids {
			id, err := strconv.ParseInt(s, 10, 64)
			switch {
			case err != nil:
			case at.IsZero():
				look = append(look, id)
			default:
				told[id] = nil
			}
		}
	}
	var ends []JobEnd
	w.mu.Lock()
	for _, id := range look {
		if _, ok := w.byID[id]; ok {
			w.heard[id] = struct{}{}
		}
	}
	for id, result := range told {
		if _, ok := w.byID[id]; !ok {
			continue
		}
		finished := at // each end its own, as a look-up gives them
		e := JobEnd{ID: id, State: JobStateCompleted, FinishedAt: &finished}
		if string(result) != "null" {
			e.Result = result
		}
		ends = append(ends, e)
	}
	n := len(w.heard)
	w.mu.Unlock()
	if len(ends) > 0 {
		w.ended(ends)
	}
	if n > 0 {
		w.wake()
	}
}

// toLook returns the ids to look up now, or idle when nothing is awaited.
func (w *waiters) toLook() (ids []int64, idle bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.byID) == 0 {
		clear(w.heard)
		return nil, true
	}
	if !w.lookAll {
		return w.heardLocked(), false
	}
	ids = make([]int64, 0, len(w.byID))
	for id := range w.byID {
		ids = append(ids, id)
	}
	w.lookAll = false
	clear(w.heard)
	slices.Sort(ids)
	return ids, false
}

// ended records the ends found: each awaiting call gets each of its jobs
// once, and a call whose last job ended is released.
func (w *waiters) ended(ends []JobEnd) {
	w.mu.Lock()
	defer w.wakeIfIdle()
	defer w.mu.Unlock()
	for _, e := range ends {
		for _, call := range w.byID[e.ID] {
			call.ends[e.ID] = e
			call.left--
			if call.left == 0 {
				close(call.done)
			}
		}
		delete(w.byID, e.ID)
	}
}

// loop looks up the awaited jobs when told some ended (NOTIFY, or new
// ones are awaited) and every PollInterval, until nothing has been
// awaited for waitLinger.
func (w *waiters) loop() {
	c := w.c
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !c.cfg.PollOnly {
		defer c.listener.Subscribe(w.subscription())()
	}
	poll := time.NewTicker(c.cfg.PollInterval)
	defer poll.Stop()
	for {
		ids, idle := w.toLook()
		if idle {
			if !w.linger() {
				return
			}
			continue
		}
		w.lookInChunks(ctx, ids)
		select {
		case <-w.kick:
		case <-poll.C:
			w.mu.Lock()
			w.lookAll = true
			w.mu.Unlock()
		}
	}
}

// linger waits, with nothing awaited, for the next Wait: true when one
// came within waitLinger; false when none did or the client stopped
// (endLinger), with running cleared under the same lock as add checks it
// (the loop then ends).
func (w *waiters) linger() bool {
	t := time.NewTimer(waitLinger)
	defer t.Stop()
	expired := false
	for {
		w.mu.Lock()
		busy := len(w.byID) > 0
		end := !busy && (expired || w.noLinger)
		if end {
			w.running, w.noLinger = false, false
			clear(w.heard)
		}
		w.mu.Unlock()
		if busy || end {
			return busy
		}
		select {
		case <-w.kick:
		case <-t.C:
			expired = true
		}
	}
}

// lookInChunks looks ids up waitChunk at a time and, between two chunks,
// first the ids announced meanwhile: a poll of every awaited job (10,000
// of them: ten statements) does not hold back the ends the waiters were
// just told of.
func (w *waiters) lookInChunks(ctx context.Context, ids []int64) {
	for len(ids) > 0 {
		n := min(len(ids), waitChunk)
		w.look(ctx, ids[:n])
		ids = ids[n:]
		if len(ids) == 0 {
			return
		}
		if heard := w.takeHeard(); len(heard) > 0 {
			for chunk := range slices.Chunk(heard, waitChunk) {
				w.look(ctx, chunk)
			}
		}
	}
}

// takeHeard returns the awaited ids announced since the last look and
// forgets them (they are looked up now).
func (w *waiters) takeHeard() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.heardLocked()
}

// heardLocked is takeHeard with w.mu held.
func (w *waiters) heardLocked() []int64 {
	var ids []int64
	for id := range w.heard {
		if _, ok := w.byID[id]; ok {
			ids = append(ids, id)
		}
	}
	clear(w.heard)
	slices.Sort(ids)
	return ids
}

// look reads which of ids ended. A failed look-up is retried by the next
// poll (the ids stay awaited).
//
// A job the look-up found in no table (gone) is read again, in a statement
// and snapshot of its own, before its callers are told: gone is an end a
// caller cannot take back, while every other answer of a look-up is either
// final or looked up again. The second read decides; when it finds the job
// ended (or in flight) after all, a warning names the ids, so that whatever
// made the first read miss them is seen. (TestAwaitUnderFaults once got
// jobs reported gone that the database had completed, at the first
// completions of its drain, and no run since has shown it again.) A
// client that deletes completed jobs (Config.DeleteCompleted) reads each
// of its awaited jobs twice.
func (w *waiters) look(ctx context.Context, ids []int64) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fs, err := w.lookUp(qctx, ids)
	if err == nil {
		fs, err = w.confirmGone(qctx, fs)
	}
	if err != nil {
		w.c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: wait: looking up awaited jobs failed; retrying at the next poll",
			slog.String("error", err.Error()), slog.Int("jobs", len(ids)))
		return
	}
	ends := make([]JobEnd, len(fs))
	for i, f := range fs {
		ends[i] = outcomeOf(f)
	}
	w.ended(ends)
}

// confirmGone reads the jobs fs reports gone again and returns fs with the
// second read's answer for them: gone again, ended, or left out when the
// job is in flight (it stays awaited).
func (w *waiters) confirmGone(ctx context.Context, fs []store.Finished) ([]store.Finished, error) {
	var gone []int64
	for _, f := range fs {
		if f.State == string(JobStateGone) {
			gone = append(gone, f.ID)
		}
	}
	if len(gone) == 0 {
		return fs, nil
	}
	again, err := w.lookUp(ctx, gone)
	if err != nil {
		return nil, err
	}
	second := make(map[int64]store.Finished, len(again))
	var found []int64
	for _, f := range again {
		second[f.ID] = f
		if f.State != string(JobStateGone) {
			found = append(found, f.ID)
		}
	}
	for _, id := range gone {
		if _, ok := second[id]; !ok {
			found = append(found, id) // in flight after all
		}
	}
	if len(found) > 0 {
		slices.Sort(found)
		w.c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: wait: a look-up found jobs in no table that a second found ended or in flight; reporting the second",
			slog.Any("ids", found))
	}
	out := fs[:0]
	for _, f := range fs {
		if f.State == string(JobStateGone) {
			s, ok := second[f.ID]
			if !ok {
				continue // in flight: still awaited
			}
			f = s
		}
		out = append(out, f)
	}
	return out, nil
}

// subscription is the waiters' part of the client's LISTEN connection
// (internal/notify, shared with the worker runtime): the finished jobs'
// channel, on which the connection names itself skiplock-wait so that
// worker processes announce the ends they write. Each (re)LISTEN looks
// every awaited job up; a pooler leaves the waiters to polling.
func (w *waiters) subscription() notify.Subscription {
	st := w.c.store
	return notify.Subscription{
		Channels: []string{st.DoneChannel()},
		Listen:   st.ListenDone,
		Unlisten: st.UnlistenDone,
		OnNotify: func(_, payload string) { w.heardDone(payload) },
		OnConnect: func(bool) {
			w.lookAllNow() // anything announced while we were not listening
			// Workers announce ends only while a waiter listens. Those
			// listening heard this one's LISTEN at once (listen_done's
			// NOTIFY), but an end they were writing then was not
			// announced: look again once it is written. The others
			// notice within a second: look again once they have.
			time.AfterFunc(toldWithin, func() { w.lookAllNow() })
			time.AfterFunc(announcedWithin, func() { w.lookAllNow() })
		},
	}
}
