package importer

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/sqlfile"
)

// heldAfterCrash puts n tasks of queue q in asynq's layout (a task hash and
// the pending list, as asynq's enqueue script writes them), takes them
// with the claim script, and records a PostgreSQL transaction that
// enqueues them, committed or rolled back: what a run killed after its
// commit (or before it) leaves behind.
func heldAfterCrash(t *testing.T, ctx context.Context, a *asynqImport, q string, ids []string, commit bool) {
	t.Helper()
	for _, id := range ids {
		msg := appendTaskMessage(nil, "crash:recover", id, q, `{"id": "`+id+`"}`)
		if err := a.o.Redis.HSet(ctx, asynqPrefix(q)+"t:"+id, "msg", msg, "state", "pending").Err(); err != nil {
			t.Fatal(err)
		}
		if err := a.o.Redis.LPush(ctx, asynqPrefix(q)+"pending", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.o.Redis.SAdd(ctx, asynqQueuesKey, q).Err(); err != nil {
		t.Fatal(err)
	}
	held, err := a.claim(ctx, q, ids)
	if err != nil || len(held) != len(ids) {
		t.Fatalf("claim: %d of %d, %v", len(held), len(ids), err)
	}
	tx, err := a.o.Dest.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var xid string
	if err := tx.QueryRow(ctx, a.q["xact_id"]).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := a.script(ctx, markScript, q, xid, ids); err != nil {
		t.Fatal(err)
	}
	var ps []skiplock.EnqueueParams
	for _, h := range held {
		task, err := decodeTask(h.msg)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, asynqParams(q, h, task))
	}
	if _, err := a.o.Client.EnqueueManyTx(ctx, tx, ps); err != nil {
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// appendTaskMessage encodes the TaskMessage fields the import reads, as
// asynq's protobuf encoder would (field numbers of asynq.proto).
func appendTaskMessage(b []byte, typ, id, queue, payload string) []byte {
	str := func(b []byte, num int, s string) []byte {
		b = append(b, byte(protowire.EncodeTag(protowire.Number(num), protowire.BytesType)), byte(len(s)))
		return append(b, s...)
	}
	b = str(b, 1, typ)
	b = str(b, 2, payload)
	b = str(b, 3, id)
	b = str(b, 4, queue)
	return append(b, byte(protowire.EncodeTag(5, protowire.VarintType)), 3) // retry 3
}

// TestAsynqRecover settles each kind of batch a killed run leaves held: a
// committed one is only removed from Redis (no second job, even though its
// jobs already finished), a rolled-back one is imported again, and a held
// task with no transaction recorded is imported too.
func TestAsynqRecover(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (.ci/install-redis.sh)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer rdb.Close()
	for i := 0; rdb.Ping(ctx).Err() != nil; i++ {
		if i > 100 {
			t.Fatal("redis-server did not answer")
		}
		time.Sleep(50 * time.Millisecond)
	}
	db := dbtest.New(t)
	client, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	opts := AsynqOptions{Redis: rdb, Dest: db.Pool, Client: client}
	sum := newSummary("asynq", false)
	a := &asynqImport{o: opts, q: sqlfile.Render(rawSQL, "skiplock", nil), sum: &sum, refused: map[string]bool{}, refusedIn: map[string]int64{}}

	heldAfterCrash(t, ctx, a, "default", []string{"c1", "c2", "c3"}, true)
	// The committed jobs run and finish before the next import: their unique
	// key no longer guards, only the recorded transaction can tell.
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %q.jobs WHERE unique_key LIKE 'asynq:c%%'`, db.Schema)); err != nil {
		t.Fatal(err)
	}
	heldAfterCrash(t, ctx, a, "default", []string{"r1", "r2"}, false)
	// Claimed, then killed before the transaction id was recorded.
	for _, id := range []string{"n1"} {
		msg := appendTaskMessage(nil, "crash:recover", id, "default", `{}`)
		rdb.HSet(ctx, asynqPrefix("default")+"t:"+id, "msg", msg, "state", "pending")
		rdb.LPush(ctx, asynqPrefix("default")+"pending", id)
		if held, err := a.claim(ctx, "default", []string{id}); err != nil || len(held) != 1 {
			t.Fatalf("claim: %v, %v", held, err)
		}
	}

	got, err := Asynq(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got.Recovered != 6 || got.MovedTotal != 3 {
		t.Fatalf("summary: %+v; want 6 recovered (3 removed only, 3 imported again), 3 moved", got)
	}
	rows, err := db.Pool.Query(ctx, fmt.Sprintf(`SELECT unique_key, count(*) FROM %q.jobs GROUP BY 1`, db.Schema))
	if err != nil {
		t.Fatal(err)
	}
	counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var k string
		var n int
		err := r.Scan(&k, &n)
		if n != 1 {
			t.Errorf("%s: %d jobs", k, n)
		}
		return k, err
	})
	if err != nil || len(counts) != 3 {
		t.Fatalf("jobs by key: %v, %v; want one for each of the 3 tasks imported again, none for the 3 finished", counts, err)
	}
	if n := rdb.HLen(ctx, asynqHolding("default")).Val(); n != 0 {
		t.Errorf("%d tasks still held", n)
	}
	if keys := rdb.Keys(ctx, asynqPrefix("default")+"t:*").Val(); len(keys) != 0 {
		t.Errorf("task hashes left: %v", keys)
	}
}
