package skiplock_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// The cost of payload encryption (issue 38 §3), each figure beside the
// same measurement without a keyring, in the same run:
//
//	go test -run '^$' -bench 'PayloadEncryption' -benchtime 2000x .
//
// enqueue_1KiB: one Enqueue of a 1 KiB payload (one round trip each).
// drain_noop_1KiB: b.N jobs of 1 KiB seeded with EnqueueMany (not timed),
// then drained by a started client with a no-op handler (timed): jobs/s,
// and the server's WAL per job during the drain. drain_noop_small: the
// same with a payload of 12 bytes ({"n":1000000}), as skiplock bench's.
// docs/security.md records the figures.
func BenchmarkPayloadEncryption(b *testing.B) {
	path := filepath.Join(b.TempDir(), "keys.json")
	_, err := skiplock.KeyringAddKey(path, "")
	require.NoError(b, err)
	ring, err := skiplock.LoadKeyring(path)
	require.NoError(b, err)
	pad := strings.Repeat("x", 1024-len(`{"n":0000000,"p":""}`))
	payload := func(i int) json.RawMessage {
		return json.RawMessage(`{"n":` + strconv.Itoa(1000000+i) + `,"p":"` + pad + `"}`)
	}
	small := func(i int) json.RawMessage { return json.RawMessage(`{"n":` + strconv.Itoa(1000000+i) + `}`) }
	for _, mode := range []struct {
		name string
		ring *skiplock.Keyring
	}{{"plain", nil}, {"sealed", ring}} {
		b.Run("enqueue_1KiB/"+mode.name, func(b *testing.B) {
			db := dbtest.New(b)
			c, err := skiplock.NewClient(db.Pool, skiplock.Config{Encryption: mode.ring})
			require.NoError(b, err)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Payload: payload(i)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, size := range []struct {
			name    string
			payload func(int) json.RawMessage
		}{{"1KiB", payload}, {"small", small}} {
			b.Run("drain_noop_"+size.name+"/"+mode.name, func(b *testing.B) { benchDrain(b, mode.ring, size.payload) })
		}
	}
}

// benchDrain seeds b.N jobs of payload(i) with EnqueueMany and times their
// drain by a started client with a no-op handler.
func benchDrain(b *testing.B, ring *skiplock.Keyring, payload func(int) json.RawMessage) {
	db := dbtest.New(b)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Encryption: ring, PollInterval: 10 * time.Millisecond,
		Logger: quietLogger(), Pools: []skiplock.WorkerPool{{Concurrency: 16, BatchSize: 50}}})
	require.NoError(b, err)
	require.NoError(b, skiplock.Handle(c, "k", func(context.Context, *skiplock.Job[json.RawMessage]) error { return nil }))
	ps := make([]skiplock.EnqueueParams, b.N)
	for i := range ps {
		ps[i] = skiplock.EnqueueParams{Kind: "k", Payload: payload(i)}
	}
	for len(ps) > 0 {
		n := min(len(ps), 5000)
		_, err := c.EnqueueMany(ctx, ps[:n])
		require.NoError(b, err)
		ps = ps[n:]
	}
	var walBefore string
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&walBefore))
	b.ResetTimer()
	start := time.Now()
	require.NoError(b, c.Start(ctx))
	for {
		var left int
		require.NoError(b, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs`).Scan(&left))
		if left == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	require.NoError(b, c.Stop(ctx))
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	// The drain's WAL, the whole server's (run it on an idle one).
	var wal float64
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - $1::pg_lsn`, walBefore).Scan(&wal))
	b.ReportMetric(wal/float64(b.N), "WAL_B/job")
}
