package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

// multiFixture is a dashboard over three databases, each seeded with
// different numbers of jobs of a kind of its own.
type multiFixture struct {
	t       *testing.T
	dbs     []*dbtest.DB
	names   []string
	clients []*skiplock.Client
	srv     *httptest.Server
	d       *Dashboard
	logs    *strings.Builder
}

// multiNames are the three databases' names: one holds a "/" and a ":" as
// host:port/dbname labels do, so its scope must be escaped in paths.
var multiNames = []string{"alpha", "10.0.0.7:5432/orders", "gamma"}

func newMultiFixture(t *testing.T, opts Options) *multiFixture {
	t.Helper()
	log, logs := logBuffer()
	f := &multiFixture{t: t, names: multiNames, logs: logs}
	var dbs []Database
	for _, name := range f.names {
		db := dbtest.New(t)
		f.dbs = append(f.dbs, db)
		dbs = append(dbs, Database{Name: name, Pool: db.Pool})
		c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
		require.NoError(t, err)
		f.clients = append(f.clients, c)
	}
	opts.Schema = f.dbs[0].Schema
	opts.Logger = log
	h, err := NewForDatabases(dbs, opts)
	require.NoError(t, err)
	f.d = h.(*Dashboard)
	f.srv = httptest.NewServer(h)
	t.Cleanup(func() {
		f.srv.Close()
		_ = f.d.Close()
	})
	return f
}

// kindOf is database i's own job kind.
func kindOf(i int) string { return fmt.Sprintf("kind-of-db-%d", i) }

// seed gives database i (i+1)*2 ready jobs, i+1 scheduled ones, i+2 dead
// letters and one live worker, all with the PII marker in their payloads.
func (f *multiFixture) seed() {
	ctx := context.Background()
	for i, c := range f.clients {
		for range (i + 1) * 2 {
			_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "mail", Kind: kindOf(i), Payload: map[string]string{"email": marker}})
			require.NoError(f.t, err)
		}
		for range i + 1 {
			_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "mail", Kind: kindOf(i), Payload: map[string]string{"email": marker},
				RunAt: time.Now().Add(time.Hour)})
			require.NoError(f.t, err)
		}
		for j := range i + 2 {
			_, err := f.dbs[i].Pool.Exec(ctx, `INSERT INTO skiplock.jobs_dead
				(id, priority, attempts, max_attempts, run_at, created_at, queue, kind, reason, last_error, payload)
				VALUES ($1, 0, 5, 5, now(), now(), 'hooks', $2, 'error', 'HTTP 503', jsonb_build_object('email', $3::text))`,
				900000+j, kindOf(i), marker)
			require.NoError(f.t, err)
		}
		_, err := f.dbs[i].Pool.Exec(ctx, `INSERT INTO skiplock.workers (id, hostname, pid, queues, concurrency, running,
			claimed_total, completed_total, failed_total, claim_p99_ms) VALUES ($1, 'host', 1, '{mail}', 4, 0, 10, 9, 1, $2)`,
			fmt.Sprintf("host:%d:w", i), 1.5+float64(i))
		require.NoError(f.t, err)
	}
}

// scope is database i's path prefix.
func (f *multiFixture) scope(i int) string { return "/db/" + url.PathEscape(f.names[i]) }

// do sends a request; an action (form not nil) comes from the same origin.
func (f *multiFixture) do(method, path string, form url.Values) (int, string, http.Header) {
	f.t.Helper()
	return doRequest(f.t, f.srv.URL, method, path, form, http.Header{"Sec-Fetch-Site": {"same-origin"}})
}

var (
	dbRowRE  = regexp.MustCompile(`(?s)<tr[^>]*data-db="([^"]*)">(.*?)</tr>`)
	dbCellRE = regexp.MustCompile(`data-col="([a-z0-9]+)">([0-9]+)<`)
)

// breakdown parses the overview's database table: per database name ("":
// the sums row), per column, the figure.
func breakdown(t *testing.T, body string) map[string]map[string]int64 {
	t.Helper()
	out := map[string]map[string]int64{}
	for _, m := range dbRowRE.FindAllStringSubmatch(body, -1) {
		cols := map[string]int64{}
		for _, c := range dbCellRE.FindAllStringSubmatch(m[2], -1) {
			n, err := strconv.ParseInt(c[2], 10, 64)
			require.NoError(t, err)
			cols[c[1]] = n
		}
		out[m[1]] = cols
	}
	return out
}

func TestDashboardOverManyDatabasesAddsUp(t *testing.T) {
	t.Parallel()
	f := newMultiFixture(t, Options{})
	f.seed()
	ctx := context.Background()
	require.NoError(t, f.d.sampler.take(ctx))

	code, body, _ := f.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.NotContains(t, body, marker)
	rows := breakdown(t, body)
	require.Len(t, rows, len(f.names)+1, "one line per database and the sums:\n%s", body)

	// Each database's line is what that database's own views say, and the
	// sums line is the sum of the lines: ready 2+4+6, scheduled 1+2+3,
	// dead 2+3+4, one live worker each.
	sum := map[string]int64{}
	for i, name := range f.names {
		row := rows[name]
		require.NotNil(t, row, name)
		stats, err := health.QueueStats(ctx, f.dbs[i].Pool, f.dbs[i].Schema)
		require.NoError(t, err)
		var ready, scheduled, dead int64
		for _, s := range stats {
			ready, scheduled, dead = ready+s.Ready, scheduled+s.Scheduled, dead+s.Dead
		}
		assert.Equal(t, ready, row["ready"], name)
		assert.Equal(t, int64((i+1)*2), row["ready"], name)
		assert.Equal(t, scheduled, row["scheduled"], name)
		assert.Equal(t, dead, row["dead"], name)
		assert.Equal(t, int64(i+2), row["dead"], name)
		assert.Equal(t, int64(1), row["workers"], name)
		for k, v := range row {
			sum[k] += v
		}
	}
	assert.Equal(t, sum, rows[""], "the sums line is the sum of the databases' lines")
	assert.Equal(t, int64(12), rows[""]["ready"])
	assert.Equal(t, int64(6), rows[""]["scheduled"])
	assert.Equal(t, int64(9), rows[""]["dead"])

	// The panels add up too: the lag panel's mail queue has every
	// database's ready jobs, the dead-letter panel all of them, the claim
	// panel every live worker and the worst p99.
	assert.Regexp(t, `(?s)/jobs\?queue=mail">mail</a>.*?<td class="num">12</td>`, body)
	assert.Regexp(t, `(?s)id="panel-dead".*?>9</a>`, body)
	assert.Regexp(t, `(?s)live workers</dt><dd><a href="/workers">3</a>`, body)
	assert.Contains(t, body, "<dd>3.5 ms <small>(worst live worker")
	assert.Contains(t, body, `id="database-selector"`)
	for i := range f.names {
		assert.Contains(t, body, `href="`+f.scope(i)+`/"`, "the breakdown links each database's own overview")
	}

	// One database's overview is that database's alone.
	code, body, _ = f.do(http.MethodGet, f.scope(1)+"/", nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.NotContains(t, body, `id="database-table"`)
	assert.Regexp(t, `(?s)/jobs\?queue=mail">mail</a>.*?<td class="num">4</td>`, body)
	assert.Contains(t, body, `hx-get="`+f.scope(1)+`/overview/panels"`)
	assert.Contains(t, body, `href="/static/style.css"`, "static assets stay at the root")

	// The charts: every database's series, summed, and each one's own.
	for _, p := range []string{"/api/series", f.scope(2) + "/api/series"} {
		code, body, _ = f.do(http.MethodGet, p, nil)
		require.Equal(t, http.StatusOK, code, p)
		var s series
		require.NoError(t, json.Unmarshal([]byte(body), &s), p)
		assert.NotEmpty(t, s.T, p)
		assert.Len(t, s.Claimed, len(s.T), p)
	}
	code, body, _ = f.do(http.MethodGet, "/readyz", nil)
	assert.Equal(t, http.StatusOK, code, body)
}

func TestDashboardOverManyDatabasesScopesPagesAndActions(t *testing.T) {
	t.Parallel()
	f := newMultiFixture(t, Options{})
	f.seed()
	ctx := context.Background()

	// Pages of one database list that database's jobs only.
	for i := range f.names {
		for _, p := range []string{"/jobs", "/dead", "/queues", "/workers", "/schedules", "/health", "/workflows"} {
			code, body, _ := f.do(http.MethodGet, f.scope(i)+p, nil)
			require.Equal(t, http.StatusOK, code, "%s%s: %s", f.scope(i), p, body)
			assert.NotContains(t, body, marker, p)
			if p == "/jobs" || p == "/dead" {
				for j := range f.names {
					if j == i {
						assert.Contains(t, body, kindOf(j), p)
					} else {
						assert.NotContains(t, body, kindOf(j), "%s of database %d shows database %d's jobs", p, i, j)
					}
				}
			}
		}
	}
	// Unscoped, a page asks which database, linking each.
	code, body, _ := f.do(http.MethodGet, "/jobs?state=dead", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `id="choose-database"`)
	for i := range f.names {
		assert.Contains(t, body, `href="`+f.scope(i)+`/jobs?state=dead"`)
	}
	// The host rule holds in a scope too (DNS rebinding).
	req := httptest.NewRequest(http.MethodGet, f.scope(0)+"/jobs", nil)
	req.Host = "rebound.example"
	rec := httptest.NewRecorder()
	f.d.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusMisdirectedRequest, rec.Code)
	// ?db= redirects into the scope; an unknown database is a 404.
	code, _, h := f.do(http.MethodGet, "/jobs?db=gamma&state=ready", nil)
	assert.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, "/db/gamma/jobs?state=ready", h.Get("Location"))
	code, _, _ = f.do(http.MethodGet, "/db/nope/jobs", nil)
	assert.Equal(t, http.StatusNotFound, code)
	code, _, _ = f.do(http.MethodGet, "/jobs?db=nope", nil)
	assert.Equal(t, http.StatusNotFound, code)

	paused := func(i int) bool {
		stats, err := health.QueueStats(ctx, f.dbs[i].Pool, f.dbs[i].Schema)
		require.NoError(t, err)
		for _, s := range stats {
			if s.Queue == "mail" {
				return s.Paused
			}
		}
		return false
	}
	// An unscoped action is refused and changes nothing.
	code, _, _ = f.do(http.MethodPost, "/queues/pause", url.Values{"queue": {"mail"}})
	assert.Equal(t, http.StatusBadRequest, code)
	for i := range f.names {
		assert.False(t, paused(i), "an unscoped pause paused database %d", i)
	}
	// A scoped pause goes to that database only, and comes back to its page.
	code, _, h = f.do(http.MethodPost, f.scope(1)+"/queues/pause", url.Values{"queue": {"mail"}})
	require.Equal(t, http.StatusSeeOther, code)
	assert.True(t, strings.HasPrefix(h.Get("Location"), f.scope(1)+"/queues?"), h.Get("Location"))
	assert.Equal(t, []bool{false, true, false}, []bool{paused(0), paused(1), paused(2)})
	assert.Contains(t, f.logs.String(), "database="+f.names[1])

	// A replay goes to the database whose dead letter it is.
	count := func(i int, table string) int {
		var n int
		require.NoError(t, f.dbs[i].Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock."+table).Scan(&n))
		return n
	}
	code, body, _ = f.do(http.MethodPost, f.scope(2)+"/jobs/900000/replay", url.Values{})
	require.Equal(t, http.StatusSeeOther, code, body)
	assert.Equal(t, []int{2, 3, 3}, []int{count(0, "jobs_dead"), count(1, "jobs_dead"), count(2, "jobs_dead")})
	assert.Equal(t, []int{3, 6, 10}, []int{count(0, "jobs"), count(1, "jobs"), count(2, "jobs")})
}

func TestNewForDatabasesRefusesBadOptions(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	quiet := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for name, dbs := range map[string][]Database{
		"Databases":         nil,
		"Databases[1].Pool": {{Name: "a", Pool: db.Pool}, {Name: "b"}},
		"Databases[1].Name": {{Name: "a", Pool: db.Pool}, {Name: "a", Pool: db.Pool}},
		"Databases[0].Name": {{Name: " ", Pool: db.Pool}, {Name: "a", Pool: db.Pool}},
	} {
		_, err := NewForDatabases(dbs, quiet)
		require.ErrorIs(t, err, ErrInvalidOptions, name)
		assert.Contains(t, err.Error(), name)
	}
	o := quiet
	o.Replica = db.Pool
	_, err := NewForDatabases([]Database{{Name: "a", Pool: db.Pool}, {Name: "b", Pool: db.Pool}}, o)
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "Replica")
}

// TestDashboardOverManyDatabasesUnderPrefix: mounted under a prefix, a
// database's scope (with an escaped "/" in its name) sits below it, and
// its links and redirects keep both.
func TestDashboardOverManyDatabasesUnderPrefix(t *testing.T) {
	t.Parallel()
	f := newMultiFixture(t, Options{Prefix: "/admin"})
	f.seed()
	scoped := "/admin" + f.scope(1)
	code, body, _ := f.do(http.MethodGet, scoped+"/queues", nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `action="`+scoped+`/queues/pause"`)
	assert.Contains(t, body, `href="/admin/static/style.css"`)
	assert.Contains(t, body, `href="`+scoped+`/jobs?queue=mail"`)
	code, _, h := f.do(http.MethodPost, scoped+"/queues/pause", url.Values{"queue": {"mail"}})
	require.Equal(t, http.StatusSeeOther, code)
	assert.True(t, strings.HasPrefix(h.Get("Location"), scoped+"/queues?"), h.Get("Location"))
	code, _, h = f.do(http.MethodGet, "/admin/jobs?db="+url.QueryEscape(f.names[1]), nil)
	assert.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, scoped+"/jobs", h.Get("Location"))
	code, body, _ = f.do(http.MethodGet, "/admin/", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `href="`+scoped+`/"`)
}
