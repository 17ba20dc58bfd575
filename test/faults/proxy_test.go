package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// proxy is a TCP proxy between worker processes and the database, for the
// network faults pg_terminate_backend cannot make: a partition that closes
// nothing but delivers nothing for a while (Stall: the bytes are held, as
// TCP would keep retransmitting them, and arrive late), and a reset of
// every connection at once (DropAll).
type proxy struct {
	target string // guarded by mu: SetTarget moves it, as a failover moves a VIP
	ln     net.Listener
	ctx    context.Context // ends at Close: aborts dials in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop, each connection's setup and copy loops

	mu       sync.Mutex
	conns    map[*proxyConn]struct{}
	resume   chan struct{} // non-nil while stalled; closed when the stall ends
	until    time.Time     // end of the stall
	timer    *time.Timer   // ends the stall
	closed   bool
	accepted int
	cut      bool // CutReplies: the database's next bytes are dropped and the connection reset
}

// proxyConn is one proxied connection: the client's and the database's end.
type proxyConn struct {
	client, server net.Conn
	done           chan struct{} // closed with the connection
	once           sync.Once
}

// newProxy listens on 127.0.0.1 and forwards every connection to target
// (host:port). The test's cleanup closes it.
func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	p := &proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// SetTarget sends new connections to addr (host:port), as an HA manager
// moves a virtual IP to a promoted standby; open connections stay where
// they are.
func (p *proxy) SetTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// Addr is the proxy's host:port.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// url rewrites a database URL to connect through the proxy.
func (p *proxy) url(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(fmt.Sprintf("proxy: database URL: %v", err))
	}
	u.Host = p.Addr()
	return u.String()
}

func (p *proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (e.g. out of descriptors): back off.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects one client to the target and starts the copy loops.
func (p *proxy) serve(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 3 * time.Second}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := d.DialContext(p.ctx, "tcp", target)
	if err != nil { // the database is down: the client sees its connection closed
		_ = client.Close()
		return
	}
	pc := &proxyConn{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.close(p, false)
		return
	}
	p.conns[pc] = struct{}{}
	p.accepted++
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pipe(pc, server, client)
	go p.pipe(pc, client, server)
}

// pipe copies src to dst, holding each chunk it read while the proxy is
// stalled. When either direction ends, the whole connection is closed.
func (p *proxy) pipe(pc *proxyConn, dst, src net.Conn) {
	defer p.wg.Done()
	defer pc.close(p, false)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if dst == pc.client && p.cutting() {
				pc.close(p, true) // what the database said is lost with the connection
				return
			}
			if !p.pass(pc) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass is the gate: it returns once the proxy is not stalled, or false if
// the connection closed meanwhile.
func (p *proxy) pass(pc *proxyConn) bool {
	for {
		p.mu.Lock()
		r := p.resume
		p.mu.Unlock()
		if r == nil {
			return true
		}
		select {
		case <-r:
		case <-pc.done:
			return false
		}
	}
}

// close closes both ends; reset makes them send RST instead of FIN.
func (pc *proxyConn) close(p *proxy, reset bool) {
	pc.once.Do(func() {
		if reset {
			for _, c := range []net.Conn{pc.client, pc.server} {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
			}
		}
		close(pc.done)
		_ = pc.client.Close()
		_ = pc.server.Close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	})
}

// Stall stops forwarding bytes, in both directions, on every connection,
// current and new, for d (or until a longer stall ends), then delivers
// what it held. It returns at once.
func (p *proxy) Stall(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if until := time.Now().Add(d); until.After(p.until) {
		p.until = until
	}
	if p.resume == nil {
		p.resume = make(chan struct{})
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.timer = time.AfterFunc(time.Until(p.until), p.endStall)
}

func (p *proxy) endStall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume == nil {
		return
	}
	if left := time.Until(p.until); left > 0 { // extended meanwhile
		p.timer = time.AfterFunc(left, p.endStall)
		return
	}
	p.unstallLocked()
}

func (p *proxy) unstallLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
	p.until = time.Time{}
}

// Resume ends a stall now.
func (p *proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unstallLocked()
}

// Stalled reports whether a stall is in progress.
func (p *proxy) Stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume != nil
}

// Open returns the number of open connections; Accepted, how many the
// proxy connected to the target in all.
func (p *proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// DropAll resets every open connection, both ends at once, and returns how
// many it reset. Held bytes are lost; a stall goes on for new connections.
func (p *proxy) DropAll() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	for _, pc := range conns {
		pc.close(p, true)
	}
	return len(conns)
}

// CutReplies makes the proxy drop whatever the database sends next, on
// any connection, and reset that connection: a request that reached the
// database whose reply never comes back, the case where a client cannot
// know what happened.
func (p *proxy) CutReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
}

func (p *proxy) cutting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Close stops listening, closes every connection and waits for every
// goroutine of the proxy to end. It is idempotent.
func (p *proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	p.DropAll() // before the stall ends: nothing held is delivered
	p.Resume()
	p.wg.Wait()
}

// echoServer accepts connections on 127.0.0.1 and echoes what it reads;
// the test's cleanup stops it and waits for its goroutines.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// roundTrip writes msg and reads it back within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	return readBack(c, msg, timeout)
}

func readBack(c net.Conn, msg string, timeout time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("read %q, want %q", buf, msg)
	}
	return nil
}

// TestProxyStall: bytes flow through the proxy both ways; a stall holds
// them, on an open connection and on one opened during the stall, for
// about its duration, and then delivers them; Close ends every goroutine
// even with a stall and connections open.
func TestProxyStall(t *testing.T) {
	echo := echoServer(t)
	before := runtime.NumGoroutine()
	p := newProxy(t, echo)

	c1, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c1.Close()
	require.NoError(t, roundTrip(c1, "hello", 2*time.Second))
	big := make([]byte, 1<<20) // more than one chunk, both ways
	for i := range big {
		big[i] = byte(i * 7)
	}
	go func() { _, _ = c1.Write(big) }()
	_ = c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(big))
	_, err = io.ReadFull(c1, got)
	require.NoError(t, err)
	require.Equal(t, big, got)

	const d = 800 * time.Millisecond
	start := time.Now()
	p.Stall(d)
	require.True(t, p.Stalled())
	_, err = c1.Write([]byte("ping"))
	require.NoError(t, err)
	c2, err := net.Dial("tcp", p.Addr()) // a new connection during the stall
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Write([]byte("pong"))
	require.NoError(t, err)
	var ne net.Error
	err = readBack(c1, "ping", d/3)
	require.ErrorAs(t, err, &ne, "c1 received during the stall")
	require.True(t, ne.Timeout(), "c1: %v", err)
	err = readBack(c2, "pong", d/3)
	require.ErrorAs(t, err, &ne, "c2 received during the stall")
	require.True(t, ne.Timeout(), "c2: %v", err)
	require.NoError(t, readBack(c1, "ping", 3*time.Second))
	require.NoError(t, readBack(c2, "pong", 3*time.Second))
	held := time.Since(start)
	require.GreaterOrEqual(t, held, d-50*time.Millisecond)
	require.Less(t, held, d+700*time.Millisecond)
	require.False(t, p.Stalled())
	require.Equal(t, 2, p.Open())

	// A stall extended by a second Stall lasts until the later end; Resume
	// ends it at once.
	p.Stall(300 * time.Millisecond)
	p.Stall(time.Hour)
	time.Sleep(400 * time.Millisecond)
	require.True(t, p.Stalled())
	p.Resume()
	require.NoError(t, roundTrip(c1, "after", 2*time.Second))

	// Close in the middle of a stall, with bytes held: it returns promptly,
	// the clients see their connections closed and no goroutine is left.
	p.Stall(time.Hour)
	_, err = c2.Write([]byte("held"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	closed := time.Now()
	p.Close()
	require.Less(t, time.Since(closed), time.Second)
	_ = c1.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c1.Read(make([]byte, 1))
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "c1 still open after Close")
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err, "the proxy still accepts after Close")
	c1.Close()
	c2.Close()
	p.Close() // idempotent
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines left after Close")
}

// proxiedDB gives the test a fresh database and a proxy in front of its
// server; it skips the test when the server is not on TCP.
func proxiedDB(t *testing.T) (*dbtest.DB, *proxy) {
	t.Helper()
	db := dbtest.New(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	if u.Port() == "" {
		t.Skip("the test database is not on TCP:", db.URL)
	}
	return db, newProxy(t, u.Host)
}

// TestProxyDropAll: DropAll resets an open PostgreSQL connection (its next
// query fails and the backend goes away) while new connections through
// the proxy work; a stall delays a query by about its duration.
func TestProxyDropAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := proxiedDB(t)
	app := fmt.Sprintf("proxytest-%d", time.Now().UnixNano())
	connect := func() *pgx.Conn {
		cfg, err := pgx.ParseConfig(p.url(db.URL))
		require.NoError(t, err)
		cfg.RuntimeParams["application_name"] = app
		cfg.ConnectTimeout = 3 * time.Second
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	backends := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n))
		return n
	}
	query := func(conn *pgx.Conn) error {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var n int
		if err := conn.QueryRow(qctx, "SELECT 1").Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("SELECT 1 returned %d", n)
		}
		return nil
	}

	conn := connect()
	require.NoError(t, query(conn))
	require.Equal(t, 1, p.Open())
	require.Equal(t, 1, backends())

	const d = 700 * time.Millisecond
	start := time.Now()
	p.Stall(d)
	require.NoError(t, query(conn))
	require.GreaterOrEqual(t, time.Since(start), d-50*time.Millisecond)

	require.Equal(t, 1, p.DropAll())
	require.Error(t, query(conn), "a query on a reset connection succeeded")
	require.True(t, conn.IsClosed())
	waitFor(t, 5*time.Second, "the backend of the reset connection to end", func() bool { return backends() == 0 })

	// (pgx may send a cancel request for the failed query: one more
	// connection through the proxy, which the server closes.)
	conn2 := connect()
	require.NoError(t, query(conn2))
	require.GreaterOrEqual(t, p.Accepted(), 2)
	waitFor(t, 5*time.Second, "one open connection through the proxy", func() bool { return p.Open() == 1 })
	require.Equal(t, 1, backends())
}

// TestCommitReplyLost: the database commits but its reply to COMMIT never
// reaches the client. The row is there, and pgx's error says "conn
// closed", which pgconn.SafeToRetry calls safe to retry (its reader drops
// the read error and the next receive finds the connection closed). So a
// caller must treat a failed COMMIT as unknown and ask the database, never
// read SafeToRetry as "not committed": the chaos ledger (notSent) does so,
// and this test keeps it honest.
func TestCommitReplyLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := proxiedDB(t)
	_, err := db.Pool.Exec(ctx, "CREATE TABLE public.reply_lost (id int PRIMARY KEY)")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, p.url(db.URL))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO public.reply_lost VALUES (1)")
	require.NoError(t, err)
	p.CutReplies()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = tx.Commit(cctx)
	require.Error(t, err, "COMMIT's reply was cut, yet Commit succeeded")
	t.Logf("Commit error: %T %v (pgconn.SafeToRetry: %v)", err, err, pgconn.SafeToRetry(err))

	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM public.reply_lost").Scan(&n))
	require.Equal(t, 1, n, "the database did not commit; the test did not make the case it is about")
	require.False(t, notSent(err), "the ledger would call a committed transaction rolled back")
}
