package dashboard

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrations"
)

//go:embed static
var staticFS embed.FS

// Options configure the dashboard. The zero value of every field means its
// documented default: schema "skiplock", no authentication, read-write,
// payloads never revealed.
type Options struct {
	// Schema holds skiplock's tables. Default "skiplock".
	Schema string
	// Prefix is the URL path the handler is mounted under, e.g. "/queue"
	// (default: the root). The handler strips it itself, so mount it with
	// mux.Handle(prefix+"/", h) and no http.StripPrefix; every link it renders
	// starts with it.
	Prefix string
	// ReadOnly hides every action (pause, resume, cancel, replay, purge) and
	// refuses every request that is not a GET or HEAD with 403.
	ReadOnly bool
	// User and Password, when both set, make every path except /healthz and
	// /readyz require HTTP basic auth with these credentials. Set both or
	// neither.
	User, Password string
	// Token, when set, is accepted as "Authorization: Bearer <Token>" on
	// every path except /healthz and /readyz (alone, or besides basic auth).
	Token string
	// ShowPayloads lets a user who passed authentication reveal one job's
	// payload at a time on its detail page (a POST, refused cross-origin;
	// each reveal is logged with the job id and user, never the payload).
	// Payloads are never rendered otherwise. It requires User and Password
	// or Token (an anonymous request never sees a payload) and is not
	// allowed with ReadOnly: a read-only dashboard is for viewers, and
	// payloads are personal data.
	ShowPayloads bool
	// Encryption, when set, opens sealed payloads (skiplock.Config.Encryption)
	// for a ShowPayloads reveal; without it a reveal shows the envelope.
	// Nothing else the dashboard renders holds a payload.
	Encryption *skiplock.Keyring
	// AllowedHosts are the host names (or IP literals) the dashboard answers
	// to, compared with the request's Host header without its port; other
	// hosts get 421 Misdirected Request. This defeats DNS rebinding, where a
	// hostile web page points its own name at the dashboard's address and
	// becomes same-origin with it. "*" accepts any host. When empty: a
	// dashboard without User/Password or Token answers only to loopback
	// names (localhost, 127.0.0.0/8, ::1); one with authentication answers
	// to any host (a rebound page cannot present the credentials, which the
	// browser keeps per origin). /healthz and /readyz answer to any host,
	// for orchestrators' probes that address a pod by IP.
	AllowedHosts []string
	// Logger receives request errors and an audit line for every action and
	// reveal (job ids, queues, kinds, counts; never payloads). Default
	// slog.Default().
	Logger *slog.Logger
	// Metrics, when set, is served at /metrics behind the same
	// authentication as the pages.
	Metrics http.Handler
	// SampleInterval is how often the throughput sampler reads the workers'
	// counters and the queue lag for the charts. Default 5s.
	SampleInterval time.Duration
	// ReplayRate is how many jobs per second a dead-letter replay started
	// from the dashboard re-enqueues (a trickle, so a replay does not flood
	// a queue). Each group replays at this rate, one replay per group at a
	// time: replays of several groups add up. Default 50.
	ReplayRate float64
	// QueryTimeout bounds each page's database work. Default 5s.
	QueryTimeout time.Duration
	// Replica, when set, is a pool on a streaming replica (hot standby) of
	// the database: the pages' figures and lists (overview, queues, jobs,
	// dead letters, workers), the health page's checks of table contents
	// and the charts' sampler read there, and every page says how far
	// behind the primary it is. Actions (pause, resume, cancel, replay,
	// purge, payload reveal) and their confirmation counts, /readyz, the
	// schedules page and what only the primary knows (its vacuum
	// statistics, the sessions holding back its xmin horizon) stay on the
	// primary pool. The caller owns it. Not allowed with several databases
	// (NewForDatabases).
	Replica *pgxpool.Pool
}

// Database is one database of a dashboard over several (NewForDatabases):
// an application split by tenant across databases, each with its own
// skiplock schema (Options.Schema in every one).
type Database struct {
	// Name labels the database on every page and in its pages' paths
	// (/db/{Name}/...): a name for people, such as host:port/dbname or the
	// shard's name; never a URL (it may hold a password). Names must be
	// distinct and non-empty.
	Name string
	// Pool is the database's primary: its pages read there and its actions
	// (pause, resume, cancel, replay, purge) go there. The caller owns it.
	Pool *pgxpool.Pool
}

func (o Options) withDefaults() Options {
	if o.Schema == "" {
		o.Schema = "skiplock"
	}
	o.Prefix = strings.TrimRight(o.Prefix, "/")
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = 5 * time.Second
	}
	if o.ReplayRate <= 0 {
		o.ReplayRate = 50
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 5 * time.Second
	}
	return o
}

// ErrInvalidOptions is wrapped by every error New returns for bad Options.
var ErrInvalidOptions = errors.New("dashboard: invalid options")

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...))
}

func (o Options) validate() error {
	if err := migrations.ValidateSchema(o.Schema); err != nil {
		return invalid("Schema", "%v", err)
	}
	if o.Prefix != "" && (!strings.HasPrefix(o.Prefix, "/") || strings.ContainsAny(o.Prefix, "?#{} ")) {
		return invalid("Prefix", "must be a path starting with /, got %q", o.Prefix)
	}
	if (o.User == "") != (o.Password == "") {
		return invalid("User", "set both User and Password for basic auth, or neither")
	}
	if o.ReadOnly && o.ShowPayloads {
		return invalid("ShowPayloads", "payloads cannot be revealed on a read-only dashboard")
	}
	if o.ShowPayloads && !o.authConfigured() {
		return invalid("ShowPayloads", "revealing payloads requires an authenticated user: set User and Password, or Token")
	}
	for _, h := range o.AllowedHosts {
		if err := CheckAllowedHost(h); err != nil {
			return invalid("AllowedHosts", "%v", err)
		}
	}
	return nil
}

// authConfigured reports whether requests must carry credentials.
func (o Options) authConfigured() bool { return o.User != "" || o.Token != "" }

// Dashboard is the handler New returns. Close stops its background work: the
// throughput sampler and any dead-letter replay in progress.
type Dashboard struct {
	// shards are the databases, in the order given; one for New.
	shards  []*shard
	opts    Options
	log     *slog.Logger
	pages   map[string]*pageTemplate
	mux     *http.ServeMux
	csrf    *http.CrossOriginProtection
	gate    *gate  // Host check, authentication, login throttle
	flash   []byte // HMAC key: only flash messages this process set are shown
	sampler *sampler
	replays *replays
	panels  panelCache // the overview panels' last read per database

	closeOnce sync.Once
}

// shard is one database the dashboard shows.
type shard struct {
	idx    int
	name   string
	pool   *pgxpool.Pool    // the primary: actions and the primary's own figures
	read   *pgxpool.Pool    // where pages read: Options.Replica, else pool
	client *skiplock.Client // over pool: actions, and pages that read the primary
	// reader is a client over read, never started: the job and dead-letter
	// pages read through it, on the replica when there is one.
	reader *skiplock.Client
}

// New returns the dashboard as an http.Handler over pool (which the caller
// owns and closes after the handler's Close). It starts a sampler that reads
// the workers' counters every SampleInterval for the throughput charts; the
// returned value is a *Dashboard, whose Close stops it.
//
// Routes, relative to Options.Prefix: / (overview: the five panels and the
// charts), /queues, /jobs, /jobs/{id}, /dead, /schedules, /limits, /workers,
// /health (the doctor's checks), /healthz (the process is up), /readyz (the
// database answers and the schema is fully migrated; 503 otherwise) and, when
// Options.Metrics is set, /metrics. Actions are POST only, refused
// cross-origin (http.CrossOriginProtection) and in read-only mode.
func New(pool *pgxpool.Pool, opts Options) (http.Handler, error) {
	if pool == nil {
		return nil, invalid("pool", "must not be nil")
	}
	return newDashboard([]Database{{Name: "", Pool: pool}}, opts)
}

// NewForDatabases is New for an application split across several databases
// (a skiplock.Fleet, `skiplock serve --database-url A --database-url B`).
// The overview adds the databases' figures up (counts summed, lags and
// p99s the worst, the vacuum panel the worst database's) and lists each
// database's figures beside the sums; every other page, and every action,
// is scoped to one database under /db/{Name}/ (/queues becomes
// /db/{Name}/queues; ?db=Name on a GET redirects there), and an action goes
// to that database's primary. An unscoped page other than the overview
// asks which database. /readyz answers 200 only when every database is
// ready; the charts sum every database's workers. Options.Replica is not
// allowed with several databases. With one database it is New.
func NewForDatabases(dbs []Database, opts Options) (http.Handler, error) {
	if len(dbs) == 0 {
		return nil, invalid("Databases", "at least one database is needed")
	}
	seen := map[string]bool{}
	for i, db := range dbs {
		field := fmt.Sprintf("Databases[%d]", i)
		if db.Pool == nil {
			return nil, invalid(field+".Pool", "must not be nil")
		}
		if len(dbs) == 1 {
			break
		}
		if strings.TrimSpace(db.Name) == "" || !utf8.ValidString(db.Name) || strings.ContainsAny(db.Name, "\x00\n\r") {
			return nil, invalid(field+".Name", "must be a non-empty line of text")
		}
		if seen[db.Name] {
			return nil, invalid(field+".Name", "%q is given twice", db.Name)
		}
		seen[db.Name] = true
	}
	if len(dbs) > 1 && opts.Replica != nil {
		return nil, invalid("Replica", "not allowed with several databases")
	}
	return newDashboard(dbs, opts)
}

func newDashboard(dbs []Database, opts Options) (http.Handler, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	d := &Dashboard{
		opts:  opts,
		log:   opts.Logger,
		pages: pages,
		csrf:  http.NewCrossOriginProtection(),
		gate:  newGate(opts),
		flash: make([]byte, 32),
	}
	reads := make([]*pgxpool.Pool, len(dbs))
	for i, db := range dbs {
		client, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: opts.Schema, Logger: opts.Logger, Encryption: opts.Encryption})
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		s := &shard{idx: i, name: db.Name, pool: db.Pool, read: db.Pool, client: client, reader: client}
		if opts.Replica != nil {
			s.read = opts.Replica
			// A Client that is never started only runs the statements its
			// methods run: the lookups, on the replica.
			if s.reader, err = skiplock.NewClient(opts.Replica, skiplock.Config{Schema: opts.Schema, Logger: opts.Logger,
				Encryption: opts.Encryption}); err != nil {
				return nil, fmt.Errorf("dashboard: %w", err)
			}
		}
		reads[i] = s.read
		d.shards = append(d.shards, s)
	}
	if _, err := rand.Read(d.flash); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d.csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusForbidden, "cross-origin request refused")
	}))
	d.sampler = newSampler(reads, opts.Schema, opts.SampleInterval, d.log)
	d.replays = newReplays()
	d.routes()
	d.sampler.start()
	return d, nil
}

// Close stops the sampler and cancels any replay in progress, waiting for
// both. It is idempotent. Requests served after Close still work; the charts
// just stop moving.
func (d *Dashboard) Close() error {
	d.closeOnce.Do(func() {
		d.sampler.stop()
		d.replays.stop()
	})
	return nil
}

func (d *Dashboard) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	files := http.FileServerFS(static)
	m.Handle("GET /static/", http.StripPrefix("/static", cacheStatic(files)))
	m.HandleFunc("GET /healthz", d.healthz)
	m.HandleFunc("GET /readyz", d.readyz)
	if d.opts.Metrics != nil {
		m.Handle("GET /metrics", d.opts.Metrics)
	}

	m.HandleFunc("GET /{$}", d.overview)
	m.HandleFunc("GET /overview/panels", d.overviewPanels)
	m.HandleFunc("GET /api/series", d.series)
	m.HandleFunc("GET /queues", d.queues)
	m.HandleFunc("GET /jobs", d.jobs)
	m.HandleFunc("GET /jobs/{id}", d.job)
	m.HandleFunc("GET /dead", d.dead)
	m.HandleFunc("GET /dead/confirm", d.deadConfirm)
	m.HandleFunc("GET /schedules", d.schedules)
	m.HandleFunc("GET /limits", d.limits)
	m.HandleFunc("GET /workers", d.workers)
	m.HandleFunc("GET /health", d.doctor)
	m.HandleFunc("GET /workflows", d.workflows)
	m.HandleFunc("GET /workflows/{id}", d.workflow)

	m.Handle("POST /queues/pause", d.action(d.pauseQueue))
	m.Handle("POST /queues/resume", d.action(d.resumeQueue))
	m.Handle("POST /jobs/{id}/cancel", d.action(d.cancelJob))
	m.Handle("POST /jobs/{id}/replay", d.action(d.replayJob))
	m.Handle("POST /jobs/{id}/payload", d.action(d.payload))
	m.Handle("POST /workflows/{id}/tasks/{task}/output", d.action(d.taskOutput))
	m.Handle("POST /dead/replay", d.action(d.replayGroup))
	m.Handle("POST /dead/purge", d.action(d.purgeGroup))
	d.mux = m
}

// action wraps a state-changing (or audited) handler: refused cross-origin. (ServeHTTP
// already refused it in read-only mode and bounded and parsed its form.)
func (d *Dashboard) action(h http.HandlerFunc) http.Handler {
	return d.csrf.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer d.panels.invalidate() // the panels show what the action changed
		h(w, r)
	}))
}

// ServeHTTP strips the prefix, authenticates, sets the security headers and
// routes.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.opts.Prefix != "" {
		rest, ok := strings.CutPrefix(r.URL.Path, d.opts.Prefix)
		if !ok || (rest != "" && rest[0] != '/') {
			http.NotFound(w, r)
			return
		}
		if rest == "" {
			http.Redirect(w, r, d.opts.Prefix+"/", http.StatusMovedPermanently)
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		// Keep the escaped form: a database's scope may hold an escaped "/".
		rawRest, _ := strings.CutPrefix(r.URL.EscapedPath(), d.opts.Prefix)
		u.Path, u.RawPath = rest, rawRest
		r2.URL = &u
		r = r2
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		h.Set("Cache-Control", "no-store")
	}
	// Health probes are exact paths, open to orchestrators whatever Host
	// they send (a kubelet addresses the pod by IP). They show no job data.
	if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
		d.mux.ServeHTTP(w, r)
		return
	}
	if !d.gate.admit(w, r) {
		return
	}
	if d.opts.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
		d.fail(w, r, http.StatusForbidden, "the dashboard is read-only")
		return
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				d.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes", maxForm))
			} else {
				d.fail(w, r, http.StatusBadRequest, "the request body is not a valid form (application/x-www-form-urlencoded)")
			}
			return
		}
	}
	if name, ok := badParam(r); !ok {
		d.fail(w, r, http.StatusBadRequest, name+" must be valid UTF-8 text without NUL bytes")
		return
	}
	if len(d.shards) > 1 {
		var ok bool
		if r, ok = d.scope(w, r); !ok {
			return
		}
	}
	d.mux.ServeHTTP(w, r)
}

// maxForm bounds the body of an action: its form is a few short fields.
const maxForm = 64 << 10

// badParam returns the first query or form parameter (name or value) that
// PostgreSQL could not take as text: invalid UTF-8 or a NUL byte. Such
// input is refused up front with a 400 naming it, rather than failing as a
// database error.
func badParam(r *http.Request) (string, bool) {
	ok := func(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
	check := func(v url.Values) (string, bool) {
		for k, vs := range v {
			if !ok(k) {
				return "a parameter name", false
			}
			for _, x := range vs {
				if !ok(x) {
					return k, false
				}
			}
		}
		return "", true
	}
	if name, good := check(r.URL.Query()); !good {
		return name, false
	}
	return check(r.PostForm) // parsed by ServeHTTP for a POST; empty otherwise
}

// authenticated returns the user whose credentials the request carries
// (gate.identify); false when none are valid or none are configured.
func (d *Dashboard) authenticated(r *http.Request) (string, bool) { return d.gate.identify(r) }

// who names the authenticated user for audit lines.
func (d *Dashboard) who(r *http.Request) string {
	if u, ok := d.authenticated(r); ok {
		return u
	}
	return "anonymous"
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

func (d *Dashboard) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 when every database answers and has every migration
// applied, 503 otherwise (naming the databases that are not ready).
func (d *Dashboard) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var problems []string
	for _, s := range d.shards {
		where := ""
		if len(d.shards) > 1 {
			where = "database " + s.name + ": "
		}
		st, err := migrations.StatusOf(ctx, s.pool, d.opts.Schema)
		if err != nil {
			d.log.Warn("dashboard: readyz: database unreachable", slog.String("database", s.name), slog.String("error", err.Error()))
			problems = append(problems, where+"database unreachable")
			continue
		}
		pending := 0
		for _, m := range st {
			if m.AppliedAt == nil {
				pending++
			}
		}
		if pending > 0 {
			problems = append(problems, fmt.Sprintf("%sschema %s: %d migration(s) pending (run skiplock migrate up)", where, d.opts.Schema, pending))
		}
	}
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(strings.Join(problems, "\n") + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}
