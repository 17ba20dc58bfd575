package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	code, _, stderr := runCLI(t, "serve", "--read-only", "--show-payloads", "--database-url", "postgres://127.0.0.1:1/x")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--show-payloads")
	t.Setenv("SKIPLOCK_DASHBOARD_USER", "admin")
	code, _, stderr = runCLI(t, "serve", "--database-url", "postgres://127.0.0.1:1/x")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "SKIPLOCK_DASHBOARD_PASSWORD")
}

func TestServeAuthMetricsAndShutdown(t *testing.T) {
	db := dbtest.New(t)
	t.Setenv("SKIPLOCK_DASHBOARD_USER", "admin")
	t.Setenv("SKIPLOCK_DASHBOARD_PASSWORD", "pw")
	addr := freeAddr(t)
	outF, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	errF, err := os.CreateTemp(t.TempDir(), "err")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "--database-url", db.URL, "--http-addr", addr}, outF, errF) }()

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
	case code := <-done:
		assert.Equal(t, 0, code)
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not shut down")
	}
	errb, _ := os.ReadFile(errF.Name())
	assert.Contains(t, string(errb), "dashboard on http://"+addr+"/")
	assert.Contains(t, string(errb), "shutting down")
}

// skiplock dev reveals payloads only on the throwaway cluster it started
// itself: on a configured database they stay hidden, as with serve.
func TestDevDashboardRevealsOnlyThrowawayPayloads(t *testing.T) {
	db := dbtest.New(t)
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT skiplock.enqueue(queue => 'default', kind => 'k', payload => '{"email":"PII-dev-7"}'::jsonb)`).Scan(&id))
	log := logger(io.Discard)
	for _, throwaway := range []bool{false, true} {
		addr := freeAddr(t)
		stop, err := startDevDashboard(db.Pool, addr, throwaway, log)
		require.NoError(t, err)
		resp, err := http.Get("http://" + addr + "/jobs/" + strconv.FormatInt(id, 10) + "/payload")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		stop()
		if throwaway {
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Contains(t, string(b), "PII-dev-7")
		} else {
			assert.Equal(t, http.StatusForbidden, resp.StatusCode)
			assert.NotContains(t, string(b), "PII-dev-7")
		}
	}
}
