package importer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlfile"
)

// AsynqBytesKey is the key of the one-key object an asynq payload becomes
// when it is not a JSON object skiplock can store: {"$asynq_bytes":
// "<standard base64 of the payload's bytes>"}. A handler reads the bytes
// back with a field of type []byte tagged json:"$asynq_bytes" (encoding/json decodes
// base64 into a []byte). A JSON object payload is stored as it is.
const AsynqBytesKey = "$asynq_bytes"

// AsynqStates are the asynq task states an import moves by default;
// "archived" is added by AsynqOptions.Archived.
var AsynqStates = []string{"pending", "scheduled", "retry"}

// AsynqOptions configure an asynq import.
type AsynqOptions struct {
	// Redis is asynq's Redis.
	Redis redis.UniversalClient
	// Dest is skiplock's database, Client a client on it.
	Dest   *pgxpool.Pool
	Client *skiplock.Client
	// Queues, when not empty, restrict the import to them.
	Queues []string
	// Archived moves archived tasks (retries exhausted) too.
	Archived bool
	// BatchSize is the tasks per transaction; 0 means DefaultBatchSize.
	BatchSize int
	// DryRun counts what would move, by state and type, and writes nothing.
	DryRun bool
	// Progress, when set, is called after each batch with the jobs it moved.
	Progress func(moved int)
}

// asynq's keys (github.com/hibiken/asynq internal/base).
const asynqQueuesKey = "asynq:queues"

func asynqPrefix(q string) string  { return "asynq:{" + q + "}:" }
func asynqHolding(q string) string { return asynqPrefix(q) + "skiplock_import" }

var (
	claimScript   = redis.NewScript(mustLua("claim.lua"))
	markScript    = redis.NewScript(mustLua("mark.lua"))
	finishScript  = redis.NewScript(mustLua("finish.lua"))
	restoreScript = redis.NewScript(mustLua("restore.lua"))
)

func mustLua(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// heldTask is a task taken out of asynq's reach, with what the import needs.
type heldTask struct {
	id, state string
	processAt float64 // unix seconds; 0 for pending and archived
	msg       []byte
}

type asynqImport struct {
	o      AsynqOptions
	q      map[string]string
	states []string
	lt     lockTimer
	sum    *Summary
	// refused are the tasks of this run that skiplock would not take and
	// that went back to asynq.
	refused   map[string]bool
	refusedIn map[string]int64 // by queue
}

// Asynq moves asynq's waiting tasks into skiplock (see the package comment
// for how each batch commits).
func Asynq(ctx context.Context, o AsynqOptions) (Summary, error) {
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	sum := newSummary("asynq", o.DryRun)
	a := &asynqImport{o: o, q: sqlfile.Render(rawSQL, "skiplock", nil), states: AsynqStates, sum: &sum,
		refused: map[string]bool{}, refusedIn: map[string]int64{}}
	if o.Archived {
		a.states = append(append([]string(nil), AsynqStates...), "archived")
	}
	start := time.Now()
	queues, err := a.queues(ctx)
	if err != nil {
		return sum, err
	}
	for _, q := range queues {
		if o.DryRun {
			err = a.count(ctx, q)
		} else {
			err = a.importQueue(ctx, q)
		}
		if err != nil {
			sum.finish(start, a.lt)
			return sum, err
		}
	}
	sum.finish(start, a.lt)
	return sum, nil
}

func (a *asynqImport) queues(ctx context.Context) ([]string, error) {
	all, err := a.o.Redis.SMembers(ctx, asynqQueuesKey).Result()
	if err != nil {
		return nil, fmt.Errorf("asynq: list queues: %w", err)
	}
	if len(a.o.Queues) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, q := range a.o.Queues {
		want[q] = true
	}
	var out []string
	for _, q := range all {
		if want[q] {
			out = append(out, q)
		}
	}
	return out, nil
}

// list returns up to n task ids of state in q, oldest first.
func (a *asynqImport) list(ctx context.Context, q, state string, n int64) ([]string, error) {
	key := asynqPrefix(q) + state
	if state == "pending" {
		// asynq pushes on the left and dequeues on the right.
		ids, err := a.o.Redis.LRange(ctx, key, -n, -1).Result()
		for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
			ids[i], ids[j] = ids[j], ids[i]
		}
		return ids, err
	}
	return a.o.Redis.ZRange(ctx, key, 0, n-1).Result()
}

// count is the dry run of one queue: every movable task's type is read.
func (a *asynqImport) count(ctx context.Context, q string) error {
	for _, state := range a.states {
		ids, err := a.list(ctx, q, state, 1<<40)
		if err != nil {
			return fmt.Errorf("asynq: list %s tasks: %w", state, err)
		}
		for i := 0; i < len(ids); i += a.o.BatchSize {
			chunk := ids[i:min(i+a.o.BatchSize, len(ids))]
			msgs, err := a.msgs(ctx, q, chunk)
			if err != nil {
				return err
			}
			for _, m := range msgs {
				t, err := decodeTask(m)
				if err != nil {
					a.sum.Left["undecodable"]++
					continue
				}
				a.sum.moved(state, t.Type, 1)
			}
		}
	}
	return a.leftBehind(ctx, q)
}

// msgs reads the task messages of ids in one pipeline; a task gone
// meanwhile is left out.
func (a *asynqImport) msgs(ctx context.Context, q string, ids []string) ([][]byte, error) {
	pipe := a.o.Redis.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, asynqPrefix(q)+"t:"+id, "msg")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("asynq: read tasks: %w", err)
	}
	out := make([][]byte, 0, len(ids))
	for _, c := range cmds {
		if b, err := c.Bytes(); err == nil {
			out = append(out, b)
		}
	}
	return out, nil
}

// leftBehind counts what stays in asynq: tasks being worked (active),
// finished ones, archived ones unless asked for, held by another import,
// and waiting ones that arrived or were busy meanwhile.
func (a *asynqImport) leftBehind(ctx context.Context, q string) error {
	p := asynqPrefix(q)
	pipe := a.o.Redis.Pipeline()
	active := pipe.LLen(ctx, p+"active")
	completed := pipe.ZCard(ctx, p+"completed")
	archived := pipe.ZCard(ctx, p+"archived")
	held := pipe.HLen(ctx, asynqHolding(q))
	var waiting []*redis.IntCmd
	if !a.o.DryRun {
		waiting = append(waiting, pipe.LLen(ctx, p+"pending"), pipe.ZCard(ctx, p+"scheduled"), pipe.ZCard(ctx, p+"retry"))
		if a.o.Archived {
			waiting = append(waiting, archived)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("asynq: count what is left: %w", err)
	}
	add := func(reason string, n int64) {
		if n > 0 {
			a.sum.Left[reason] += n
		}
	}
	add("active", active.Val())
	add("completed", completed.Val())
	if !a.o.Archived {
		add("archived", archived.Val())
	}
	add("held by another import", held.Val())
	var w int64
	for _, c := range waiting {
		w += c.Val()
	}
	if len(waiting) > 0 {
		w -= a.refusedIn[q] // counted as invalid already
	}
	add("waiting (busy in asynq or enqueued during the import)", w)
	return nil
}

// importQueue finishes what an earlier run left held, then moves each
// movable state's tasks batch by batch.
func (a *asynqImport) importQueue(ctx context.Context, q string) error {
	if err := a.recover(ctx, q); err != nil {
		return err
	}
	for _, state := range a.states {
		for {
			// Tasks refused earlier in this run went back where asynq
			// takes them from next: read past them.
			listed, err := a.list(ctx, q, state, int64(a.o.BatchSize+len(a.refused)))
			if err != nil {
				return fmt.Errorf("asynq: list %s tasks: %w", state, err)
			}
			var ids []string
			for _, id := range listed {
				if !a.refused[id] && len(ids) < a.o.BatchSize {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				break
			}
			start := time.Now()
			held, err := a.claim(ctx, q, ids)
			if err != nil {
				return err
			}
			if len(held) == 0 {
				break // all busy in asynq: counted as waiting below
			}
			if err := a.process(ctx, q, held, start); err != nil {
				return err
			}
		}
	}
	return a.leftBehind(ctx, q)
}

func (a *asynqImport) claim(ctx context.Context, q string, ids []string) ([]heldTask, error) {
	archived := "0"
	if a.o.Archived {
		archived = "1"
	}
	args := make([]any, 0, len(ids)+2)
	args = append(args, asynqPrefix(q), archived)
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := claimScript.Run(ctx, a.o.Redis, []string{asynqHolding(q)}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("asynq: take tasks: %w", err)
	}
	out := make([]heldTask, 0, len(res)/4)
	for i := 0; i+3 < len(res); i += 4 {
		t := heldTask{id: str(res[i]), state: str(res[i+1]), msg: []byte(str(res[i+3]))}
		t.processAt, _ = strconv.ParseFloat(str(res[i+2]), 64)
		out = append(out, t)
	}
	return out, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// process enqueues held tasks in one PostgreSQL transaction, whose id is
// recorded with them before it commits, then removes them from Redis. A
// task skiplock would refuse goes back to asynq.
func (a *asynqImport) process(ctx context.Context, q string, held []heldTask, start time.Time) error {
	var params []skiplock.EnqueueParams
	var ok []heldTask
	var refused []string
	for _, h := range held {
		t, err := decodeTask(h.msg)
		var p skiplock.EnqueueParams
		if err == nil {
			p = asynqParams(q, h, t)
			err = a.o.Client.Validate(p)
		}
		if err != nil {
			a.sum.Left[invalidReason(err)]++
			refused = append(refused, h.id)
			a.refused[h.id] = true
			a.refusedIn[q]++
			continue
		}
		params = append(params, p)
		ok = append(ok, h)
	}
	if len(refused) > 0 {
		if err := a.script(ctx, restoreScript, q, asynqPrefix(q), refused); err != nil {
			return fmt.Errorf("asynq: give refused tasks back: %w", err)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	ids := make([]string, len(ok))
	for i, h := range ok {
		ids[i] = h.id
	}
	err := pgx.BeginFunc(ctx, a.o.Dest, func(tx pgx.Tx) error {
		var xid string
		if err := tx.QueryRow(ctx, a.q["xact_id"]).Scan(&xid); err != nil {
			return fmt.Errorf("asynq: transaction id: %w", err)
		}
		if err := a.script(ctx, markScript, q, xid, ids); err != nil {
			return fmt.Errorf("asynq: record the batch's transaction: %w", err)
		}
		_, err := a.o.Client.EnqueueManyTx(ctx, tx, params)
		return err
	})
	if err != nil {
		return err // the tasks stay held: the next run asks what became of the transaction
	}
	if err := a.script(ctx, finishScript, q, asynqPrefix(q), ids); err != nil {
		return fmt.Errorf("asynq: remove imported tasks (they are in skiplock; a re-run removes them): %w", err)
	}
	a.lt.add(time.Since(start))
	for _, h := range ok {
		t, _ := decodeTask(h.msg)
		a.sum.moved(h.state, t.Type, 1)
	}
	if a.o.Progress != nil {
		a.o.Progress(len(ok))
	}
	return nil
}

func (a *asynqImport) script(ctx context.Context, s *redis.Script, q, first string, ids []string) error {
	args := make([]any, 0, len(ids)+1)
	args = append(args, first)
	for _, id := range ids {
		args = append(args, id)
	}
	return s.Run(ctx, a.o.Redis, []string{asynqHolding(q)}, args...).Err()
}

// recover settles the tasks an earlier run left held in q: a batch whose
// transaction committed is only removed from Redis; one that did not (or
// never got as far as recording it) is imported again, its unique key
// (the task id) keeping a job still in flight from being made twice; one
// whose transaction is still running belongs to another import and is
// left to it.
func (a *asynqImport) recover(ctx context.Context, q string) error {
	entries, err := a.o.Redis.HGetAll(ctx, asynqHolding(q)).Result()
	if err != nil {
		return fmt.Errorf("asynq: read held tasks: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	byXid := map[string][]heldTask{}
	var xids []string
	for id, v := range entries {
		parts := strings.SplitN(v, "|", 3)
		if len(parts) != 3 {
			continue
		}
		t := heldTask{id: id, state: parts[0]}
		t.processAt, _ = strconv.ParseFloat(parts[1], 64)
		if byXid[parts[2]] == nil && parts[2] != "" {
			xids = append(xids, parts[2])
		}
		byXid[parts[2]] = append(byXid[parts[2]], t)
	}
	status, err := a.xactStatus(ctx, xids)
	if err != nil {
		return err
	}
	var again []heldTask
	for xid, tasks := range byXid {
		switch status[xid] {
		case "committed":
			ids := make([]string, len(tasks))
			for i, t := range tasks {
				ids[i] = t.id
			}
			if err := a.script(ctx, finishScript, q, asynqPrefix(q), ids); err != nil {
				return fmt.Errorf("asynq: remove imported tasks: %w", err)
			}
			a.sum.Recovered += int64(len(tasks))
		case "in progress":
			// Another import's batch: it finishes it.
		default: // aborted, never recorded, or too old to tell: the unique key guards
			again = append(again, tasks...)
		}
	}
	for i := 0; i < len(again); i += a.o.BatchSize {
		chunk := again[i:min(i+a.o.BatchSize, len(again))]
		ids := make([]string, len(chunk))
		for j, t := range chunk {
			ids[j] = t.id
		}
		msgs, err := a.o.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range ids {
				p.HGet(ctx, asynqPrefix(q)+"t:"+id, "msg")
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("asynq: read held tasks: %w", err)
		}
		var found []heldTask
		for j, c := range msgs {
			b, err := c.(*redis.StringCmd).Bytes()
			if err != nil {
				continue // the task hash is gone: nothing left to import
			}
			chunk[j].msg = b
			found = append(found, chunk[j])
		}
		a.sum.Recovered += int64(len(found))
		if err := a.process(ctx, q, found, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

// asynqParams maps one asynq task to the skiplock job that replaces it.
// asynq counts retries (Retry allowed, Retried so far); skiplock counts
// attempts: the job gets the attempts asynq had left (Retry+1-Retried, at
// least 1). The task id is the job's unique key; the rest of the task
// travels in the job's metadata under "asynq".
func asynqParams(q string, h heldTask, t asynqTask) skiplock.EnqueueParams {
	p := skiplock.EnqueueParams{
		Queue:       q,
		Kind:        t.Type,
		Payload:     AsynqPayload(t.Payload),
		MaxAttempts: clampAttempts(int(t.Retry) + 1 - int(t.Retried)),
		UniqueKey:   "asynq:" + t.ID,
	}
	if h.processAt > 0 && (h.state == "scheduled" || h.state == "retry") {
		p.RunAt = time.Unix(int64(h.processAt), 0)
	}
	meta := map[string]any{"id": t.ID, "state": h.state, "retried": t.Retried, "max_retry": t.Retry}
	if t.ErrorMsg != "" {
		meta["last_error"] = t.ErrorMsg
	}
	if t.LastFailedAt > 0 {
		meta["last_failed_at"] = time.Unix(t.LastFailedAt, 0).UTC().Format(time.RFC3339)
	}
	if t.Timeout > 0 {
		meta["timeout_seconds"] = t.Timeout
	}
	if t.Deadline > 0 {
		meta["deadline"] = time.Unix(t.Deadline, 0).UTC().Format(time.RFC3339)
	}
	if len(t.Headers) > 0 {
		meta["headers"] = t.Headers
	}
	if t.GroupKey != "" {
		meta["group"] = t.GroupKey
	}
	p.Metadata = fitMetadata(skiplock.Metadata{"asynq": meta}, "asynq", "headers", "last_error")
	return p
}

// AsynqPayload is the skiplock payload of an asynq task's bytes: the bytes
// themselves when they are a JSON object skiplock can store, {} when there
// are none, else {"$asynq_bytes": "<base64>"} (see AsynqBytesKey).
func AsynqPayload(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	if skiplock.ValidatePayload(b, 0) == nil {
		return json.RawMessage(b)
	}
	out, _ := json.Marshal(map[string]string{AsynqBytesKey: base64.StdEncoding.EncodeToString(b)})
	return out
}

// xactStatus asks PostgreSQL what became of each transaction. One still in
// progress is asked again for a few seconds: a killed import's session ends
// (and its transaction aborts) only once its server process notices.
func (a *asynqImport) xactStatus(ctx context.Context, xids []string) (map[string]string, error) {
	status := map[string]string{}
	deadline := time.Now().Add(xactSettleWait)
	for len(xids) > 0 {
		rows, err := a.o.Dest.Query(ctx, a.q["xact_status"], xids)
		if err != nil {
			return nil, fmt.Errorf("asynq: transaction status: %w", err)
		}
		var pending []string
		for rows.Next() {
			var x string
			var s *string
			if err := rows.Scan(&x, &s); err != nil {
				rows.Close()
				return nil, err
			}
			if s != nil {
				status[x] = *s
				if *s == "in progress" {
					pending = append(pending, x)
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("asynq: transaction status: %w", err)
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		xids = pending
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return status, nil
}

// xactSettleWait is how long recover waits for a transaction in progress
// to end before leaving its tasks to the import that runs it.
const xactSettleWait = 5 * time.Second
