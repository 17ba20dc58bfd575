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

// syncBuffer is a log sink the listener's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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
	logs := &syncBuffer{}
	st := store.New("reconnect_test") // channels reconnect_test.jobs and .cancel
	l := notify.New(notify.Config{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			if refuse > 0 {
				refuse--
				return nil, context.DeadlineExceeded // what a dead host looks like to a client
			}
			cfg, err := pgx.ParseConfig(db.URL)
			if err != nil {
				return nil, err
			}
			cfg.RuntimeParams["application_name"] = app
			return pgx.ConnectConfig(ctx, cfg)
		},
		Listen:    st.Listen,
		SelfTest:  st.NotifySelfTest,
		OnNotify:  func(_, payload string) { got <- payload },
		OnConnect: func(delivered bool) { connects <- delivered },
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
	})
	require.NoError(t, l.Start(ctx))
	t.Cleanup(func() { require.NoError(t, l.Stop(context.Background())) })
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
