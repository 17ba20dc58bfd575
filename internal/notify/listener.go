// Package notify runs the one LISTEN connection of a process and fans its
// notifications out. NOTIFY is a latency optimisation, never a correctness
// mechanism: callers always keep polling, and every reconnect is reported so
// they can poll at once for anything sent while the connection was down.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/service"
)

// Config configures a Listener.
type Config struct {
	// Connect opens a dedicated connection (never one from a pool: a pool may
	// recycle it and silently drop the LISTEN).
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Listen subscribes a new connection to its channels (the data layer's
	// store.Listen).
	Listen func(ctx context.Context, conn *pgx.Conn) error
	// SelfTest, when set, sends payload to one of the channels Listen
	// subscribed to (store.NotifySelfTest): the listener checks that it
	// arrives, which it does not behind a transaction-mode pooler. Without
	// it OnConnect reports false.
	SelfTest func(ctx context.Context, conn *pgx.Conn, payload string) error
	// OnNotify receives every notification. It must not block.
	OnNotify func(channel, payload string)
	// OnConnect is called after each successful (re)LISTEN, with whether the
	// NOTIFY self-test passed (false behind a transaction-mode pooler).
	OnConnect func(delivered bool)
	// OnDisconnect is called when the connection is lost.
	OnDisconnect func(err error)
	// Direct, when set, runs on each new connection before LISTEN and
	// reports whether it reaches a server session directly. Through a
	// pooler it does not: a transaction-mode pooler hands the session that
	// ran LISTEN to other clients, so notifications go astray (and the
	// self-test may even pass by luck). The listener then LISTENs on
	// nothing, calls OnPooled once and ends; callers keep polling.
	Direct func(ctx context.Context, conn *pgx.Conn) (bool, error)
	// OnPooled is called when Direct reported a pooler.
	OnPooled func()
	// IdleCheck is how long the connection may be silent before it is pinged
	// to detect a dead peer (default 15s).
	IdleCheck time.Duration
	Logger    *slog.Logger
}

// Listener owns the LISTEN connection. Start and Stop follow the shared
// service lifecycle (service.Background): idempotent, and Stop is safe if
// Start never ran.
type Listener struct {
	cfg Config
	bg  service.Background
}

// New returns a Listener; call Start to run it.
func New(cfg Config) *Listener {
	if cfg.IdleCheck <= 0 {
		cfg.IdleCheck = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Listener{cfg: cfg}
}

// Start runs the listener in a goroutine until Stop.
func (l *Listener) Start(ctx context.Context) error {
	l.bg.Start(ctx, l.run)
	return nil
}

// Stop ends the listener and waits for it (or for ctx).
func (l *Listener) Stop(ctx context.Context) error { return l.bg.Stop(ctx) }

const selfTestPrefix = "skiplock-selftest:"

// errPooled ends the listener: its connection goes through a pooler.
var errPooled = errors.New("the connection goes through a pooler")

// Reconnect backoff: the first retry after a lost connection waits
// minBackoff (plus up to half of it as jitter), each failed attempt doubles
// it up to maxBackoff, and a connection that reaches LISTEN resets it. A
// failover (the old primary gone, the standby not yet promoted) is a few
// refused attempts, never a tight loop.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

func (l *Listener) run(ctx context.Context) {
	backoff := minBackoff
	var lostAt time.Time // when the last LISTEN connection was lost; zero while none was
	failures := 0
	listening := func(conn *pgx.Conn) {
		if !lostAt.IsZero() {
			l.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "skiplock: listener reconnected",
				slog.String("server", serverAddr(conn)), slog.Duration("down_for", time.Since(lostAt).Round(time.Millisecond)),
				slog.Int("failed_attempts", failures))
		}
		lostAt, failures, backoff = time.Time{}, 0, minBackoff
	}
	for ctx.Err() == nil {
		err := l.session(ctx, listening)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errPooled) {
			if l.cfg.OnPooled != nil {
				l.cfg.OnPooled()
			}
			return
		}
		if l.cfg.OnDisconnect != nil {
			l.cfg.OnDisconnect(err)
		}
		if lostAt.IsZero() {
			lostAt = time.Now()
			l.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: listener disconnected; polling continues",
				slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
		} else {
			failures++
			// Every attempt is logged while the server is away (at most one
			// line per maxBackoff once the backoff is at its cap).
			l.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: listener reconnect failed; polling continues",
				slog.String("error", err.Error()), slog.Int("failed_attempts", failures),
				slog.Duration("down_for", time.Since(lostAt).Round(time.Millisecond)), slog.Duration("retry_in", backoff))
		}
		jitter := time.Duration(rand.Int64N(int64(backoff) / 2))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + jitter):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// serverAddr names the server a connection reached (host and port, never
// the connection string), so a reader sees which host a multi-host URL
// settled on after a failover.
func serverAddr(conn *pgx.Conn) string {
	if nc := conn.PgConn().Conn(); nc != nil {
		return nc.RemoteAddr().String()
	}
	return ""
}

// session runs one LISTEN connection until it fails; listening is called
// once the LISTENs are in place.
func (l *Listener) session(ctx context.Context, listening func(*pgx.Conn)) error {
	conn, err := l.cfg.Connect(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if l.cfg.Direct != nil {
		direct, err := l.cfg.Direct(ctx, conn)
		if err != nil {
			return fmt.Errorf("session check: %w", err)
		}
		if !direct {
			return errPooled
		}
	}
	if err := l.cfg.Listen(ctx, conn); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	listening(conn)
	delivered := l.selfTest(ctx, conn)
	if l.cfg.OnConnect != nil {
		l.cfg.OnConnect(delivered)
	}
	for {
		waitCtx, cancel := context.WithTimeout(ctx, l.cfg.IdleCheck)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			if len(n.Payload) >= len(selfTestPrefix) && n.Payload[:len(selfTestPrefix)] == selfTestPrefix {
				continue
			}
			l.cfg.OnNotify(n.Channel, n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			// Silence: make sure the peer is still there.
			pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping: %w", err)
			}
		default:
			return err
		}
	}
}

// selfTest sends a notification to itself and waits briefly for it: behind a
// transaction-mode pooler LISTEN is accepted but nothing ever arrives.
func (l *Listener) selfTest(ctx context.Context, conn *pgx.Conn) bool {
	if l.cfg.SelfTest == nil {
		return false
	}
	token := fmt.Sprintf("%s%d", selfTestPrefix, rand.Int64())
	if err := l.cfg.SelfTest(ctx, conn, token); err != nil {
		return false
	}
	deadline, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(deadline)
		if err != nil {
			return false
		}
		if n.Payload == token {
			return true
		}
		l.cfg.OnNotify(n.Channel, n.Payload)
	}
}
