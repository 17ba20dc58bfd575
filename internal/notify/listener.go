// Package notify runs the one LISTEN connection of a process and fans its
// notifications out to the parts of the process that subscribe to a
// channel (the worker runtime: ready jobs and cancellations; Client.Wait:
// finished jobs). NOTIFY is a latency optimisation, never a correctness
// mechanism: subscribers always keep polling, and every (re)LISTEN is
// reported so they can poll at once for anything sent while they were not
// listening.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/service"
)

// Config configures a Listener: how it reaches the database. What it
// listens to comes from its subscriptions.
type Config struct {
	// Connect opens a dedicated connection (never one from a pool: a pool may
	// recycle it and silently drop the LISTEN).
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Direct, when set, runs on each new connection before any LISTEN and
	// reports whether it reaches a server session directly. Through a
	// pooler it does not: a transaction-mode pooler hands the session that
	// ran LISTEN to other clients, so notifications go astray (and a
	// self-test may even pass by luck). The listener then LISTENs on
	// nothing, calls every subscription's OnPooled (and, at once, that of
	// every later one) and never connects again; subscribers keep polling.
	Direct func(ctx context.Context, conn *pgx.Conn) (bool, error)
	// IdleCheck is how long the connection may be silent before it is pinged
	// to detect a dead peer (default 15s).
	IdleCheck time.Duration
	Logger    *slog.Logger
}

// Subscription is one part of the process listening on the connection:
// its channels, the statements that subscribe the connection to them and
// back, and its callbacks. The callbacks run on the listener's goroutine,
// one at a time, never after the subscription's unsubscribe returned: they
// must not block, nor call Subscribe or an unsubscribe.
type Subscription struct {
	// Channels are the channel names whose notifications go to OnNotify.
	// Two subscriptions of one listener never share a channel.
	Channels []string
	// Listen subscribes the connection to Channels (the data layer's
	// store.Listen, store.ListenDone).
	Listen func(ctx context.Context, conn *pgx.Conn) error
	// Unlisten undoes Listen on a connection that stays up for other
	// subscriptions (store.Unlisten, store.UnlistenDone).
	Unlisten func(ctx context.Context, conn *pgx.Conn) error
	// SelfTest, when set, sends payload to one of Channels
	// (store.NotifySelfTest) after each Listen: the listener checks that it
	// arrives, which it does not behind a transaction-mode pooler. Without
	// it OnConnect reports false.
	SelfTest func(ctx context.Context, conn *pgx.Conn, payload string) error
	// OnNotify receives every notification on Channels.
	OnNotify func(channel, payload string)
	// OnConnect is called after each successful Listen (on a new
	// connection, or on the current one for a new subscription), with
	// whether the self-test passed.
	OnConnect func(delivered bool)
	// OnDisconnect is called when the connection is lost (and on each
	// failed attempt to get it back).
	OnDisconnect func(err error)
	// OnPooled is called when Direct reported a pooler.
	OnPooled func()
}

// Listener owns the LISTEN connection a process shares between its
// subscriptions: it connects when the first subscription comes, LISTENs
// for each (and UNLISTENs when one leaves), and closes the connection when
// the last one leaves. Its goroutine follows the shared service lifecycle
// (service.Background), started by Subscribe and stopped by the last
// unsubscribe.
type Listener struct {
	cfg Config

	life sync.Mutex          // serializes starting and stopping the goroutine; guards bg
	bg   *service.Background // the running goroutine's lifecycle; nil when none runs

	mu        sync.Mutex         // guards subs, leaving, interrupt and pooled; held while callbacks run
	subs      []*sub             // the subscriptions, in the order they came
	leaving   []*sub             // unsubscribed while LISTENing on the current connection: to UNLISTEN
	interrupt context.CancelFunc // ends the current wait for a notification; nil when not waiting
	pooled    bool               // Direct found a pooler: the listener never connects again
}

// sub is a Subscription and its state on the current connection.
type sub struct {
	Subscription
	live bool // LISTENed on the current connection; guarded by Listener.mu
}

// New returns a Listener; it connects once something subscribes.
func New(cfg Config) *Listener {
	if cfg.IdleCheck <= 0 {
		cfg.IdleCheck = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Listener{cfg: cfg}
}

// Subscribe adds s: the connection LISTENs on its channels (connecting
// first if nothing else listens) and OnConnect follows. It returns the
// function that removes s again (idempotent); when s was the last
// subscription it closes the connection and waits for the goroutine.
func (l *Listener) Subscribe(s Subscription) (unsubscribe func()) {
	l.life.Lock()
	defer l.life.Unlock()
	sb := &sub{Subscription: s}
	l.mu.Lock()
	l.subs = append(l.subs, sb)
	pooled := l.pooled
	if pooled && sb.OnPooled != nil {
		sb.OnPooled()
	}
	l.interruptWait()
	l.mu.Unlock()
	if !pooled && l.bg == nil {
		l.bg = &service.Background{}
		l.bg.Start(context.Background(), l.run)
	}
	var once sync.Once
	return func() { once.Do(func() { l.unsubscribe(sb) }) }
}

func (l *Listener) unsubscribe(sb *sub) {
	l.life.Lock()
	defer l.life.Unlock()
	l.mu.Lock()
	i := slices.Index(l.subs, sb)
	if i < 0 {
		l.mu.Unlock()
		return
	}
	l.subs = slices.Delete(l.subs, i, i+1)
	if sb.live {
		l.leaving = append(l.leaving, sb)
	}
	last := len(l.subs) == 0
	l.interruptWait()
	l.mu.Unlock()
	if last && l.bg != nil {
		_ = l.bg.Stop(context.Background())
		l.bg = nil
	}
}

// interruptWait makes the goroutine stop waiting for a notification and
// look at the subscriptions again. l.mu must be held.
func (l *Listener) interruptWait() {
	if l.interrupt != nil {
		l.interrupt()
		l.interrupt = nil
	}
}

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
		l.mu.Lock()
		if errors.Is(err, errPooled) {
			l.pooled = true
			for _, s := range l.subs {
				if s.OnPooled != nil {
					s.OnPooled()
				}
			}
			l.mu.Unlock()
			return
		}
		for _, s := range l.subs {
			if s.OnDisconnect != nil {
				s.OnDisconnect(err)
			}
		}
		l.mu.Unlock()
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
// once the subscriptions' LISTENs are in place.
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
	// A new connection listens on nothing yet.
	l.mu.Lock()
	for _, s := range l.subs {
		s.live = false
	}
	l.leaving = nil
	l.mu.Unlock()
	if err := l.sync(ctx, conn, func() { listening(conn) }); err != nil {
		return err
	}
	for {
		l.mu.Lock()
		if l.changed() {
			l.mu.Unlock()
			if err := l.sync(ctx, conn, nil); err != nil {
				return err
			}
			continue
		}
		// A subscription that comes or goes cancels this wait (interruptWait).
		waitCtx, cancel := context.WithTimeout(ctx, l.cfg.IdleCheck)
		l.interrupt = cancel
		l.mu.Unlock()
		n, err := conn.WaitForNotification(waitCtx)
		interrupted := errors.Is(waitCtx.Err(), context.Canceled)
		cancel()
		l.mu.Lock()
		l.interrupt = nil
		l.mu.Unlock()
		switch {
		case err == nil:
			l.route(n.Channel, n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case interrupted:
			// The subscriptions changed: sync at the top of the loop.
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

// changed reports whether a subscription came or left since the last
// sync. l.mu must be held.
func (l *Listener) changed() bool {
	if len(l.leaving) > 0 {
		return true
	}
	for _, s := range l.subs {
		if !s.live {
			return true
		}
	}
	return false
}

// sync brings the connection's LISTENs in line with the subscriptions:
// UNLISTEN for those that left, LISTEN for those that came, then, when
// set, listening, and the newcomers' self-tests and OnConnect. An error
// means the connection is no good.
func (l *Listener) sync(ctx context.Context, conn *pgx.Conn, listening func()) error {
	l.mu.Lock()
	leaving := l.leaving
	l.leaving = nil
	var joining []*sub
	for _, s := range l.subs {
		if !s.live {
			joining = append(joining, s)
		}
	}
	l.mu.Unlock()
	for _, s := range leaving {
		if s.Unlisten != nil {
			if err := s.Unlisten(ctx, conn); err != nil {
				return fmt.Errorf("unlisten: %w", err)
			}
		}
	}
	for _, s := range joining {
		if err := s.Listen(ctx, conn); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	if listening != nil {
		listening()
	}
	for _, s := range joining {
		delivered := l.selfTest(ctx, conn, s)
		l.mu.Lock()
		if slices.Contains(l.subs, s) {
			s.live = true
			if s.OnConnect != nil {
				s.OnConnect(delivered)
			}
		} else {
			l.leaving = append(l.leaving, s) // it left meanwhile: undo its LISTEN
		}
		l.mu.Unlock()
	}
	return nil
}

// route hands a notification to the subscription of its channel.
func (l *Listener) route(channel, payload string) {
	if strings.HasPrefix(payload, selfTestPrefix) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.subs {
		if s.OnNotify != nil && slices.Contains(s.Channels, channel) {
			s.OnNotify(channel, payload)
		}
	}
}

// selfTest sends a notification to itself on one of s's channels and waits
// briefly for it: behind a transaction-mode pooler LISTEN is accepted but
// nothing ever arrives.
func (l *Listener) selfTest(ctx context.Context, conn *pgx.Conn, s *sub) bool {
	if s.SelfTest == nil {
		return false
	}
	token := fmt.Sprintf("%s%d", selfTestPrefix, rand.Int64())
	if err := s.SelfTest(ctx, conn, token); err != nil {
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
		l.route(n.Channel, n.Payload)
	}
}
