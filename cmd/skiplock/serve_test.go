package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/internal/dbtest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestServeUsageErrors(t *testing.T) {
	t.Parallel()
	// Each is refused at startup, before any connection (the database URL
	// leads nowhere), with exit 2 and a message naming what to change.
	env := map[string]string{"SKIPLOCK_DASHBOARD_USER": "", "SKIPLOCK_DASHBOARD_PASSWORD": "", "SKIPLOCK_DASHBOARD_TOKEN": ""}
	nowhere := []string{"--database-url", "postgres://127.0.0.1:1/x"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--read-only", "--show-payloads"}, []string{"--show-payloads", "--read-only"}},
		{[]string{"--show-payloads"}, []string{"--show-payloads", "authenticated user", "SKIPLOCK_DASHBOARD_USER",
			"SKIPLOCK_DASHBOARD_PASSWORD", "SKIPLOCK_DASHBOARD_TOKEN"}},
		{[]string{"--http-addr", "0.0.0.0:8080"}, []string{"--http-addr 0.0.0.0:8080", "beyond loopback",
			"SKIPLOCK_DASHBOARD_USER", "--insecure-no-auth"}},
		{[]string{"--http-addr", ":8080", "--read-only"}, []string{"beyond loopback", "--insecure-no-auth"}},
		{[]string{"--http-addr", "192.0.2.1:8080", "--insecure-no-auth", "--show-payloads"}, []string{"--show-payloads"}},
		{[]string{"--allowed-host", "queue.example.com:443"}, []string{"--allowed-host", "queue.example.com:443", "no scheme, port"}},
		{[]string{"--allowed-host", "https://queue.example.com"}, []string{"--allowed-host"}},
	} {
		code, _, stderr := runCLIEnv(t, env, append(append([]string{"serve"}, tc.args...), nowhere...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		for _, w := range tc.want {
			assert.Contains(t, stderr, w, tc.args)
		}
	}
	env["SKIPLOCK_DASHBOARD_USER"] = "admin"
	code, _, stderr := runCLIEnv(t, env, append([]string{"serve"}, nowhere...)...)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "SKIPLOCK_DASHBOARD_PASSWORD")
}

func TestDashboardSecurityRules(t *testing.T) {
	t.Parallel()
	open := dashboard.Options{}
	withUser := dashboard.Options{User: "u", Password: "correct horse"}
	withToken := dashboard.Options{Token: "0123456789abcdef"}
	assert.NoError(t, checkDashboardSecurity("127.0.0.1:8080", open, false))
	assert.NoError(t, checkDashboardSecurity("localhost:8080", open, false))
	assert.NoError(t, checkDashboardSecurity("[::1]:8080", open, false))
	assert.NoError(t, checkDashboardSecurity("0.0.0.0:8080", open, true), "--insecure-no-auth allows it")
	assert.NoError(t, checkDashboardSecurity("0.0.0.0:8080", withUser, false))
	assert.NoError(t, checkDashboardSecurity("0.0.0.0:8080", withToken, false))
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "10.1.2.3:8080", "[::]:8080", "queue.internal:8080"} {
		assert.Error(t, checkDashboardSecurity(addr, open, false), addr)
	}
	// Beyond loopback, a password or token under 12 bytes is refused
	// (review F3: a one-character password was served).
	short := dashboard.Options{User: "a", Password: "a"}
	assert.NoError(t, checkDashboardSecurity("127.0.0.1:8080", short, false), "on loopback anything goes")
	assert.ErrorContains(t, checkDashboardSecurity("0.0.0.0:8080", short, false), "shorter than 12 bytes")
	assert.ErrorContains(t, checkDashboardSecurity("0.0.0.0:8080", dashboard.Options{Token: "t"}, false), "SKIPLOCK_DASHBOARD_TOKEN is shorter")
	reveal := dashboard.Options{ShowPayloads: true}
	assert.Error(t, checkDashboardSecurity("127.0.0.1:8080", reveal, false))
	assert.Error(t, checkDashboardSecurity("127.0.0.1:8080", reveal, true), "--insecure-no-auth never allows anonymous reveal")
	reveal.Token = "t"
	assert.NoError(t, checkDashboardSecurity("127.0.0.1:8080", reveal, false))
}

func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	assert.ElementsMatch(t, []string{"localhost", "127.0.0.1", "::1", "127.0.0.1"}, allowedHosts("127.0.0.1:8080", nil))
	assert.ElementsMatch(t, []string{"localhost", "127.0.0.1", "::1", "localhost", "q.example"},
		allowedHosts("localhost:8080", []string{"q.example"}))
	assert.Equal(t, []string{"10.1.2.3", "q.example"}, allowedHosts("10.1.2.3:8080", []string{"q.example"}))
	// All interfaces: loopback, the host name and every interface address.
	all := allowedHosts(":8080", nil)
	assert.Subset(t, all, []string{"localhost", "127.0.0.1", "::1"})
	name, err := os.Hostname()
	require.NoError(t, err)
	assert.Contains(t, all, name)
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		assert.Contains(t, all, a.(*net.IPNet).IP.String())
	}
	assert.Equal(t, all, allowedHosts("0.0.0.0:8080", nil))
}

// Every server of the CLI (serve, dev, work --metrics-addr) bounds header,
// body, response and idle times, so an idle or slow client cannot hold a
// connection forever.
func TestHTTPServersHaveTimeouts(t *testing.T) {
	t.Parallel()
	g := testGlobals()
	srv := newHTTPServer(http.NotFoundHandler(), g.logger(io.Discard))
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": srv.ReadHeaderTimeout,
		"ReadTimeout": srv.ReadTimeout, "WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout} {
		assert.Positive(t, d, name)
	}
	db := dbtest.New(t)
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	m := g.workerMetricsServer(db.Pool, c, g.logger(io.Discard))
	assert.Equal(t, [4]time.Duration{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout},
		[4]time.Duration{m.ReadHeaderTimeout, m.ReadTimeout, m.WriteTimeout, m.IdleTimeout})
	// And it serves what it did before.
	rec := httptest.NewRecorder()
	m.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
}

func TestServeAuthMetricsAndShutdown(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	bg := startCLIEnv(ctx, t, map[string]string{"SKIPLOCK_DASHBOARD_USER": "admin", "SKIPLOCK_DASHBOARD_PASSWORD": "pw"},
		"serve", "--database-url", db.URL, "--http-addr", addr)

	get := func(path string, auth bool) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if auth {
			req.SetBasicAuth("admin", "pw")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { c, _ := get("/healthz", false); return c == http.StatusOK },
		10*time.Second, 20*time.Millisecond, "serve did not come up")
	c, _ := get("/readyz", false)
	assert.Equal(t, http.StatusOK, c)
	c, _ = get("/", false)
	assert.Equal(t, http.StatusUnauthorized, c)
	c, _ = get("/metrics", false)
	assert.Equal(t, http.StatusUnauthorized, c)
	c, body := get("/", true)
	assert.Equal(t, http.StatusOK, c)
	assert.Contains(t, body, `id="panel-vacuum"`)
	c, body = get("/metrics", true)
	assert.Equal(t, http.StatusOK, c)
	assert.Contains(t, body, "skiplock_")

	cancel()
	select {
	case code := <-bg.done:
		assert.Equal(t, 0, code)
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not shut down")
	}
	errb, _ := os.ReadFile(bg.stderr)
	assert.Contains(t, string(errb), "dashboard on http://"+addr+"/")
	assert.Contains(t, string(errb), "shutting down")
}

// skiplock dev reveals payloads only on the throwaway cluster it started
// itself, and only to an authenticated user: on a configured database, or
// without credentials, they stay hidden, as with serve.
func TestDevDashboardRevealsOnlyThrowawayPayloads(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT skiplock.enqueue(queue => 'default', kind => 'k', payload => '{"email":"PII-dev-7"}'::jsonb)`).Scan(&id))
	log := testGlobals().logger(io.Discard)
	for _, tc := range []struct {
		throwaway, auth bool
		want            int
	}{{false, false, http.StatusForbidden}, {true, false, http.StatusForbidden}, {false, true, http.StatusForbidden},
		{true, true, http.StatusOK}} {
		pw := ""
		if tc.auth {
			pw = "pw"
		}
		g := testGlobals()
		g.process = newTestProcess(map[string]string{"SKIPLOCK_DASHBOARD_USER": map[bool]string{true: "dev"}[tc.auth],
			"SKIPLOCK_DASHBOARD_PASSWORD": pw, "SKIPLOCK_DASHBOARD_TOKEN": ""}).process()
		addr := freeAddr(t)
		stop, err := g.startDevDashboard(io.Discard, db.Pool, addr, tc.throwaway, log)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/jobs/"+strconv.FormatInt(id, 10)+"/payload", nil)
		require.NoError(t, err)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if tc.auth {
			req.SetBasicAuth("dev", "pw")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		stop()
		assert.Equal(t, tc.want, resp.StatusCode, "%+v", tc)
		if tc.want == http.StatusOK {
			assert.Contains(t, string(b), "PII-dev-7")
		} else {
			assert.NotContains(t, string(b), "PII-dev-7", "%+v", tc)
		}
	}
}

// serve answers only to its own host names (DNS rebinding), except for the
// probes, and --allowed-host adds more.
func TestServeHostCheck(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	addr := freeAddr(t)
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer devnull.Close()
	ctx, cancel := context.WithCancel(context.Background())
	bg := startCLI(ctx, t, "serve", "--database-url", db.URL, "--http-addr", addr,
		"--allowed-host", "queue.example.com")
	get := func(host, path string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return get(addr, "/healthz") == http.StatusOK },
		10*time.Second, 20*time.Millisecond, "serve did not come up")
	for host, want := range map[string]int{addr: 200, "localhost:" + port: 200, "[::1]:" + port: 200,
		"queue.example.com": 200, "rebound.evil.example:" + port: 421} {
		assert.Equal(t, want, get(host, "/queues"), host)
	}
	assert.Equal(t, http.StatusOK, get("10.9.8.7:"+port, "/healthz"))
	assert.Equal(t, http.StatusOK, get("10.9.8.7:"+port, "/readyz"))
	cancel()
	select {
	case code := <-bg.done:
		assert.Equal(t, 0, code)
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not shut down")
	}
}
