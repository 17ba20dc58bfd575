package dashboard

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func testGate(t *testing.T, o Options) (*gate, *fakeClock, *dbtest.LogBuffer) {
	t.Helper()
	logs := &dbtest.LogBuffer{}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	g := newGate(o.withDefaults())
	clock := &fakeClock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	g.throttle.now = clock.now
	return g, clock, logs
}

func login(g *gate, source, user, password string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = source + ":40000"
	if user != "" || password != "" {
		r.SetBasicAuth(user, password)
	}
	w := httptest.NewRecorder()
	if g.admit(w, r) {
		w.WriteHeader(http.StatusOK)
	}
	return w
}

// The review's F3, made a test: 1,000 wrong passwords from one address
// (53,877 in 5 s went through before, with no log line). Now the first
// SourceLoginBurst are checked and each logged (user and source, never the
// password), the rest are refused with 429 and Retry-After without being
// checked, with one line saying so; the right password from that address
// waits for the bucket too, and passes once it has refilled.
func TestThousandWrongLoginsAreThrottledAndLogged(t *testing.T) {
	t.Parallel()
	const secret = "correct horse battery staple"
	g, clock, logs := testGate(t, Options{User: "admin", Password: secret})
	codes := map[int]int{}
	for i := range 1000 {
		w := login(g, "203.0.113.7", "admin", "wrong-guess-"+strconv.Itoa(i))
		codes[w.Code]++
		if w.Code == http.StatusTooManyRequests {
			require.Equal(t, "1", w.Header().Get("Retry-After"))
		}
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: SourceLoginBurst, http.StatusTooManyRequests: 1000 - SourceLoginBurst}, codes)
	out := logs.String()
	assert.Equal(t, SourceLoginBurst, strings.Count(out, `msg="dashboard: failed login" user=admin source=203.0.113.7`), out)
	assert.Equal(t, 1, strings.Count(out, `msg="dashboard: failed logins throttled" user=admin source=203.0.113.7`), out)
	assert.NotContains(t, out, "wrong-guess", "passwords are never logged")
	assert.NotContains(t, out, secret)

	assert.Equal(t, http.StatusTooManyRequests, login(g, "203.0.113.7", "admin", secret).Code,
		"while throttled even the right password is not checked (else a guess would still tell)")
	assert.Equal(t, http.StatusOK, login(g, "198.51.100.9", "admin", secret).Code, "another address: the user's bucket has room")
	clock.t = clock.t.Add(time.Second)
	assert.Equal(t, http.StatusOK, login(g, "203.0.113.7", "admin", secret).Code, "a second later one attempt is checked again")
	w := login(g, "203.0.113.7", "admin", "wrong again")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Contains(t, logs.String(), "refused_while_throttled=991", "the next logged failure counts the refusals")

	// No credentials is no login attempt: 401 with the challenge, nothing spent.
	w = login(g, "192.0.2.1", "", "")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Contains(t, w.Header().Get("WWW-Authenticate"), "Basic")
}

// Many addresses guessing one user's password together are held to the
// user's bucket.
func TestLoginThrottlePerUser(t *testing.T) {
	t.Parallel()
	g, _, logs := testGate(t, Options{User: "admin", Password: "correct horse battery staple"})
	codes := map[int]int{}
	for i := range 100 {
		codes[login(g, "10.0.0."+strconv.Itoa(i), "admin", "guess").Code]++
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: UserLoginBurst, http.StatusTooManyRequests: 100 - UserLoginBurst}, codes)
	assert.Contains(t, logs.String(), "dashboard: failed logins throttled")
	// Bearer tokens are throttled under one name.
	tg, _, _ := testGate(t, Options{Token: "0123456789abcdef"})
	codes = map[int]int{}
	for range 50 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.8:1"
		r.Header.Set("Authorization", "Bearer nope")
		w := httptest.NewRecorder()
		tg.admit(w, r)
		codes[w.Code]++
	}
	assert.Equal(t, SourceLoginBurst, codes[http.StatusUnauthorized])
}

// Names and addresses chosen by an attacker cannot grow the throttle's
// memory without bound.
func TestLoginThrottleIsBounded(t *testing.T) {
	t.Parallel()
	th := newLoginThrottle(time.Now)
	for i := range 3 * maxTracked {
		th.failed("src-"+strconv.Itoa(i), "user-"+strconv.Itoa(i))
	}
	assert.LessOrEqual(t, len(th.bySource), maxTracked+1)
	assert.LessOrEqual(t, len(th.byUser), maxTracked+1)
	wait, _ := th.blocked("src-new", "user-new")
	assert.Zero(t, wait, "a new name is not throttled by the flood until the overflow bucket is spent")
}

// Protect puts the same gate in front of any handler: the Host check and
// credentials, the probes open.
func TestProtect(t *testing.T) {
	t.Parallel()
	h, err := Protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("metrics")) }),
		Options{Token: "0123456789abcdef", AllowedHosts: []string{"localhost"}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	get := func(host, path, auth string) int {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Host = host
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	assert.Equal(t, http.StatusOK, get("localhost:9464", "/metrics", "Bearer 0123456789abcdef"))
	assert.Equal(t, http.StatusUnauthorized, get("localhost:9464", "/metrics", ""))
	assert.Equal(t, http.StatusMisdirectedRequest, get("evil.example", "/metrics", "Bearer 0123456789abcdef"))
	assert.Equal(t, http.StatusOK, get("10.1.2.3", "/healthz", ""))
	_, err = Protect(http.NotFoundHandler(), Options{User: "u"})
	assert.ErrorIs(t, err, ErrInvalidOptions)
}

// forget drops every bucket, for tests that go on after throttling.
func (t *loginThrottle) forget() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.bySource)
	clear(t.byUser)
}
