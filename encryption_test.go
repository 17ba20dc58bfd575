package skiplock_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

type secretArgs struct {
	Email string `json:"email"`
}

func randomMarker(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// newKeyringFile makes a keyring file with a current key and returns its
// path and the key's id.
func newKeyringFile(t *testing.T) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.json")
	id, err := skiplock.KeyringAddKey(path, "")
	require.NoError(t, err)
	return path, id
}

func loadKeyring(t *testing.T, path string) *skiplock.Keyring {
	t.Helper()
	k, err := skiplock.LoadKeyring(path)
	require.NoError(t, err)
	return k
}

// withoutKey copies the keyring file at path without the key id (what an
// operator does to shred a tenant's jobs) and loads the copy.
func withoutKey(t *testing.T, path, id string) *skiplock.Keyring {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var f map[string]any
	require.NoError(t, json.Unmarshal(data, &f))
	var keep []any
	for _, k := range f["keys"].([]any) {
		if k.(map[string]any)["id"] != id {
			keep = append(keep, k)
		}
	}
	require.Len(t, keep, len(f["keys"].([]any))-1, "the key was in the file")
	f["keys"] = keep
	out, err := json.Marshal(f)
	require.NoError(t, err)
	k, err := skiplock.ParseKeyring(out)
	require.NoError(t, err)
	return k
}

// runAll starts c with a handler of kind "secret" that records each job's
// email, waits until no job is left in flight, and stops it.
func runAll(t *testing.T, c *skiplock.Client, pool *pgxpool.Pool) map[int64]string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[int64]string{}
	require.NoError(t, skiplock.Handle(c, "secret", func(ctx context.Context, j *skiplock.Job[secretArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		seen[j.ID] = j.Args.Email
		return nil
	}))
	require.NoError(t, c.Start(ctx))
	waitNoJobs(t, pool)
	require.NoError(t, c.Stop(ctx))
	mu.Lock()
	defer mu.Unlock()
	return seen
}

// Issue 38 §3: a sealed payload's plaintext is in no page of the schema's
// tables and in no byte of the WAL written while it was enqueued, run and
// archived; a plain payload beside it (the control) is found by the same
// scans, so the scans do see payloads. The handler sees the plaintext;
// JobGet and JobPayload the envelope.
func TestEncryptedPayloadNotInHeapOrWAL(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	path, keyID := newKeyringFile(t)
	marker, control := randomMarker("sealed-marker-"), randomMarker("plain-control-")

	// A temporary replication slot on a connection of the test's own keeps
	// the server from recycling the WAL segments scanned below (a
	// checkpoint of the shared server would); it goes with the connection.
	slotConn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = slotConn.Close(context.Background()) })
	_, err = slotConn.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true, true)`, randomMarker("t_wal_"))
	require.NoError(t, err)
	var lsn0 string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn0))
	enc := newClient(t, db.Pool, skiplock.Config{Encryption: loadKeyring(t, path), PollInterval: 20 * time.Millisecond,
		Logger: quietLogger()})
	plain := newClient(t, db.Pool, skiplock.Config{})
	sealed, err := enc.Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret", Payload: secretArgs{Email: marker}})
	require.NoError(t, err)
	clear, err := plain.Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret", Payload: secretArgs{Email: control}})
	require.NoError(t, err)

	// What an operator reads without the keyring: the envelope, naming its
	// key; with it, JobPayload (a person's explicit request) opens it.
	p, err := plain.JobPayload(ctx, sealed.ID)
	require.NoError(t, err)
	require.NotContains(t, string(p), marker)
	require.Contains(t, string(p), `"skiplock_encrypted": "v1.`+keyID+`.`)
	p, err = enc.JobPayload(ctx, sealed.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"email": "`+marker+`"}`, string(p))
	var relfile string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_relation_filepath(tableoid) FROM skiplock.jobs WHERE id = $1`,
		sealed.ID).Scan(&relfile))

	// The handler sees both in plain text, sealed and plain coexisting.
	seen := runAll(t, enc, db.Pool)
	require.Equal(t, map[int64]string{sealed.ID: marker, clear.ID: control}, seen)
	var archived int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_done WHERE id = ANY($1)`,
		[]int64{sealed.ID, clear.ID}).Scan(&archived))
	require.Equal(t, 2, archived, "both rows copied to the history, so the scans cover a second copy")

	// The WAL, first (a checkpoint may recycle its segments): every segment
	// from the one the enqueue started in to the current one, read once
	// and kept, up to what is flushed (every commit of this test is).
	var lsn1 string
	var segs []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text,
		array(SELECT w.name FROM pg_ls_waldir() AS w
		      WHERE w.name ~ '^[0-9A-F]{24}$'
		        AND w.name BETWEEN pg_walfile_name($1::pg_lsn) AND pg_walfile_name(pg_current_wal_lsn())
		      ORDER BY w.name)`, lsn0).Scan(&lsn1, &segs))
	require.NotEmpty(t, segs)
	var wal []byte
	walCopy := t.TempDir() // the segments as read, for pg_waldump below
	for _, s := range segs {
		var b []byte
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_read_binary_file('pg_wal/' || $1)`, s).Scan(&b))
		wal = append(wal, b...)
		require.NoError(t, os.WriteFile(filepath.Join(walCopy, s), b, 0o600))
	}
	require.True(t, bytes.Contains(wal, []byte(control)), "the scan finds a plain payload in the WAL")
	require.False(t, bytes.Contains(wal, []byte(marker)), "a sealed payload's plaintext is in the WAL")

	// pg_waldump, from the server's own binaries, shows the job's insert
	// into its partition within the range scanned. It reads the copies:
	// in pg_wal itself it took the segment size from the first file it
	// listed, which could be a segment made ahead and still all zeros
	// (seen in CI), and a checkpoint of a test beside this one may recycle
	// the segments meanwhile.
	var version string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')`).Scan(&version))
	waldump := "/usr/lib/postgresql/" + version[:2] + "/bin/pg_waldump"
	if _, err := os.Stat(waldump); err == nil {
		out, err := exec.Command(waldump, "-p", walCopy, "-s", lsn0, "-e", lsn1, "-r", "Heap").CombinedOutput()
		require.NoError(t, err, "%s", out)
		relNode := relfile[strings.LastIndex(relfile, "/")+1:]
		require.Regexp(t, `desc: INSERT .*\n?.*rel \d+/\d+/`+relNode, string(out), "the job's insert is in the range scanned")
		require.NotContains(t, string(out), marker)
	} else {
		t.Logf("no %s: the WAL checked by its bytes only", waldump)
	}

	heap := schemaHeap(t, db.Pool)
	require.True(t, bytes.Contains(heap, []byte(control)), "the scan finds a plain payload in the heap")
	require.False(t, bytes.Contains(heap, []byte(marker)), "a sealed payload's plaintext is in the heap")
}

// schemaHeap returns the bytes of every table, partition and TOAST table
// of the schema, once a checkpoint has written the pages: live rows and
// whatever dead ones vacuum has not cleared yet.
func schemaHeap(t *testing.T, pool *pgxpool.Pool) []byte {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CHECKPOINT`)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT pg_read_binary_file(pg_relation_filepath(c.oid))
		FROM pg_class AS c
		WHERE (c.relnamespace = 'skiplock'::regnamespace AND c.relkind IN ('r', 'm'))
		   OR c.oid IN (SELECT t.reltoastrelid FROM pg_class AS t WHERE t.relnamespace = 'skiplock'::regnamespace)`)
	require.NoError(t, err)
	var heap []byte
	for rows.Next() {
		var b []byte
		require.NoError(t, rows.Scan(&b))
		heap = append(heap, b...)
	}
	require.NoError(t, rows.Err())
	return heap
}

type flowArgs struct {
	M string `json:"m"`
}

// flowSeen is what the workflow handlers of TestSealedOutputsAndSignals
// got: each run's step results, parent outputs and signal payloads.
type flowSeen struct {
	mu    sync.Mutex // guards got
	got   []string
	waits int
}

func (s *flowSeen) add(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, v)
}

// handleFlow registers the two task kinds: "produce" records a step and
// sets its output; "consume" reads its parent's output, records a step, and
// waits for the signal "go". Each records what it got (the marker in its
// args with a suffix), on every run.
func handleFlow(t *testing.T, c *skiplock.Client, seen *flowSeen) {
	t.Helper()
	require.NoError(t, skiplock.Handle(c, "produce", func(ctx context.Context, j *skiplock.Job[flowArgs]) error {
		s, err := skiplock.Step(ctx, "s", func(context.Context) (string, error) { return j.Args.M + "-step", nil })
		if err != nil {
			return err
		}
		seen.add(s)
		return skiplock.SetOutput(ctx, map[string]string{"v": j.Args.M + "-out"})
	}))
	require.NoError(t, skiplock.Handle(c, "consume", func(ctx context.Context, j *skiplock.Job[flowArgs]) error {
		out, err := skiplock.TaskOutput[map[string]string](ctx, "a")
		if err != nil {
			return err
		}
		seen.add(out["v"])
		s, err := skiplock.Step(ctx, "s2", func(context.Context) (string, error) { return j.Args.M + "-step2", nil })
		if err != nil {
			return err
		}
		seen.add(s)
		p, err := skiplock.WaitSignal(ctx, "go", time.Minute)
		if err != nil {
			seen.mu.Lock()
			seen.waits++
			seen.mu.Unlock()
			return err
		}
		var sig map[string]string
		if err := json.Unmarshal(p, &sig); err != nil {
			return err
		}
		seen.add(sig["v"])
		return nil
	}))
}

// Issue 38 §3: what a workflow's handlers store beside their jobs is sealed
// too: a task's output and a step's result under the key of the job's
// tenant, a signal's payload under the sender's current key. At rest (a
// consumer asleep in its signal wait, the signal in the sending
// transaction) no row holds the plaintext; the handlers get the plaintext
// on every run, the recorded step result opened on the run after the wait;
// WorkflowTaskOutput and WorkflowGet open with a keyring and show the
// envelope without. A plain worker's workflow beside it (the control)
// stores its output readable, and the heap scan finds that and never the
// sealed one.
func TestSealedOutputsAndSignals(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	path, currentKey := newKeyringFile(t)
	acmeKey, err := skiplock.KeyringAddKey(path, "acme")
	require.NoError(t, err)
	ring := loadKeyring(t, path)
	marker, control := randomMarker("sealed-out-"), randomMarker("plain-out-")

	enc := newClient(t, db.Pool, skiplock.Config{Encryption: ring, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	plain := newClient(t, db.Pool, skiplock.Config{PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
		Pools: []skiplock.WorkerPool{{Queues: []string{"plainq"}}}})
	var sealedSeen, plainSeen flowSeen
	handleFlow(t, enc, &sealedSeen)
	handleFlow(t, plain, &plainSeen)
	graph := func(queue, m string) skiplock.Workflow {
		return skiplock.Workflow{Name: "secrets", Tasks: []skiplock.Task{
			{Name: "a", Queue: queue, Kind: "produce", Tenant: "acme", Args: flowArgs{M: m}},
			{Name: "b", Queue: queue, Kind: "consume", Tenant: "acme", Args: flowArgs{M: m}, DependsOn: []string{"a"}}}}
	}
	wfSealed, err := enc.EnqueueWorkflow(ctx, graph("default", marker))
	require.NoError(t, err)
	wfPlain, err := plain.EnqueueWorkflow(ctx, graph("plainq", control))
	require.NoError(t, err)
	require.NoError(t, enc.Start(ctx))
	t.Cleanup(func() { _ = enc.Stop(context.Background()) })
	require.NoError(t, plain.Start(ctx))
	t.Cleanup(func() { _ = plain.Stop(context.Background()) })

	// Both consumers asleep in their signal waits: the output of a and the
	// step of b are at rest.
	asleep := func(wf int64) bool {
		waits, err := enc.WorkflowWaitList(ctx, wf)
		require.NoError(t, err)
		for _, w := range waits {
			if w.What == "signal wait" {
				return true
			}
		}
		return false
	}
	// And each first run of b has returned from its wait: a signal sent
	// between the wait's record and the handler's return is taken by that
	// run, which then never sleeps (it happened under load).
	slept := func(seen *flowSeen) bool {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return seen.waits == 1
	}
	require.Eventually(t, func() bool {
		return asleep(wfSealed) && asleep(wfPlain) && slept(&sealedSeen) && slept(&plainSeen)
	}, 10*time.Second, 10*time.Millisecond)
	stored := func(q string, args ...any) []string {
		rows, err := db.Pool.Query(ctx, q, args...)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	outputs := stored(`SELECT output::text FROM skiplock.workflow_tasks WHERE workflow_id = $1 AND output IS NOT NULL`, wfSealed)
	require.Len(t, outputs, 1)
	require.Contains(t, outputs[0], `"skiplock_encrypted": "v1.`+acmeKey+`.`, "a's output sealed under its tenant's key")
	require.NotContains(t, outputs[0], marker)
	steps := stored(`SELECT s.output::text FROM skiplock.job_steps AS s JOIN skiplock.workflow_tasks AS t ON t.job_id = s.job_id
		WHERE t.workflow_id = $1 AND s.name = 's2'`, wfSealed)
	require.Len(t, steps, 1)
	require.Contains(t, steps[0], `"skiplock_encrypted": "v1.`+acmeKey+`.`, "b's step sealed under its tenant's key")
	require.NotContains(t, steps[0], marker)
	require.Contains(t, stored(`SELECT output::text FROM skiplock.workflow_tasks WHERE workflow_id = $1 AND name = 'a'`, wfPlain)[0],
		control+"-out", "the control: a plain worker's output is readable")

	// The signals, each in its sending transaction: sealed under the
	// current key by a client with a keyring, as sent by one without.
	send := func(c *skiplock.Client, wf int64, m string) string {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
		id, err := c.SignalSendTx(ctx, tx, "go", skiplock.SignalTarget{WorkflowID: wf}, map[string]string{"v": m + "-signal"})
		require.NoError(t, err)
		var p string
		require.NoError(t, tx.QueryRow(ctx, `SELECT payload::text FROM skiplock.signals WHERE id = $1`, id).Scan(&p))
		require.NoError(t, tx.Commit(ctx))
		return p
	}
	p := send(enc, wfSealed, marker)
	require.Contains(t, p, `"skiplock_encrypted": "v1.`+currentKey+`.`)
	require.NotContains(t, p, marker)
	require.Contains(t, send(plain, wfPlain, control), control+"-signal")

	for _, wf := range []int64{wfSealed, wfPlain} {
		require.Eventually(t, func() bool {
			st, err := enc.WorkflowGet(ctx, wf, false)
			require.NoError(t, err)
			return st.State == "completed"
		}, 10*time.Second, 10*time.Millisecond)
	}
	// Each run got the plaintext: a's step; b's parent output and step on
	// both its runs (the step from its checkpoint on the second), then the
	// signal.
	for _, c := range []struct {
		seen *flowSeen
		m    string
	}{{&sealedSeen, marker}, {&plainSeen, control}} {
		c.seen.mu.Lock()
		require.Equal(t, 1, c.seen.waits, "b slept once in its wait")
		require.ElementsMatch(t, []string{c.m + "-step", c.m + "-out", c.m + "-step2", c.m + "-out", c.m + "-step2", c.m + "-signal"},
			c.seen.got)
		c.seen.mu.Unlock()
	}

	// Reading an output: opened with the keyring, the envelope without.
	st, err := enc.WorkflowGet(ctx, wfSealed, true)
	require.NoError(t, err)
	var a skiplock.TaskStatus
	for _, ts := range st.TaskList {
		if ts.Name == "a" {
			a = ts
		}
	}
	require.JSONEq(t, `{"v": "`+marker+`-out"}`, string(a.Output))
	raw, err := enc.WorkflowTaskOutput(ctx, wfSealed, a.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"v": "`+marker+`-out"}`, string(raw))
	raw, err = newClient(t, db.Pool, skiplock.Config{}).WorkflowTaskOutput(ctx, wfSealed, a.ID)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"skiplock_encrypted": "v1.`+acmeKey+`.`)
	require.NotContains(t, string(raw), marker)

	heap := schemaHeap(t, db.Pool)
	require.True(t, bytes.Contains(heap, []byte(control+"-out")), "the scan finds a plain output in the heap")
	require.False(t, bytes.Contains(heap, []byte(marker)), "a sealed output, step or signal's plaintext is in the heap")
}

// Rotation with jobs in flight: jobs sealed under the old key and the new
// run side by side while KeysRotate re-seals the ready ones and a dead
// letter; afterwards a keyring without the old key runs every job left and
// opens the dead letter.
func TestKeysRotateWithJobsInFlight(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	path, oldID := newKeyringFile(t)
	oldRing := loadKeyring(t, path)
	old := newClient(t, db.Pool, skiplock.Config{Encryption: oldRing})
	want := map[int64]string{}
	enqueue := func(c *skiplock.Client, n int) {
		for i := 0; i < n; i++ {
			email := randomMarker("r-")
			r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret", Payload: secretArgs{Email: email}})
			require.NoError(t, err)
			want[r.ID] = email
		}
	}
	enqueue(old, 30)
	// One of them is a dead letter: the rotation re-seals it too.
	deadEmail := randomMarker("dead-")
	deadJob, err := old.Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret", Payload: secretArgs{Email: deadEmail}})
	require.NoError(t, err)
	_, err = old.JobCancel(ctx, deadJob.ID)
	require.NoError(t, err)
	require.Equal(t, 1, countDead(t, db.Pool))
	newID, err := skiplock.KeyringAddKey(path, "")
	require.NoError(t, err)
	both := loadKeyring(t, path)
	require.Equal(t, newID, both.Current())
	require.Equal(t, sortedIDs(oldID, newID), both.KeyIDs())
	enqueue(newClient(t, db.Pool, skiplock.Config{Encryption: both}), 30)

	// A worker with both keys runs jobs while the rotation re-seals the
	// ready ones under the new key.
	// The first claims are held running until the rotation is done.
	started, rotated := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	seen := map[int64]string{}
	w := newClient(t, db.Pool, skiplock.Config{Encryption: both, PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
		Pools: []skiplock.WorkerPool{{Concurrency: 2, BatchSize: 2}}})
	require.NoError(t, skiplock.Handle(w, "secret", func(ctx context.Context, j *skiplock.Job[secretArgs]) error {
		once.Do(func() { close(started) })
		<-rotated
		mu.Lock()
		defer mu.Unlock()
		seen[j.ID] = j.Args.Email
		return nil
	}))
	require.NoError(t, w.Start(ctx))
	<-started
	var oldReady int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs
		WHERE state = 'ready' AND split_part(payload->>'skiplock_encrypted', '.', 2) = $1`, oldID).Scan(&oldReady))
	t.Logf("%d ready jobs sealed under the old key when the rotation starts", oldReady)
	rotator := newClient(t, db.Pool, skiplock.Config{Encryption: both})
	n, err := rotator.KeysRotate(ctx)
	require.NoError(t, err)
	close(rotated)
	t.Logf("re-sealed %d ready jobs while the worker held its first claims running", n)
	// The ready jobs under the old key and the dead letter; fewer if the
	// worker claimed a few more meanwhile (its next batch): those run with
	// the old key, which it still holds.
	require.Positive(t, n)
	require.LessOrEqual(t, n, int64(oldReady)+1)
	require.NoError(t, w.Stop(ctx))
	// Jobs the worker had claimed and handed back at its stop, without
	// running them, are ready again under the old key: a second pass, once
	// the first pass's running jobs are settled, re-seals them (the
	// procedure docs/security.md gives before deleting a key).
	m, err := rotator.KeysRotate(ctx)
	require.NoError(t, err)
	t.Logf("the second pass re-sealed %d", m)

	// Whatever is left is sealed under the new key only: a keyring without
	// the old key runs it all.
	var oldLeft int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs
		WHERE split_part(payload->>'skiplock_encrypted', '.', 2) = $1`, oldID).Scan(&oldLeft))
	require.Zero(t, oldLeft, "no ready job still sealed under the old key")
	newOnly := withoutKey(t, path, oldID)
	for id, email := range runAll(t, newClient(t, db.Pool, skiplock.Config{Encryption: newOnly,
		PollInterval: 20 * time.Millisecond, Logger: quietLogger()}), db.Pool) {
		seen[id] = email
	}
	require.Equal(t, want, seen, "every job ran once with its own plaintext")
	require.Equal(t, 1, countDead(t, db.Pool))
	p, err := newClient(t, db.Pool, skiplock.Config{Encryption: newOnly}).JobPayload(ctx, deadJob.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"email": "`+deadEmail+`"}`, string(p), "the dead letter opens without the old key")
}

func sortedIDs(ids ...string) []string {
	out := append([]string(nil), ids...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// A tenant's key deleted: its jobs become dead letters whose error names
// the key (crypto-shredding), never a crash; other tenants' sealed jobs and
// plain jobs run. A client without a keyring fails a sealed job's attempt
// (retried), so a rollout's old worker does not destroy it.
func TestTenantKeyDeleted(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	path, _ := newKeyringFile(t)
	acmeKey, err := skiplock.KeyringAddKey(path, "acme")
	require.NoError(t, err)
	ring := loadKeyring(t, path)
	c := newClient(t, db.Pool, skiplock.Config{Encryption: ring})
	acme, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret", Tenant: "acme", Payload: secretArgs{Email: "a@acme"}})
	require.NoError(t, err)
	other, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret", Tenant: "globex", Payload: secretArgs{Email: "g@globex"}})
	require.NoError(t, err)
	plain, err := newClient(t, db.Pool, skiplock.Config{}).Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret",
		Payload: secretArgs{Email: "p@plain"}})
	require.NoError(t, err)
	p, err := newClient(t, db.Pool, skiplock.Config{}).JobPayload(ctx, acme.ID)
	require.NoError(t, err)
	require.Contains(t, string(p), "v1."+acmeKey+".", "acme's job sealed under acme's key")

	// A worker without a keyring: the sealed jobs' attempts fail and are
	// retried; nothing is dead-lettered.
	noKeys := newClient(t, db.Pool, skiplock.Config{PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
		Backoff: func(int) time.Duration { return time.Hour }})
	ran := make(chan int64, 3)
	require.NoError(t, skiplock.Handle(noKeys, "secret", func(ctx context.Context, j *skiplock.Job[secretArgs]) error {
		ran <- j.ID
		return nil
	}))
	require.NoError(t, noKeys.Start(ctx))
	require.Equal(t, plain.ID, <-ran)
	require.Eventually(t, func() bool { return countJobs(t, db.Pool, "attempts = 1 AND state = 'ready'") == 2 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, noKeys.Stop(ctx))
	require.Zero(t, countDead(t, db.Pool))
	var lastErr string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_error FROM skiplock.jobs WHERE id = $1`, acme.ID).Scan(&lastErr))
	require.Contains(t, lastErr, "this client has no keyring")
	_, err = db.Pool.Exec(ctx, `UPDATE skiplock.jobs SET run_at = now()`)
	require.NoError(t, err)

	// acme's key deleted from the keyring: acme's job is dead, globex's runs.
	shredded := withoutKey(t, path, acmeKey)
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret", Tenant: "acme", Payload: secretArgs{Email: "x"}})
	require.NoError(t, err, "the old client still holds acme's key")
	_, err = newClient(t, db.Pool, skiplock.Config{Encryption: shredded}).Enqueue(ctx,
		skiplock.EnqueueParams{Kind: "secret", Tenant: "acme", Payload: secretArgs{Email: "y"}})
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe, "no new job for a shredded tenant: it would fall back to a key others hold")
	require.Equal(t, "payload", fe.Field)

	seen := runAll(t, newClient(t, db.Pool, skiplock.Config{Encryption: shredded, PollInterval: 20 * time.Millisecond,
		Logger: quietLogger()}), db.Pool)
	require.Equal(t, map[int64]string{other.ID: "g@globex"}, seen)
	rows, err := db.Pool.Query(ctx, `SELECT id, reason, last_error FROM skiplock.jobs_dead ORDER BY id`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var id int64
		var reason, text string
		require.NoError(t, rows.Scan(&id, &reason, &text))
		require.Equal(t, "discarded", reason)
		require.Contains(t, text, `sealed with key "`+acmeKey+`", which the keyring does not hold`)
		require.Contains(t, text, "crypto-shredded")
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 2, n, "acme's two jobs")
}

// Migration 24: a sealed payload is stored split, its key id in payload and
// its nonce, ciphertext and tag as bytes in sealed, whichever way it came
// in (Enqueue through enqueue_job, EnqueueMany's COPY, an envelope a SQL
// producer passes), and each copy of the row (the history, a dead letter,
// its retry) keeps the bytes. What shows a payload sees the whole envelope
// (envelope()); the handler the plaintext. A malformed envelope is stored
// as given and dead-lettered by the worker, which cannot open it.
func TestSealedPayloadStoredAsBytes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	path, keyID := newKeyringFile(t)
	worker := func() *skiplock.Client {
		return newClient(t, db.Pool, skiplock.Config{Encryption: loadKeyring(t, path), PollInterval: 20 * time.Millisecond,
			Logger: quietLogger()})
	}
	c := worker()
	plain := newClient(t, db.Pool, skiplock.Config{})
	emails := map[string]string{"one": randomMarker("one-"), "many1": randomMarker("many1-"), "many2": randomMarker("many2-"),
		"sql": randomMarker("sql-"), "fail": randomMarker("fail-")}

	one, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "secret", Payload: secretArgs{Email: emails["one"]}})
	require.NoError(t, err)
	n, err := c.EnqueueMany(ctx, []skiplock.EnqueueParams{
		{Kind: "secret", Payload: secretArgs{Email: emails["many1"]}},
		{Kind: "secret", Payload: secretArgs{Email: emails["many2"]}},
	})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	// A SQL producer passes an envelope made with the same key: one job's,
	// as someone with the keyring and the format would make it.
	ref, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "ref", Payload: secretArgs{Email: emails["sql"]}})
	require.NoError(t, err)
	env, err := plain.JobPayload(ctx, ref.ID)
	require.NoError(t, err)
	require.Contains(t, string(env), `"skiplock_encrypted": "v1.`+keyID+`.`, "JobPayload rebuilds the whole envelope")
	_, err = c.JobDelete(ctx, ref.ID)
	require.NoError(t, err)
	var viaSQL, malformed int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'secret', payload => $1::jsonb)`,
		string(env)).Scan(&viaSQL))
	bad := `{"skiplock_encrypted": "v1.` + keyID + `.not*base64"}`
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'secret', payload => $1::jsonb)`,
		bad).Scan(&malformed))
	failing, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "fail", MaxAttempts: 1, Payload: secretArgs{Email: emails["fail"]}})
	require.NoError(t, err)

	// At rest: split, the bytes exactly nonce (12) + plaintext + tag (16).
	stored := func(table string, id int64) (payload string, sealed []byte) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT payload::text, sealed FROM skiplock.`+table+` WHERE id = $1`, id).
			Scan(&payload, &sealed))
		return payload, sealed
	}
	stub := `{"skiplock_encrypted": "v1.` + keyID + `"}`
	var ids []int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM skiplock.jobs WHERE kind = 'secret' AND id <> $1`,
		malformed).Scan(&ids))
	require.Len(t, ids, 4)
	require.Equal(t, []int64{one.ID, viaSQL}, []int64{ids[0], ids[3]})
	want := map[int64]string{ids[0]: emails["one"], ids[1]: emails["many1"], ids[2]: emails["many2"], ids[3]: emails["sql"],
		failing.ID: emails["fail"]}
	for id, email := range want {
		p, s := stored("jobs", id)
		require.Equal(t, stub, p, "job %d: payload holds the key id only", id)
		require.Len(t, s, 12+len(`{"email":"`+email+`"}`)+16, "job %d: the ciphertext's bytes", id)
	}
	p, s := stored("jobs", malformed)
	require.JSONEq(t, bad, p, "a malformed envelope is stored as given")
	require.Nil(t, s)

	// The handler sees the plaintext of every form; the malformed one and
	// the failing one end as dead letters.
	var mu sync.Mutex
	seen := map[int64]string{}
	record := func(ctx context.Context, j *skiplock.Job[secretArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		seen[j.ID] = j.Args.Email
		if j.ID == failing.ID {
			return errors.New("fails on its first run")
		}
		return nil
	}
	require.NoError(t, skiplock.Handle(c, "fail", record))
	for id, email := range runAll(t, c, db.Pool) {
		seen[id] = email
	}
	require.Equal(t, want, seen, "each handler got its plaintext; the malformed envelope none")

	// The history and the dead letters keep the bytes; what shows a
	// payload rebuilds the envelope.
	for _, id := range ids {
		p, s := stored("jobs_done", id)
		require.Equal(t, stub, p)
		require.NotEmpty(t, s, "job %d: the history row keeps the ciphertext's bytes", id)
	}
	var viaSQLEnv string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.envelope(payload, sealed)::text FROM skiplock.jobs_done WHERE id = $1`,
		viaSQL).Scan(&viaSQLEnv))
	require.JSONEq(t, string(env), viaSQLEnv, "envelope() gives back what the SQL producer passed")
	p, s = stored("jobs_dead", failing.ID)
	require.Equal(t, stub, p)
	require.NotEmpty(t, s, "the dead letter keeps the ciphertext's bytes")
	got, err := c.JobPayload(ctx, failing.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"email": "`+emails["fail"]+`"}`, string(got), "JobPayload opens a dead letter's split envelope")
	var reason string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT reason FROM skiplock.jobs_dead WHERE id = $1`, malformed).Scan(&reason))
	require.Equal(t, "discarded", reason)

	// A retry carries the bytes, and runs with the plaintext.
	retried, err := c.JobRetry(ctx, failing.ID)
	require.NoError(t, err)
	p, s = stored("jobs", retried)
	require.Equal(t, stub, p)
	require.NotEmpty(t, s)
	w := worker()
	require.NoError(t, skiplock.Handle(w, "fail", record))
	runAll(t, w, db.Pool)
	require.Equal(t, emails["fail"], seen[retried], "the retry's handler got the plaintext")
}
