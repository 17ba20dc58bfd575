package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// marker is put in payloads; no page may ever show it unless revealed.
const marker = "PII-MARKER-7f3a9c"

// hostile is put in error messages: it must come out escaped.
const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>`

type fixture struct {
	t       *testing.T
	db      *dbtest.DB
	srv     *httptest.Server
	d       *Dashboard
	client  *skiplock.Client
	readyID int64
	deadIDs []int64
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	db := dbtest.New(t)
	f := &fixture{t: t, db: db}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	opts.Schema = db.Schema
	h, err := New(db.Pool, opts)
	require.NoError(t, err)
	f.d = h.(*Dashboard)
	f.srv = httptest.NewServer(h)
	t.Cleanup(func() {
		f.srv.Close()
		_ = f.d.Close()
	})
	f.client, err = skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	return f
}

// seed enqueues a ready job and a few dead letters, all carrying the marker
// in their payloads, a schedule with the marker and a worker row.
func (f *fixture) seed() {
	t, ctx := f.t, context.Background()
	res, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "mail", Kind: "email.send",
		Payload: map[string]string{"email": marker + "@example.com"}, Tenant: "acme"})
	require.NoError(t, err)
	f.readyID = res.ID
	_, err = f.client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "mail", Kind: "email.send",
		Payload: map[string]string{"email": marker}, RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	f.deadIDs = nil
	for i := range 3 {
		id := int64(900000 + i)
		f.insertDead(id, "webhook.deliver", fmt.Sprintf("POST https://hooks.example.com/%d: 503 %s", i, hostile))
		f.deadIDs = append(f.deadIDs, id)
	}
	require.NoError(t, f.client.ScheduleAdd(ctx, skiplock.Schedule{Name: "nightly", Cron: "0 3 * * *",
		Queue: "mail", Kind: "report.build", Payload: map[string]string{"to": marker}}))
	_, err = f.db.Pool.Exec(ctx, `INSERT INTO skiplock.workers (id, hostname, pid, queues, concurrency, running,
		claimed_total, completed_total, failed_total, claim_p99_ms) VALUES ('host:1:abc', 'host', 1, '{mail}', 4, 0, 10, 9, 1, 2.5)`)
	require.NoError(t, err)
}

func (f *fixture) insertDead(id int64, kind, lastError string) {
	_, err := f.db.Pool.Exec(context.Background(), `INSERT INTO skiplock.jobs_dead
		(id, priority, attempts, max_attempts, run_at, created_at, queue, kind, reason, last_error, payload)
		VALUES ($1, 0, 5, 5, now(), now(), 'hooks', $2, 'error', $3, jsonb_build_object('email', $4::text))`,
		id, kind, lastError, marker)
	require.NoError(f.t, err)
}

// do sends a request and returns the status and body.
func (f *fixture) do(method, path string, form url.Values, hdr http.Header) (int, string, http.Header) {
	f.t.Helper()
	return doRequest(f.t, f.srv.URL, method, path, form, hdr)
}

// doRequest sends a request to the server at base, without following
// redirects, and returns the status, body and headers.
func doRequest(t *testing.T, base, method, path string, form url.Values, hdr http.Header) (int, string, http.Header) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, base+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

// serve runs one request through the handler in the test's goroutine (so
// it can read what the handler logged), with the given Host.
func (f *fixture) serve(method, path, host string, form url.Values, hdr http.Header) *httptest.ResponseRecorder {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, path, body)
	req.Host = host
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	f.d.ServeHTTP(rec, req)
	return rec
}

func (f *fixture) get(path string) (int, string) {
	code, body, _ := f.do(http.MethodGet, path, nil, nil)
	return code, body
}

func (f *fixture) count(sql string, args ...any) int {
	var n int
	require.NoError(f.t, f.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (f *fixture) pages() map[string][]string {
	id, dead := fmt.Sprint(f.readyID), fmt.Sprint(f.deadIDs[0])
	return map[string][]string{
		"/":                     {`id="panel-lag"`, `id="panel-claims"`, `id="panel-running"`, `id="panel-dead"`, `id="panel-vacuum"`, `id="chart-throughput"`, "mail"},
		"/overview/panels":      {`id="panel-vacuum"`, "dead tuples"},
		"/queues":               {"mail", "hooks"},
		"/jobs":                 {"/jobs/" + id, "email.send", "/jobs/" + dead},
		"/jobs?state=dead":      {"/jobs/" + dead, "webhook.deliver"},
		"/jobs?kind=email.send": {"/jobs/" + id},
		"/jobs?tenant=acme":     {"/jobs/" + id},
		"/jobs?state=scheduled": {"scheduled"},
		"/jobs?state=done":      {"No job matches"},
		"/jobs/" + id:           {"Job " + id, "email.send", "Hidden"},
		"/jobs/" + dead:         {"Job " + dead, "dead", "hooks.example.com"},
		"/dead":                 {"webhook.deliver", "hooks.example.com"},
		"/dead/confirm?action=replay&kind=webhook.deliver&signature=" + url.QueryEscape("POST https://hooks.example.com/0: 503 "+hostile): {"Replay 3 dead letters?"},
		"/schedules":            {"nightly", "0 3 * * *", "report.build"},
		"/limits":               {`id="limits-table"`, "No limits"},
		"/workers":              {"host:1:abc", "mail"},
		"/health":               {"dead_tuples", "claim_index"},
		"/api/series":           {`"claimed"`},
		"/healthz":              {"ok"},
		"/readyz":               {"ready"},
		"/static/htmx.min.js":   {"htmx"},
		"/static/app.js":        {"uPlot"},
		"/static/style.css":     {"--fail"},
		"/static/uPlot.min.css": {"uplot"},
	}
}

func TestPagesRenderWithoutPayloads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	require.NoError(t, f.d.sampler.take(context.Background()))
	for path, want := range f.pages() {
		code, body := f.get(path)
		require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
		for _, w := range want {
			assert.Contains(t, body, w, path)
		}
		assert.NotContains(t, body, marker, "%s shows a payload", path)
		assert.NotContains(t, body, "<script>alert", "%s renders hostile data unescaped", path)
		assert.NotContains(t, body, "<img src=x", "%s renders hostile data unescaped", path)
	}
	// Payload reveal is off by default, and never a GET.
	code, body, _ := f.do(http.MethodPost, "/jobs/"+fmt.Sprint(f.readyID)+"/payload", url.Values{}, nil)
	assert.Equal(t, http.StatusForbidden, code)
	assert.NotContains(t, body, marker)
	code, body = f.get("/jobs/" + fmt.Sprint(f.readyID) + "/payload")
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	assert.NotContains(t, body, marker)
	// The overview has the five panels and the chart, and actions for a
	// read-write dashboard.
	_, body = f.get("/queues")
	assert.Contains(t, body, `action="/queues/pause"`)
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	_, _, h := f.do(http.MethodGet, "/", nil, nil)
	// The whole policy, exactly: a substring match would still pass with
	// 'unsafe-inline' or another source added.
	csp := map[string]string{}
	for _, d := range strings.Split(h.Get("Content-Security-Policy"), ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		require.NotContains(t, csp, name, "directive %s given twice", name)
		csp[name] = value
	}
	assert.Equal(t, map[string]string{
		"default-src": "'none'", "script-src": "'self'", "style-src": "'self'", "img-src": "'self' data:",
		"connect-src": "'self'", "form-action": "'self'", "frame-ancestors": "'none'", "base-uri": "'none'",
	}, csp)
	assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
	assert.Equal(t, "no-store", h.Get("Cache-Control"))
	assert.Equal(t, "DENY", h.Get("X-Frame-Options"))
}

// basicAuth is the Authorization header of user:password.
func basicAuth(u, p string) http.Header {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(u, p)
	return r.Header
}

// logBuffer is a logger whose lines a test reads back.
func logBuffer() (*slog.Logger, *strings.Builder) {
	var b strings.Builder
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo})), &b
}

func TestRevealPayloadWhenAllowed(t *testing.T) {
	t.Parallel()
	log, logs := logBuffer()
	f := newFixture(t, Options{ShowPayloads: true, User: "alice", Password: "pw", Logger: log})
	f.seed()
	auth := basicAuth("alice", "pw")
	sameOrigin := http.Header{"Sec-Fetch-Site": {"same-origin"}, "Authorization": auth["Authorization"]}
	id := fmt.Sprint(f.readyID)
	rec := f.serve(http.MethodGet, "/jobs/"+id, "127.0.0.1", nil, auth)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), `id="reveal-payload"`)
	assert.Contains(t, rec.Body.String(), `hx-post="/jobs/`+id+`/payload"`)
	assert.NotContains(t, rec.Body.String(), marker, "the detail page must not show the payload before a reveal")

	rec = f.serve(http.MethodPost, "/jobs/"+id+"/payload", "127.0.0.1", url.Values{}, sameOrigin)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), marker)
	// The audit line names the user and the job, never the payload.
	assert.Regexp(t, `msg="dashboard: payload revealed" job_id=`+id+` user=alice`, logs.String())
	assert.NotContains(t, logs.String(), marker)

	// A GET reveals nothing (a cross-site <img> could forge audit lines).
	rec = f.serve(http.MethodGet, "/jobs/"+id+"/payload", "127.0.0.1", nil, auth)
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.NotContains(t, rec.Body.String(), marker)
	// Revealed payloads are escaped too.
	f.insertDead(910000, "x.y", "boom")
	_, err := f.db.Pool.Exec(context.Background(),
		`UPDATE skiplock.jobs_dead SET payload = jsonb_build_object('h', $1::text) WHERE id = 910000`, hostile)
	require.NoError(t, err)
	rec = f.serve(http.MethodPost, "/jobs/910000/payload", "127.0.0.1", url.Values{}, sameOrigin)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.NotContains(t, rec.Body.String(), "<script>alert")
	rec = f.serve(http.MethodPost, "/jobs/123456789/payload", "127.0.0.1", url.Values{}, sameOrigin)
	assert.Equal(t, http.StatusNotFound, rec.Code)
}

// A reveal is an audited action: refused cross-origin and without
// credentials, with no audit line and no payload.
func TestRevealRefusedCrossOriginOrAnonymous(t *testing.T) {
	t.Parallel()
	log, logs := logBuffer()
	f := newFixture(t, Options{ShowPayloads: true, Token: "tok", Logger: log})
	f.seed()
	path := "/jobs/" + fmt.Sprint(f.readyID) + "/payload"
	for name, hdr := range map[string]http.Header{
		"cross-site":     {"Sec-Fetch-Site": {"cross-site"}, "Authorization": {"Bearer tok"}},
		"foreign origin": {"Origin": {"https://evil.example"}, "Authorization": {"Bearer tok"}},
		"anonymous":      {"Sec-Fetch-Site": {"same-origin"}},
		"wrong token":    {"Sec-Fetch-Site": {"same-origin"}, "Authorization": {"Bearer tok2"}},
	} {
		rec := f.serve(http.MethodPost, path, "127.0.0.1", url.Values{}, hdr)
		assert.Contains(t, []int{http.StatusForbidden, http.StatusUnauthorized}, rec.Code, name)
		assert.NotContains(t, rec.Body.String(), marker, name)
	}
	assert.NotContains(t, logs.String(), "payload revealed")
	rec := f.serve(http.MethodPost, path, "127.0.0.1", url.Values{},
		http.Header{"Sec-Fetch-Site": {"same-origin"}, "Authorization": {"Bearer tok"}})
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, logs.String(), "user=bearer-token")
}

// Defence in depth: should ShowPayloads ever be on without credentials (New
// refuses that), the reveal handler itself still refuses anonymous users.
func TestRevealRefusedWithoutAuthentication(t *testing.T) {
	t.Parallel()
	log, logs := logBuffer()
	f := newFixture(t, Options{Logger: log})
	f.seed()
	f.d.opts.ShowPayloads = true // what New refuses; the handler must too
	rec := f.serve(http.MethodPost, "/jobs/"+fmt.Sprint(f.readyID)+"/payload", "127.0.0.1", url.Values{},
		http.Header{"Sec-Fetch-Site": {"same-origin"}})
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.Contains(t, rec.Body.String(), "requires an authenticated user")
	assert.NotContains(t, rec.Body.String(), marker)
	assert.NotContains(t, logs.String(), "payload revealed")
}

// DNS rebinding: a hostile page whose own name resolves to the dashboard's
// address is same-origin with it, so only the Host header tells them apart.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	for _, host := range []string{"evil.example", "evil.example:8080", "localhost.evil.example", "10.0.0.5", ""} {
		for _, path := range []string{"/", "/jobs", "/jobs/" + fmt.Sprint(f.deadIDs[0]), "/dead", "/static/app.js"} {
			rec := f.serve(http.MethodGet, path, host, nil, nil)
			assert.Equal(t, http.StatusMisdirectedRequest, rec.Code, "%s %s", host, path)
			assert.NotContains(t, rec.Body.String(), "hooks.example.com", "%s %s", host, path)
			assert.Contains(t, rec.Body.String(), "--allowed-host")
		}
		rec := f.serve(http.MethodPost, "/queues/pause", host, url.Values{"queue": {"mail"}},
			http.Header{"Sec-Fetch-Site": {"same-origin"}})
		assert.Equal(t, http.StatusMisdirectedRequest, rec.Code, host)
		// Probes answer to any host: a kubelet sends the pod's IP.
		for _, path := range []string{"/healthz", "/readyz"} {
			assert.Equal(t, http.StatusOK, f.serve(http.MethodGet, path, host, nil, nil).Code, "%s %s", host, path)
		}
	}
	assert.Zero(t, f.count(`SELECT count(*) FROM skiplock.queues`), "a refused host paused a queue")
	for _, host := range []string{"localhost", "LOCALHOST:8080", "127.0.0.1:1", "127.1.2.3", "[::1]:8080", "app.localhost"} {
		assert.Equal(t, http.StatusOK, f.serve(http.MethodGet, "/dead", host, nil, nil).Code, host)
	}

	// Configured names replace the default.
	g := newFixture(t, Options{AllowedHosts: []string{"Queue.Example.com", "10.0.0.5"}})
	for host, want := range map[string]int{"queue.example.com": 200, "QUEUE.example.com.:443": 200, "10.0.0.5:80": 200,
		"localhost": 421, "127.0.0.1": 421, "example.com": 421, "evil.queue.example.com": 421} {
		assert.Equal(t, want, g.serve(http.MethodGet, "/queues", host, nil, nil).Code, host)
	}
	anyHost := newFixture(t, Options{AllowedHosts: []string{"*"}})
	assert.Equal(t, http.StatusOK, anyHost.serve(http.MethodGet, "/queues", "anything.example", nil, nil).Code)
	// With credentials and no list, any host: a rebound page has no credentials.
	auth := newFixture(t, Options{User: "a", Password: "b"})
	assert.Equal(t, http.StatusUnauthorized, auth.serve(http.MethodGet, "/queues", "evil.example", nil, nil).Code)
	assert.Equal(t, http.StatusOK, auth.serve(http.MethodGet, "/queues", "queue.example.com", nil, basicAuth("a", "b")).Code)
}

// A read-only dashboard shows neither error text (an --exec worker stores
// the program's stderr, which may quote the job's data) nor unique keys and
// entities; a read-write one shows them to the operator.
func TestReadOnlyHidesErrorText(t *testing.T) {
	t.Parallel()
	const secret = "ERR-PII-31d7"
	for _, readOnly := range []bool{true, false} {
		f := newFixture(t, Options{ReadOnly: readOnly})
		f.seed()
		f.insertDead(920000, "billing.charge", `card declined for "`+secret+`"`)
		res, err := f.client.Enqueue(context.Background(), skiplock.EnqueueParams{Queue: "mail", Kind: "email.send",
			Payload: map[string]string{"a": "b"}, UniqueKey: "uk-" + secret, Entity: "ent-" + secret})
		require.NoError(t, err)
		_, err = f.db.Pool.Exec(context.Background(), `UPDATE skiplock.jobs SET last_error = $1 WHERE id = $2`,
			"previous attempt: "+secret, res.ID)
		require.NoError(t, err)
		pages := []string{"/dead", "/dead?kind=billing.charge", "/jobs", "/jobs?state=dead", "/jobs/920000",
			"/jobs/" + fmt.Sprint(res.ID), "/jobs?kind=email.send"}
		for _, path := range pages {
			code, body := f.get(path)
			require.Equal(t, http.StatusOK, code, path)
			if readOnly {
				assert.NotContains(t, body, secret, "read-only %s shows error text or keys", path)
			}
		}
		_, body := f.get("/jobs/920000")
		_, dead := f.get("/dead")
		_, detail := f.get("/jobs/" + fmt.Sprint(res.ID))
		if readOnly {
			assert.Contains(t, body, `id="error-hidden"`)
			assert.Contains(t, detail, "hidden (read-only)")
			assert.Contains(t, dead, "billing.charge", "the groups are still listed")
		} else {
			assert.Contains(t, body, secret)
			assert.Contains(t, dead, secret)
			assert.Contains(t, detail, "uk-"+secret)
			assert.Contains(t, detail, "ent-"+secret)
			assert.Contains(t, detail, "previous attempt: "+secret)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	for name, o := range map[string]Options{
		"read-only with payloads": {ReadOnly: true, ShowPayloads: true, User: "a", Password: "b"},
		"payloads without auth":   {ShowPayloads: true},
		"host with a port":        {AllowedHosts: []string{"example.com:8080"}},
		"host with a scheme":      {AllowedHosts: []string{"https://example.com"}},
		"empty host":              {AllowedHosts: []string{""}},
		"user without password":   {User: "admin"},
		"bad schema":              {Schema: "a; DROP"},
		"bad prefix":              {Prefix: "jobs"},
	} {
		_, err := New(db.Pool, o)
		assert.ErrorIs(t, err, ErrInvalidOptions, name)
	}
	_, err := New(nil, Options{})
	assert.ErrorIs(t, err, ErrInvalidOptions)
	_, err = New(db.Pool, Options{ShowPayloads: true})
	assert.ErrorContains(t, err, "ShowPayloads")
	for _, o := range []Options{{ShowPayloads: true, Token: "t"}, {AllowedHosts: []string{"::1", "[::1]", "*", "a.example"}}} {
		h, err := New(db.Pool, o)
		require.NoError(t, err)
		_ = h.(*Dashboard).Close()
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "skiplock_up 1\n") })
	f := newFixture(t, Options{User: "admin", Password: "s3cret", Token: "tok-123", Metrics: metrics})
	basic := func(u, p string) http.Header {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.SetBasicAuth(u, p)
		return r.Header
	}
	for _, path := range []string{"/", "/jobs", "/dead", "/queues", "/workers", "/schedules", "/health",
		"/api/series", "/overview/panels", "/static/app.js", "/metrics", "/jobs/1", "/nope", "/healthz/", "/readyz/x"} {
		code, _, h := f.do(http.MethodGet, path, nil, nil)
		assert.Equal(t, http.StatusUnauthorized, code, path)
		assert.Contains(t, h.Get("WWW-Authenticate"), "Basic", path)
		// Refused: 401, or 429 once the failed logins from this address
		// are throttled (auth_test.go).
		refused := []int{http.StatusUnauthorized, http.StatusTooManyRequests}
		code, _, _ = f.do(http.MethodGet, path, nil, basic("admin", "wrong"))
		assert.Contains(t, refused, code, path)
		code, _, _ = f.do(http.MethodGet, path, nil, basic("Admin", "s3cret"))
		assert.Contains(t, refused, code, path)
		code, _, _ = f.do(http.MethodGet, path, nil, http.Header{"Authorization": {"Bearer tok-12"}})
		assert.Contains(t, refused, code, path)
	}
	f.d.gate.throttle.forget()
	// An unauthenticated POST changes nothing.
	code, _, _ := f.do(http.MethodPost, "/queues/pause", url.Values{"queue": {"mail"}}, nil)
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Zero(t, f.count(`SELECT count(*) FROM skiplock.queues`))

	for _, path := range []string{"/", "/jobs", "/metrics", "/static/app.js"} {
		code, _, _ := f.do(http.MethodGet, path, nil, basic("admin", "s3cret"))
		assert.Equal(t, http.StatusOK, code, path)
		code, _, _ = f.do(http.MethodGet, path, nil, http.Header{"Authorization": {"Bearer tok-123"}})
		assert.Equal(t, http.StatusOK, code, path)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		code, _ := f.get(path)
		assert.Equal(t, http.StatusOK, code, path)
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{ReadOnly: true})
	f.seed()
	dead := f.deadIDs[0]
	sig := "POST https://hooks.example.com/0: 503 " + hostile
	posts := map[string]url.Values{
		"/queues/pause":                           {"queue": {"mail"}},
		"/queues/resume":                          {"queue": {"mail"}},
		"/dead/replay":                            {"kind": {"webhook.deliver"}, "signature": {sig}, "confirm": {"yes"}},
		"/dead/purge":                             {"kind": {"webhook.deliver"}, "signature": {sig}, "confirm": {"yes"}},
		fmt.Sprintf("/jobs/%d/replay", dead):      {},
		fmt.Sprintf("/jobs/%d/cancel", f.readyID): {},
		"/":     {},
		"/jobs": {},
	}
	for path, form := range posts {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			code, _, _ := f.do(method, path, form, nil)
			assert.Equal(t, http.StatusForbidden, code, "%s %s", method, path)
		}
	}
	assert.Zero(t, f.count(`SELECT count(*) FROM skiplock.queues`), "a queue was paused")
	assert.Equal(t, 3, f.count(`SELECT count(*) FROM skiplock.jobs_dead`), "dead letters changed")
	assert.Equal(t, 2, f.count(`SELECT count(*) FROM skiplock.jobs WHERE NOT cancel_requested`), "jobs changed")
	// No action is offered.
	for _, path := range []string{"/", "/queues", "/dead", "/jobs/" + fmt.Sprint(dead), "/jobs/" + fmt.Sprint(f.readyID)} {
		code, body := f.get(path)
		require.Equal(t, http.StatusOK, code, path)
		assert.NotContains(t, strings.ToLower(body), `method="post"`, path)
		assert.NotContains(t, body, "/dead/confirm", path)
		assert.Contains(t, body, "read-only", path)
		assert.NotContains(t, body, marker, path)
	}
}

func TestCrossOriginPostRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	for _, hdr := range []http.Header{
		{"Sec-Fetch-Site": {"cross-site"}},
		{"Origin": {"https://evil.example"}},
	} {
		code, _, _ := f.do(http.MethodPost, "/queues/pause", url.Values{"queue": {"mail"}}, hdr)
		assert.Equal(t, http.StatusForbidden, code, hdr)
	}
	assert.Zero(t, f.count(`SELECT count(*) FROM skiplock.queues`))
	// Same origin works.
	code, _, h := f.do(http.MethodPost, "/queues/pause", url.Values{"queue": {"mail"}},
		http.Header{"Sec-Fetch-Site": {"same-origin"}})
	assert.Equal(t, http.StatusSeeOther, code)
	assert.Contains(t, h.Get("Location"), "/queues")
	// Actions reject GET.
	code, _ = f.get("/queues/pause?queue=mail")
	assert.Equal(t, http.StatusMethodNotAllowed, code)
}

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	paused := func() bool {
		var p bool
		err := f.db.Pool.QueryRow(context.Background(), `SELECT paused FROM skiplock.queues WHERE name = 'mail'`).Scan(&p)
		require.NoError(t, err)
		return p
	}
	code, _, _ := f.do(http.MethodPost, "/queues/pause", url.Values{"queue": {"mail"}}, nil)
	require.Equal(t, http.StatusSeeOther, code)
	assert.True(t, paused())
	_, body := f.get("/queues")
	assert.Contains(t, body, `action="/queues/resume"`)
	assert.Contains(t, body, "paused")
	code, _, _ = f.do(http.MethodPost, "/queues/resume", url.Values{"queue": {"mail"}}, nil)
	require.Equal(t, http.StatusSeeOther, code)
	assert.False(t, paused())
	code, body, _ = f.do(http.MethodPost, "/queues/pause", url.Values{"queue": {"<b>bad name</b>"}}, nil)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.NotContains(t, body, "<b>bad")
}

func TestReplayGroupMovesDeadLettersBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{ReplayRate: 1000})
	f.seed()
	f.insertDead(920000, "other.kind", "different failure")
	sig := "POST https://hooks.example.com/0: 503 " + hostile
	form := url.Values{"kind": {"webhook.deliver"}, "signature": {sig}}

	// Without confirmation nothing happens.
	code, _, _ := f.do(http.MethodPost, "/dead/replay", form, nil)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, 4, f.count(`SELECT count(*) FROM skiplock.jobs_dead`))

	form.Set("confirm", "yes")
	code, _, h := f.do(http.MethodPost, "/dead/replay", form, nil)
	require.Equal(t, http.StatusSeeOther, code)
	assert.Contains(t, h.Get("Location"), "/dead")
	runs := f.d.replays.recent()
	require.Len(t, runs, 1)
	select {
	case <-runs[0].finished:
	case <-time.After(30 * time.Second):
		t.Fatal("replay did not finish")
	}
	assert.Empty(t, runs[0].Err())
	assert.EqualValues(t, 3, runs[0].Done())
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM skiplock.jobs_dead`), "only the group is replayed")
	assert.Equal(t, 3, f.count(`SELECT count(*) FROM skiplock.jobs WHERE kind = 'webhook.deliver' AND queue = 'hooks' AND state = 'ready'`))
	_, body := f.get("/dead")
	assert.Contains(t, body, "done")
	assert.NotContains(t, body, `data-kind="webhook.deliver"`, "a replay shown done has emptied its group")
	assert.Contains(t, body, `data-kind="other.kind"`)
	assert.NotContains(t, body, "<script>alert")
}

// The dead-letter page shows replays as they stood when it took their status
// (before it read the groups), never as they stand while it renders.
func TestReplayStatusIsASnapshot(t *testing.T) {
	t.Parallel()
	run := &replayRun{Kind: "k", Signature: "s", Total: 3, Started: time.Now(), finished: make(chan struct{})}
	run.done.Store(1)
	rs := &replays{list: []*replayRun{run}}
	before := rs.status("")
	run.done.Store(3)
	close(run.finished)
	after := rs.status("")
	require.Len(t, before, 1)
	assert.True(t, before[0].Running)
	assert.EqualValues(t, 1, before[0].Done)
	assert.False(t, after[0].Running)
	assert.EqualValues(t, 3, after[0].Done)
}

func TestReplayAndPurgeOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	code, _, _ := f.do(http.MethodPost, fmt.Sprintf("/jobs/%d/replay", f.deadIDs[0]), url.Values{}, nil)
	require.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, 2, f.count(`SELECT count(*) FROM skiplock.jobs_dead`))
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM skiplock.jobs WHERE kind = 'webhook.deliver'`))
	code, _, _ = f.do(http.MethodPost, fmt.Sprintf("/jobs/%d/replay", f.deadIDs[0]), url.Values{}, nil)
	assert.Equal(t, http.StatusSeeOther, code, "a second replay answers the first's copy")
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM skiplock.jobs WHERE kind = 'webhook.deliver'`), "a dead letter replays once")

	sig := "POST https://hooks.example.com/1: 503 " + hostile
	form := url.Values{"kind": {"webhook.deliver"}, "signature": {sig}, "confirm": {"yes"}}
	code, _, _ = f.do(http.MethodPost, "/dead/purge", form, nil)
	require.Equal(t, http.StatusSeeOther, code)
	assert.Zero(t, f.count(`SELECT count(*) FROM skiplock.jobs_dead`))

	code, _, _ = f.do(http.MethodPost, fmt.Sprintf("/jobs/%d/cancel", f.readyID), url.Values{}, nil)
	require.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM skiplock.jobs_dead WHERE id = $1 AND reason = 'cancelled'`, f.readyID))
	code, _, _ = f.do(http.MethodPost, "/jobs/987654321/cancel", url.Values{}, nil)
	assert.Equal(t, http.StatusNotFound, code)
}

func TestJobSearchKeysetPagination(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ctx := context.Background()
	var want []int64
	for i := range 7 {
		res, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "q", Kind: "page.test", Payload: map[string]int{"i": i}})
		require.NoError(t, err)
		want = append([]int64{res.ID}, want...)
	}
	linkRe := regexp.MustCompile(`href="/jobs/(\d+)"`)
	nextRe := regexp.MustCompile(`href="/jobs\?([^"]+)" id="next-page"`)
	var got []int64
	path := "/jobs?kind=page.test&limit=3"
	for pages := 0; path != ""; pages++ {
		require.Less(t, pages, 5)
		code, body := f.get(path)
		require.Equal(t, http.StatusOK, code, body)
		for _, m := range linkRe.FindAllStringSubmatch(body, -1) {
			var id int64
			_, _ = fmt.Sscan(m[1], &id)
			got = append(got, id)
		}
		path = ""
		if m := nextRe.FindStringSubmatch(body); m != nil {
			path = "/jobs?" + strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	assert.Equal(t, want, got)

	code, body := f.get(fmt.Sprintf("/jobs?id=%d", want[3]))
	require.Equal(t, http.StatusOK, code)
	assert.Len(t, linkRe.FindAllString(body, -1), 1)
	for _, bad := range []string{"/jobs?id=abc", "/jobs?id=-1", "/jobs?state=nope", "/jobs?limit=100000", "/jobs?before=x"} {
		code, _ := f.get(bad)
		assert.Equal(t, http.StatusBadRequest, code, bad)
	}
	code, _ = f.get("/jobs/abc")
	assert.Equal(t, http.StatusBadRequest, code)
	code, _ = f.get("/jobs/424242")
	assert.Equal(t, http.StatusNotFound, code)
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	empty := dbtest.NewEmpty(t)
	h, err := New(empty.Pool, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	defer h.(*Dashboard).Close()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "pending")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
	// Pages say what is wrong instead of crashing.
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Host = "localhost"
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), "unavailable")

	f := newFixture(t, Options{})
	code, _ := f.get("/readyz")
	assert.Equal(t, http.StatusOK, code)
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Prefix: "/admin/queue/"})
	f.seed()
	code, body := f.get("/admin/queue/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `href="/admin/queue/jobs"`)
	assert.Contains(t, body, `src="/admin/queue/static/htmx.min.js"`)
	code, _ = f.get("/admin/queue/static/app.js")
	assert.Equal(t, http.StatusOK, code)
	code, _ = f.get("/admin/queue/readyz")
	assert.Equal(t, http.StatusOK, code)
	code, _ = f.get("/jobs")
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = f.get("/admin/queuex/jobs")
	assert.Equal(t, http.StatusNotFound, code)
	code, _, h := f.do(http.MethodPost, "/admin/queue/queues/pause", url.Values{"queue": {"mail"}}, nil)
	assert.Equal(t, http.StatusSeeOther, code)
	assert.True(t, strings.HasPrefix(h.Get("Location"), "/admin/queue/queues"), h.Get("Location"))
}

func TestSamplerRatesFromHeartbeats(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.d.sampler.stop() // drive it by hand
	ctx := context.Background()
	s := newSampler([]*pgxpool.Pool{f.db.Pool}, f.db.Schema, time.Hour, f.d.log)
	_, err := f.db.Pool.Exec(ctx, `INSERT INTO skiplock.workers (id, hostname, pid, queues, claimed_total, completed_total,
		failed_total, claim_p99_ms, heartbeat_at) VALUES ('w1', 'h', 1, '{q}', 100, 90, 5, 3.5, now() - interval '10 seconds')`)
	require.NoError(t, err)
	require.NoError(t, s.take(ctx))
	_, err = f.db.Pool.Exec(ctx, `UPDATE skiplock.workers SET claimed_total = 200, completed_total = 180, failed_total = 15,
		heartbeat_at = heartbeat_at + interval '10 seconds'`)
	require.NoError(t, err)
	require.NoError(t, s.take(ctx))
	require.NoError(t, s.take(ctx)) // no new beat: the rate stands
	all := s.samples(0)
	require.Len(t, all, 3)
	assert.Zero(t, all[0].Claimed, "no rate on first sight")
	for _, x := range all[1:] {
		assert.InDelta(t, 10, x.Claimed, 0.01)
		assert.InDelta(t, 9, x.Completed, 0.01)
		assert.InDelta(t, 1, x.Failed, 0.01)
		assert.InDelta(t, 3.5, x.ClaimP99MS, 0.01)
		assert.Equal(t, 1, x.LiveWorkers)
	}
	ser := s.series(0)
	assert.Len(t, ser.T, 3)
	require.NotNil(t, ser.ClaimP99[2])
	// The ring wraps.
	for range ringSize + 5 {
		require.NoError(t, s.take(ctx))
	}
	assert.Len(t, s.samples(0), ringSize)
}

func TestCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	require.NoError(t, f.d.Close())
	require.NoError(t, f.d.Close())
	code, _ := f.get("/")
	assert.Equal(t, http.StatusOK, code)
	// A replay after Close does not start.
	started := f.d.replays.start("", f.d.shards[0].client, skiplock.DeadLetterFilter{Kind: "k", Signature: "s"}, 0, 1, f.d.log)
	assert.False(t, started)
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "1,234,567", num(int64(1234567)))
	assert.Equal(t, "-1,000", num(-1000))
	assert.Equal(t, "+5", delta(10, 5))
	assert.Equal(t, "1.5 KiB", humanBytes(1536))
	assert.Equal(t, "2m 5s", secs(125))
	assert.Equal(t, statusFail, worst(statusOK, statusWarn, statusFail))
	assert.True(t, errors.Is(invalid("X", "y"), ErrInvalidOptions))
}

// An action's body is bounded and must be a form: a body past the bound is
// a 413 and a malformed one a 400 saying so, before any handler runs.
func TestActionBodyBoundedAndParsed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	post := func(body string) (int, string) {
		resp, err := http.Post(f.srv.URL+"/queues/pause", "application/x-www-form-urlencoded", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := post("queue=mail&pad=" + strings.Repeat("x", 200<<10))
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Contains(t, body, "larger than")
	code, body = post("queue=%zz")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "not a valid form")
	assert.Zero(t, f.count(`SELECT count(*) FROM skiplock.queues`), "a refused action changed something")
}

// Only flash messages this process set are shown: a crafted link cannot
// make the dashboard say something it did not. They are cut to 300 bytes,
// never through a character, and rendered escaped.
func TestFlashOnlyFromTheServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	// Set by the server: shown.
	code, _, h := f.do(http.MethodPost, "/queues/pause", url.Values{"queue": {"mail"}}, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	require.Equal(t, http.StatusSeeOther, code)
	loc := h.Get("Location")
	_, body := f.get(loc)
	assert.Contains(t, body, `<p class="flash" role="status">queue mail paused</p>`)

	// Forged: not shown, whether unsigned, badly signed or a signature moved
	// to another message.
	u, err := url.Parse(loc)
	require.NoError(t, err)
	sig := u.Query().Get("fs")
	require.NotEmpty(t, sig)
	for _, q := range []url.Values{
		{"flash": {"Your session expired: call +1 555 0100"}},
		{"flash": {"Your session expired: call +1 555 0100"}, "fs": {"AAAAAAAAAAAAAAAAAAAAAA"}},
		{"flash": {"queue mail resumed"}, "fs": {sig}},
	} {
		_, body := f.get("/queues?" + q.Encode())
		assert.NotContains(t, body, `class="flash"`, q.Encode())
	}

	// Bounded on a character boundary, and escaped.
	long := strings.Repeat("a", 299) + "é<b>" + strings.Repeat("QZ", 50)
	for msg, want := range map[string]string{
		long:                        `role="status">` + strings.Repeat("a", 299) + "</p>",
		"<script>alert(1)</script>": "&lt;script&gt;alert(1)&lt;/script&gt;",
	} {
		rec := httptest.NewRecorder()
		f.d.redirect(rec, httptest.NewRequest(http.MethodPost, "/", nil), "/queues", msg)
		_, body := f.get(rec.Header().Get("Location"))
		assert.True(t, utf8.ValidString(body))
		assert.Contains(t, body, want)
		assert.NotContains(t, body, "QZ")
		assert.NotContains(t, body, "<script>alert(1)")
	}
}

// The overview warns about due jobs whose kind no live worker handles,
// naming the kind and linking to the jobs; it shows nothing when every
// kind is handled.
func TestOverviewNamesUnhandledKinds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	_, body := f.get("/")
	assert.NotContains(t, body, `id="unhandled-kinds"`, "the legacy worker row serves every kind of mail")

	ctx := context.Background()
	_, err := f.db.Pool.Exec(ctx, `UPDATE skiplock.workers SET handles = '[{"queues": ["mail"], "kinds": ["email.send"]}]'`)
	require.NoError(t, err)
	_, err = f.client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "mail", Kind: "email.sned", Payload: map[string]string{"email": marker}})
	require.NoError(t, err)
	f.d.panels.invalidate() // changed outside the dashboard: it would show within panelTTL
	for _, path := range []string{"/", "/overview/panels"} {
		code, body := f.get(path)
		require.Equal(t, http.StatusOK, code, body)
		assert.Contains(t, body, `id="unhandled-kinds"`, path)
		assert.Contains(t, body, `kind=email.sned&amp;state=ready">email.sned</a> in mail: 1 ready`, path)
		assert.NotContains(t, body, marker, path)
	}
}

// TestOverviewNamesThePin holds a transaction with an xid open and checks the
// vacuum panel names its holder, its statement's first words (never a
// literal) and the claim's p99 against its baseline.
func TestOverviewNamesThePin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	ctx := context.Background()
	_, err := f.db.Pool.Exec(ctx, `UPDATE skiplock.workers SET claim_p99_ms = 20, claim_p99_baseline_ms = 2.5`)
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(f.db.URL)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "nightly-report"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT txid_current(), length('`+marker+`')`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	// The panel lists holders older than xminListAfter: a real wait. It
	// lists the three oldest, and other tests' sessions holding an xid in
	// another database hold this one's horizon too (it shows them, rightly):
	// on a slow machine three DROP DATABASEs of other tests, waiting seconds
	// for a checkpoint, held older xids than this pin and filled the list.
	// They end; the pin stays, and is listed once they have.
	time.Sleep(time.Duration(xminListAfter*float64(time.Second)) + 200*time.Millisecond)
	code, body := f.get("/overview/panels")
	for deadline := time.Now().Add(time.Minute); code == http.StatusOK &&
		!strings.Contains(body, "nightly-report") && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		f.d.panels.invalidate()
		code, body = f.get("/overview/panels")
	}
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `id="pin-holder"`)
	assert.Contains(t, body, "nightly-report")
	assert.Contains(t, body, "<code>SELECT txid_current(), length(</code>")
	assert.Contains(t, body, "claim p99 20.0 ms against a 2.5 ms baseline (8.0×)")
	assert.NotContains(t, body, marker)
}

// The search and the detail page read jobs through the store's job lookup,
// the statements behind the Client's JobGet and JobList: completed jobs
// (state "completed"; "done", the name before, still works), the id search
// keeping the other filters, and the detail of a completed job.
func TestJobSearchFindsCompletedJobs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ctx := context.Background()
	require.NoError(t, skiplock.Handle(f.client, "done.test", func(context.Context, *skiplock.Job[struct{}]) error { return nil }))
	res, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "q", Kind: "done.test", Tenant: "acme",
		Metadata: skiplock.Metadata{"tag": "t1"}})
	require.NoError(t, err)
	other, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "q", Kind: "page.test", Tenant: "globex"})
	require.NoError(t, err)
	_, err = f.client.Drain(ctx, skiplock.DrainOptions{Kinds: []string{"done.test"}})
	require.NoError(t, err)
	link, otherLink := fmt.Sprintf(`href="/jobs/%d"`, res.ID), fmt.Sprintf(`href="/jobs/%d"`, other.ID)

	for _, path := range []string{"/jobs?state=completed", "/jobs?state=done", "/jobs?state=completed&tenant=acme"} {
		code, body := f.get(path)
		require.Equal(t, http.StatusOK, code, path)
		assert.Contains(t, body, link, path)
		assert.Contains(t, body, `st-completed`, path)
		assert.NotContains(t, body, otherLink, path)
	}
	_, body := f.get("/jobs?state=completed&tenant=globex")
	assert.NotContains(t, body, link, "a tenant filter")
	_, body = f.get("/jobs")
	assert.NotContains(t, body, link, "without a state: in flight or dead only")
	assert.Contains(t, body, otherLink)

	_, body = f.get(fmt.Sprintf("/jobs?id=%d&tenant=globex", other.ID))
	assert.Contains(t, body, otherLink)
	_, body = f.get(fmt.Sprintf("/jobs?id=%d&tenant=acme", other.ID))
	assert.NotContains(t, body, otherLink, "an id search keeps the other filters")
	_, body = f.get(fmt.Sprintf("/jobs?id=%d", res.ID))
	assert.NotContains(t, body, link, "a completed job by id, without state=completed")
	_, body = f.get(fmt.Sprintf("/jobs?id=%d&state=completed", res.ID))
	assert.Contains(t, body, link)

	code, body := f.get(fmt.Sprintf("/jobs/%d", res.ID))
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "finished")
	assert.Contains(t, body, `&#34;tag&#34;: &#34;t1&#34;`, "metadata, indented")
}
