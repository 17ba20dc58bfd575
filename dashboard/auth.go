package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Login throttling: failed logins (requests carrying credentials that are
// wrong) spend a token of their source address's bucket and of the user
// name's bucket; a request whose source or user has no token left is
// answered 429 with Retry-After, before its credentials are even checked,
// so guessing cannot go faster than the buckets refill. Requests without
// credentials (a browser's first request) and good logins spend nothing.
const (
	// SourceLoginBurst failed logins from one source address are allowed
	// at once, then SourceLoginRate per second.
	SourceLoginBurst, SourceLoginRate = 10, 1.0
	// UserLoginBurst failed logins for one user name (from any source)
	// are allowed at once, then UserLoginRate per second: many sources
	// together guess no faster than that.
	UserLoginBurst, UserLoginRate = 20, 2.0
	// maxTracked bounds each bucket map; see loginThrottle.bucket.
	maxTracked = 10000
	// maxLoggedUser bounds the claimed user name written to logs.
	maxLoggedUser = 64
)

// gate stands in front of every page but the health probes: the Host
// check, then the credentials, with failed logins throttled and logged.
type gate struct {
	hosts                 hostPolicy
	user, password, token string
	log                   *slog.Logger
	throttle              *loginThrottle
}

func newGate(o Options) *gate {
	return &gate{hosts: newHostPolicy(o), user: o.User, password: o.Password, token: o.Token, log: o.Logger,
		throttle: newLoginThrottle(time.Now)}
}

func (g *gate) authConfigured() bool { return g.user != "" || g.token != "" }

// admit lets r go on, or answers it (421 for a foreign Host, 401 without
// valid credentials, 429 while its source or user is throttled) and
// returns false.
func (g *gate) admit(w http.ResponseWriter, r *http.Request) bool {
	if !g.hosts.allows(r.Host) {
		// Not echoed back: the Host is the client's, not ours.
		http.Error(w, "this dashboard does not answer to that host name "+
			"(add it with skiplock serve --allowed-host, or dashboard.Options.AllowedHosts)", http.StatusMisdirectedRequest)
		return false
	}
	if !g.authConfigured() {
		return true
	}
	claimed, carries := g.claimedUser(r)
	if !carries {
		g.challenge(w)
		return false
	}
	source := sourceAddr(r)
	if wait, first := g.throttle.blocked(source, claimed); wait > 0 {
		if first {
			g.log.Warn("dashboard: failed logins throttled", slog.String("user", claimed), slog.String("source", source),
				slog.Duration("retry_after", wait))
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		http.Error(w, "too many failed logins; try again later", http.StatusTooManyRequests)
		return false
	}
	if _, ok := g.identify(r); ok {
		return true
	}
	refused := g.throttle.failed(source, claimed)
	attrs := []any{slog.String("user", claimed), slog.String("source", source)}
	if refused > 0 {
		attrs = append(attrs, slog.Int("refused_while_throttled", refused))
	}
	g.log.Warn("dashboard: failed login", attrs...)
	g.challenge(w)
	return false
}

func (g *gate) challenge(w http.ResponseWriter) {
	if g.user != "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="skiplock", charset="UTF-8"`)
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="skiplock"`)
	}
	http.Error(w, "authentication required", http.StatusUnauthorized)
}

// claimedUser is the user name a request's credentials claim, for the
// throttle and the log (never the password): the basic-auth user name
// (cut to maxLoggedUser bytes), or "bearer-token"; false when it carries
// none.
func (g *gate) claimedUser(r *http.Request) (string, bool) {
	if u, _, ok := r.BasicAuth(); ok {
		if len(u) > maxLoggedUser {
			u = u[:maxLoggedUser]
			for !utf8.ValidString(u) {
				u = u[:len(u)-1]
			}
		}
		return u, true
	}
	if r.Header.Get("Authorization") != "" {
		return "bearer-token", true
	}
	return "", false
}

// identify returns the user whose credentials the request carries, checked
// in constant time (over fixed-length digests, so not even the length
// leaks); false when it carries none that are valid, or none are
// configured.
func (g *gate) identify(r *http.Request) (string, bool) {
	if g.token != "" {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && same(tok, g.token) == 1 {
			return "bearer-token", true
		}
	}
	if g.user != "" {
		u, p, ok := r.BasicAuth()
		// Both compares always run.
		if ok && (same(u, g.user)&same(p, g.password)) == 1 {
			return u, true
		}
	}
	return "", false
}

func same(a, b string) int {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:])
}

// sourceAddr is the request's peer address without the port. Behind a
// reverse proxy that is the proxy's: the per-user buckets still hold.
func sourceAddr(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// loginThrottle holds the token buckets of failed logins by source address
// and by user name.
type loginThrottle struct {
	now func() time.Time

	mu       sync.Mutex // guards the maps and their buckets
	bySource map[string]*bucket
	byUser   map[string]*bucket
}

// bucket is a token bucket: tokens as of last; throttled counts the
// requests refused since the last failed login that was checked, noted
// whether that refusal was logged.
type bucket struct {
	tokens    float64
	last      time.Time
	throttled int
	noted     bool
}

func newLoginThrottle(now func() time.Time) *loginThrottle {
	return &loginThrottle{now: now, bySource: map[string]*bucket{}, byUser: map[string]*bucket{}}
}

// blocked returns how long source or user must wait before a login is
// checked again (0: now), and whether this is the first refusal since
// they were last let through (worth one log line).
func (t *loginThrottle) blocked(source, user string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var wait time.Duration
	first := false
	for _, b := range []struct {
		b     *bucket
		burst float64
		rate  float64
	}{
		{t.peek(t.bySource, source, now, SourceLoginBurst, SourceLoginRate), SourceLoginBurst, SourceLoginRate},
		{t.peek(t.byUser, user, now, UserLoginBurst, UserLoginRate), UserLoginBurst, UserLoginRate},
	} {
		if b.b == nil || b.b.tokens >= 1 {
			continue
		}
		wait = max(wait, time.Duration((1-b.b.tokens)/b.rate*float64(time.Second)))
		b.b.throttled++
		if !b.b.noted {
			b.b.noted, first = true, true
		}
	}
	return wait, first
}

// failed spends a token of source's and user's buckets and returns how
// many requests of theirs were refused since the last failed login that
// was checked.
func (t *loginThrottle) failed(source, user string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	refused := 0
	for _, b := range []*bucket{
		t.bucket(t.bySource, source, now, SourceLoginBurst, SourceLoginRate),
		t.bucket(t.byUser, user, now, UserLoginBurst, UserLoginRate),
	} {
		b.tokens--
		refused = max(refused, b.throttled)
		b.throttled, b.noted = 0, false
	}
	return refused
}

// peek refills and returns key's bucket, nil when it has none (full).
func (t *loginThrottle) peek(m map[string]*bucket, key string, now time.Time, burst, rate float64) *bucket {
	b := m[key]
	if b != nil {
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
		b.last = now
	}
	return b
}

// bucket returns key's bucket, refilled, making it if needed. A map at
// maxTracked entries first forgets the buckets that are full again (they
// hold nothing a new one would not); if none is, new keys share one
// overflow bucket, so flooding the map with names throttles the flood
// rather than growing memory.
func (t *loginThrottle) bucket(m map[string]*bucket, key string, now time.Time, burst, rate float64) *bucket {
	if b := t.peek(m, key, now, burst, rate); b != nil {
		return b
	}
	if len(m) >= maxTracked {
		for k, b := range m {
			if min(burst, b.tokens+now.Sub(b.last).Seconds()*rate) >= burst && b.throttled == 0 {
				delete(m, k)
			}
		}
		if len(m) >= maxTracked {
			key = "\x00overflow"
			if b := t.peek(m, key, now, burst, rate); b != nil {
				return b
			}
		}
	}
	b := &bucket{tokens: burst, last: now}
	m[key] = b
	return b
}

// Protect serves h behind the dashboard's Host check and authentication,
// failed logins throttled and logged as on the dashboard, configured by
// o's User, Password, Token, AllowedHosts and Logger (its other fields are
// ignored): for a handler on a listener of its own, such as a worker's
// /metrics. /healthz and /readyz pass without either, for orchestrators'
// probes.
func Protect(h http.Handler, o Options) (http.Handler, error) {
	o = o.withDefaults()
	if (o.User == "") != (o.Password == "") {
		return nil, invalid("User", "set both User and Password for basic auth, or neither")
	}
	for _, host := range o.AllowedHosts {
		if err := CheckAllowedHost(host); err != nil {
			return nil, invalid("AllowedHosts", "%v", err)
		}
	}
	g := newGate(o)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !g.admit(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}
