package notify_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/store"
)

// TestListenerReconnects kills the listener's backend and refuses the next
// connection attempts, as a failover does (the old primary gone, the new
// one not promoted yet): the listener retries with backoff, logs each
// failure, LISTENs again once the server answers, says so with the server
// it reached and the outage's length, and notifications flow again.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	const app = "notify-reconnect-test"

	var mu sync.Mutex // guards refuse
	refuse := 0
	connects := make(chan bool, 10)
	got := make(chan string, 10)
	logs := &dbtest.LogBuffer{}
	st := store.New("reconnect_test") // channels reconnect_test.jobs and .cancel
	l := notify.New(notify.Config{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			if refuse > 0 {
				refuse--
				return nil, context.DeadlineExceeded // what a dead host looks like to a client
			}
			return connectAs(ctx, db.URL, app)
		},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	t.Cleanup(l.Subscribe(notify.Subscription{
		Channels:  []string{st.Channel(), st.CancelChannel()},
		Listen:    st.Listen,
		SelfTest:  st.NotifySelfTest,
		OnNotify:  func(_, payload string) { got <- payload },
		OnConnect: func(delivered bool) { connects <- delivered },
	}))
	require.True(t, <-connects, "the self-test passes on a direct connection")

	mu.Lock()
	refuse = 3
	mu.Unlock()
	_, err := db.Pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
	require.NoError(t, err)
	select {
	case <-connects:
	case <-time.After(20 * time.Second):
		t.Fatalf("the listener did not reconnect; log:\n%s", logs.String())
	}
	out := logs.String()
	require.Contains(t, out, "listener disconnected; polling continues")
	require.Equal(t, 3, bytes.Count([]byte(out), []byte("listener reconnect failed")), out)
	require.Contains(t, out, "listener reconnected")
	require.Contains(t, out, "failed_attempts=3")
	require.Contains(t, out, "server=")

	_, err = db.Pool.Exec(ctx, "SELECT pg_notify('reconnect_test.jobs', 'after')")
	require.NoError(t, err)
	select {
	case p := <-got:
		require.Equal(t, "after", p)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after the reconnect")
	}
}

func connectAs(ctx context.Context, url, app string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = app
	return pgx.ConnectConfig(ctx, cfg)
}

// TestListenerSharesOneConnection: the worker runtime's subscription (ready
// jobs, cancellations) and the waiters' (finished jobs) share one
// connection; each gets its own channels' notifications; a subscription
// that leaves UNLISTENs (and the waiters' takes its skiplock-wait name
// with it) while the other goes on; the last one closes the connection,
// and the next subscription connects again.
func TestListenerSharesOneConnection(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	const app = "notify-share-test"
	st := store.New("share_test") // channels share_test.jobs, .cancel, .done
	l := notify.New(notify.Config{
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return connectAs(ctx, db.URL, app) },
		Direct:  st.DirectSession,
		Logger:  slog.New(slog.DiscardHandler),
	})
	type note struct{ channel, payload string }
	runtimeGot, waitGot := make(chan note, 10), make(chan note, 10)
	runtimeUp, waitUp := make(chan bool, 10), make(chan bool, 10)
	stopRuntime := l.Subscribe(notify.Subscription{
		Channels: []string{st.Channel(), st.CancelChannel()},
		Listen:   st.Listen, Unlisten: st.Unlisten, SelfTest: st.NotifySelfTest,
		OnNotify:  func(c, p string) { runtimeGot <- note{c, p} },
		OnConnect: func(delivered bool) { runtimeUp <- delivered },
	})
	defer stopRuntime()
	require.True(t, <-runtimeUp, "the self-test passes on a direct connection")
	stopWait := l.Subscribe(notify.Subscription{
		Channels: []string{st.DoneChannel()},
		Listen:   st.ListenDone, Unlisten: st.UnlistenDone,
		OnNotify:  func(c, p string) { waitGot <- note{c, p} },
		OnConnect: func(delivered bool) { waitUp <- delivered },
	})
	require.False(t, <-waitUp, "no self-test asked for")

	// One backend, named skiplock-wait while it carries the waiters'.
	backends := func() map[string]int {
		rows, err := db.Pool.Query(ctx, `SELECT application_name, count(*)::int FROM pg_stat_activity
			WHERE datname = current_database() AND application_name IN ($1, 'skiplock-wait') GROUP BY 1`, app)
		require.NoError(t, err)
		m, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
			name string
			n    int
		}, error) {
			var v struct {
				name string
				n    int
			}
			return v, r.Scan(&v.name, &v.n)
		})
		require.NoError(t, err)
		out := map[string]int{}
		for _, v := range m {
			out[v.name] = v.n
		}
		return out
	}
	require.Equal(t, map[string]int{"skiplock-wait": 1}, backends())
	// What the one connection listens on, read on it by a subscription
	// that only looks.
	channels := func() []string {
		got := make(chan []string, 1)
		defer l.Subscribe(notify.Subscription{Listen: func(ctx context.Context, conn *pgx.Conn) error {
			rows, err := conn.Query(ctx, "SELECT c FROM pg_listening_channels() AS c ORDER BY c")
			if err != nil {
				return err
			}
			cs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			got <- cs
			return err
		}})()
		return <-got
	}
	require.Equal(t, []string{"share_test.cancel", "share_test.done", "share_test.jobs", "share_test.waiters"}, channels())

	// Each subscription gets its own channels.
	send := func(channel, payload string) {
		_, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload)
		require.NoError(t, err)
	}
	send(st.DoneChannel(), "41,42")
	send(st.Channel(), "default")
	require.Equal(t, note{st.DoneChannel(), "41,42"}, <-waitGot)
	require.Equal(t, note{st.Channel(), "default"}, <-runtimeGot)
	require.Empty(t, waitGot)
	require.Empty(t, runtimeGot)

	// The waiters leave: the connection stays for the runtime, listens on
	// its channels only, under its own name again.
	stopWait()
	require.Equal(t, []string{"share_test.cancel", "share_test.jobs", "share_test.waiters"}, channels())
	require.Equal(t, map[string]int{app: 1}, backends())
	send(st.DoneChannel(), "43")
	send(st.CancelChannel(), "7")
	require.Equal(t, note{st.CancelChannel(), "7"}, <-runtimeGot)
	require.Empty(t, waitGot)

	// The last one leaves: the connection closes; a new subscription
	// connects again.
	stopRuntime()
	waitGone := func() {
		deadline := time.Now().Add(10 * time.Second)
		for len(backends()) > 0 {
			require.True(t, time.Now().Before(deadline), "the connection outlived its last subscription: %v", backends())
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitGone()
	stopWait = l.Subscribe(notify.Subscription{
		Channels: []string{st.DoneChannel()},
		Listen:   st.ListenDone, Unlisten: st.UnlistenDone,
		OnNotify:  func(c, p string) { waitGot <- note{c, p} },
		OnConnect: func(delivered bool) { waitUp <- delivered },
	})
	<-waitUp
	require.Equal(t, map[string]int{"skiplock-wait": 1}, backends())
	send(st.DoneChannel(), "44")
	require.Equal(t, note{st.DoneChannel(), "44"}, <-waitGot)
	stopWait()
	waitGone()
}
