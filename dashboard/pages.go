package dashboard

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/health"
)

func (d *Dashboard) timeout(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d.opts.QueryTimeout)
}

// maxFlash bounds a flash message, in bytes.
const maxFlash = 300

// redirect sends the browser back to a page after an action (303, so a
// reload does not repeat the POST), with a flash message in the query and
// its signature (see withFlash).
func (d *Dashboard) redirect(w http.ResponseWriter, r *http.Request, path, flash string) {
	u := d.base(r) + path
	if flash != "" {
		if len(flash) > maxFlash {
			flash = strings.ToValidUTF8(flash[:maxFlash], "") // not half a character
		}
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + url.Values{"flash": {flash}, "fs": {d.flashSig(flash)}}.Encode()
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// flashSig is the HMAC of a flash message under this process's random key.
func (d *Dashboard) flashSig(msg string) string {
	m := hmac.New(sha256.New, d.flash)
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// withFlash copies a flash message from the query into the view when this
// process set it (its signature matches), so a crafted link cannot make the
// dashboard say something it did not. It is rendered as text (escaped) like
// everything else. A message signed before a restart is dropped.
func (d *Dashboard) withFlash(r *http.Request, v view) view {
	q := r.URL.Query()
	msg := q.Get("flash")
	if msg != "" && len(msg) <= maxFlash && hmac.Equal([]byte(q.Get("fs")), []byte(d.flashSig(msg))) {
		v.Flash = msg
	}
	return v
}

// Queues ---------------------------------------------------------------------

func (d *Dashboard) queues(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	workers, err := health.Workers(ctx, sh.read, d.opts.Schema)
	if err != nil {
		d.dbFail(w, r, "workers", err)
		return
	}
	rows, err := d.queueRows(ctx, sh, workers)
	if err != nil {
		d.dbFail(w, r, "queue stats", err)
		return
	}
	d.render(w, r, http.StatusOK, "queues", "", d.withFlash(r, d.view("queues", "Queues", rows)))
}

func (d *Dashboard) pauseQueue(w http.ResponseWriter, r *http.Request)  { d.setPaused(w, r, true) }
func (d *Dashboard) resumeQueue(w http.ResponseWriter, r *http.Request) { d.setPaused(w, r, false) }

func (d *Dashboard) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	queue := strings.TrimSpace(r.PostFormValue("queue"))
	ctx, cancel := d.timeout(r)
	defer cancel()
	var err error
	if paused {
		err = sh.client.QueuePause(ctx, queue)
	} else {
		err = sh.client.QueueResume(ctx, queue)
	}
	if errors.Is(err, skiplock.ErrInvalidJob) {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		d.dbFail(w, r, "pause", err)
		return
	}
	verb := "resumed"
	if paused {
		verb = "paused"
	}
	d.logFor(sh).Info("dashboard: queue "+verb, slog.String("queue", queue), slog.String("user", d.who(r)))
	d.redirect(w, r, "/queues", "queue "+queue+" "+verb)
}

// Jobs -----------------------------------------------------------------------

// jobRow is one search result (never a payload).
type jobRow struct {
	ID                 int64
	State, Queue, Kind string
	Priority, Attempt  int
	MaxAttempts        *int
	RunAt, CreatedAt   time.Time
	Tenant, LockedBy   *string
	Error              string
}

// jobSearch is the search form, parsed.
type jobSearch struct {
	ID, Queue, Kind, State, Tenant string
	Before                         int64
	Limit                          int
}

// query is the search's query string for the page below before (0: the
// first page). url.Values encodes it, so it is safe in an href.
func (s jobSearch) query(before int64) template.URL {
	v := url.Values{}
	for k, x := range map[string]string{"id": s.ID, "queue": s.Queue, "kind": s.Kind, "state": s.State, "tenant": s.Tenant} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(before, 10))
	}
	if s.Limit != defaultPageSize {
		v.Set("limit", strconv.Itoa(s.Limit))
	}
	return template.URL(v.Encode())
}

// defaultPageSize is how many jobs a search page lists.
const defaultPageSize = 50

// jobStates are the states a search filters on, as skiplock.JobStates
// names them; "done" (the name before) still selects completed jobs.
var jobStates = []string{"ready", "scheduled", "running", "dead", "completed"}

type jobsData struct {
	Search jobSearch
	States []string
	Rows   []jobRow
	Next   template.URL // query string of the next page ("" on the last)
	First  template.URL // query string of the first page ("" on it)
	Error  string
}

func (d *Dashboard) jobs(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	q := r.URL.Query()
	s := jobSearch{ID: strings.TrimSpace(q.Get("id")), Queue: strings.TrimSpace(q.Get("queue")),
		Kind: strings.TrimSpace(q.Get("kind")), State: q.Get("state"), Tenant: strings.TrimSpace(q.Get("tenant")), Limit: defaultPageSize}
	if s.State == "done" {
		s.State = "completed"
	}
	data := jobsData{Search: s, States: jobStates}
	bad := func(msg string) {
		data.Error = msg
		d.render(w, r, http.StatusBadRequest, "jobs", "", d.view("jobs", "Jobs", data))
	}
	var id int64
	if s.ID != "" {
		n, err := strconv.ParseInt(s.ID, 10, 64)
		if err != nil || n <= 0 {
			bad("id must be a positive whole number")
			return
		}
		id = n
	}
	if s.State != "" && !contains(jobStates, s.State) {
		bad("state must be one of " + strings.Join(jobStates, ", "))
		return
	}
	if b := q.Get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			bad("before must be a positive job id")
			return
		}
		s.Before = n
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 500 {
			bad("limit must be between 1 and 500")
			return
		}
		s.Limit = n
	}
	data.Search = s
	ctx, cancel := d.timeout(r)
	defer cancel()
	found, err := d.searchJobs(ctx, sh.reader, id, s)
	if errors.Is(err, skiplock.ErrInvalidJob) {
		bad(err.Error())
		return
	}
	if err != nil {
		d.dbFail(w, r, "job search", err)
		return
	}
	if len(found) > s.Limit {
		found = found[:s.Limit]
		data.Next = s.query(found[len(found)-1].ID)
	}
	if s.Before > 0 {
		data.First = s.query(0)
		if data.First == "" {
			data.First = "state="
		}
	}
	if d.opts.ReadOnly {
		for i := range found {
			found[i].Error = "" // error text is data too: see hideForViewers
		}
	}
	data.Rows = found
	d.render(w, r, http.StatusOK, "jobs", "", d.view("jobs", "Jobs", data))
}

// searchJobs runs a search through c's JobGet and JobList (c reads the
// replica when there is one): by id, one job if it matches the other
// filters; otherwise up to s.Limit+1 jobs newest first, so the caller knows
// whether there is a next page. A bad filter is an ErrInvalidJob.
func (d *Dashboard) searchJobs(ctx context.Context, c *skiplock.Client, id int64, s jobSearch) ([]jobRow, error) {
	if id > 0 {
		j, err := c.JobGet(ctx, id)
		if errors.Is(err, skiplock.ErrJobNotFound) {
			return nil, nil
		}
		if err != nil || !s.matches(j) {
			return nil, err
		}
		return []jobRow{rowOf(j)}, nil
	}
	rows, err := c.JobList(ctx, skiplock.JobListParams{Queue: s.Queue, Kind: s.Kind, State: skiplock.JobState(s.State),
		Tenant: s.Tenant, BeforeID: s.Before, Limit: s.Limit + 1})
	out := make([]jobRow, len(rows))
	for i := range rows {
		out[i] = rowOf(&rows[i])
	}
	return out, err
}

// matches reports whether j, found by id, passes the search's other filters.
func (s jobSearch) matches(j *skiplock.JobRecord) bool {
	eq := func(want, got string) bool { return want == "" || got == want }
	state := string(j.State)
	return eq(s.Queue, j.Queue) && eq(s.Kind, j.Kind) && eq(s.Tenant, j.Tenant) &&
		(s.Before == 0 || j.ID < s.Before) &&
		(s.State == "" && state != "completed" || s.State == state)
}

// rowOf is a search row: the error cut to its first line, 200 characters
// at most, as JobList cuts it (JobGet returns it whole).
func rowOf(j *skiplock.JobRecord) jobRow {
	msg, _, _ := strings.Cut(j.LastError, "\n")
	if r := []rune(msg); len(r) > 200 {
		msg = string(r[:200])
	}
	return jobRow{ID: j.ID, State: string(j.State), Queue: j.Queue, Kind: j.Kind, Priority: j.Priority, Attempt: j.Attempt,
		MaxAttempts: nonZero(j.MaxAttempts), RunAt: j.RunAt, CreatedAt: j.CreatedAt, Tenant: nonEmpty(j.Tenant),
		LockedBy: nonEmpty(j.LockedBy), Error: msg}
}

// nonEmpty and nonZero are the pages' "unset": nil, shown as a dash.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonZero(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// jobDetail is one job (never its payload).
type jobDetail struct {
	ID                                  int64
	State, Queue, Kind                  string
	Priority, Attempt                   int
	MaxAttempts                         *int
	RunAt, CreatedAt                    time.Time
	AttemptedAt, LeaseExpiresAt         *time.Time
	LockedBy, UniqueKey, Tenant, Entity *string
	LastError                           *string
	CancelRequested                     bool
	DeadAt                              *time.Time
	Reason                              *string
	FinishedAt                          *time.Time
	Metadata                            *string // indented JSON; shown, unlike the payload, except read-only
	Progress                            *skiplock.Progress
	Result                              *string // a completed job's result, indented JSON; hidden read-only
	Hidden                              bool    // error text, unique key, entity and metadata withheld (read-only)
	// Explain is why a ready or scheduled job is not running (JobExplain);
	// nil for the other states, or when it could not be read.
	Explain *skiplock.JobExplanation
}

// detailOf is the page's view of a job found by JobGet.
func detailOf(r *skiplock.JobRecord) jobDetail {
	j := jobDetail{ID: r.ID, State: string(r.State), Queue: r.Queue, Kind: r.Kind, Priority: r.Priority, Attempt: r.Attempt,
		MaxAttempts: nonZero(r.MaxAttempts), RunAt: r.RunAt, CreatedAt: r.CreatedAt, AttemptedAt: r.AttemptedAt,
		LeaseExpiresAt: r.LeaseExpiresAt, LockedBy: nonEmpty(r.LockedBy), UniqueKey: nonEmpty(r.UniqueKey),
		Tenant: nonEmpty(r.Tenant), Entity: nonEmpty(r.Entity), LastError: nonEmpty(r.LastError),
		CancelRequested: r.CancelRequested, Progress: r.Progress}
	switch r.State {
	case skiplock.JobStateDead:
		j.DeadAt, j.Reason = r.FinishedAt, nonEmpty(r.Outcome)
	case skiplock.JobStateCompleted:
		j.FinishedAt = r.FinishedAt
	}
	if len(r.Metadata) > 0 {
		// As stored: the template escapes it for HTML, so the encoder must not.
		var pretty bytes.Buffer
		enc := json.NewEncoder(&pretty)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if enc.Encode(r.Metadata) == nil {
			m := strings.TrimSuffix(pretty.String(), "\n")
			j.Metadata = &m
		}
	}
	return j
}

// hideForViewers drops what a read-only viewer is not shown: a result and
// a progress note (the handler's own words and data), error text
// (an --exec worker stores the tail of the program's stderr, which may
// quote anything the job handled), the unique key and entity (often built
// from a customer's id or address) and metadata (trace ids, but also
// whatever a middleware carries, such as a user id). Like payloads, they
// are never revealed on a read-only dashboard; the tenant stays, as a
// routing name.
func (j *jobDetail) hideForViewers() {
	j.LastError, j.UniqueKey, j.Entity, j.Metadata, j.Result = nil, nil, nil, nil, nil
	if j.Progress != nil {
		p := *j.Progress
		p.Note = "" // the handler's words may quote the job's data
		j.Progress = &p
	}
	j.Hidden = true
	if j.Explain == nil {
		return
	}
	// The explanation names the entity, and a limit's partition value (an
	// entity, or a payload field for an arg: partition): withheld alike.
	holds := make([]skiplock.JobHold, len(j.Explain.Holds))
	for i, h := range j.Explain.Holds {
		switch {
		case h.Reason == skiplock.JobHoldEntityBusy:
			h.Detail = "its entity (hidden, read-only) is held by the running job " + strconv.FormatInt(h.Holders[0], 10) + "; jobs of one entity run one at a time"
			h.Name = ""
		case h.Key != "":
			h.Detail = strings.Replace(h.Detail, " (for "+strconv.Quote(h.Key)+")", " (for a value hidden on a read-only dashboard)", 1)
			h.Key = ""
		}
		holds[i] = h
	}
	e := *j.Explain
	e.Holds = holds
	j.Explain = &e
}

// pathID reads the job id of the path, or answers 400 naming it.
func (d *Dashboard) pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	n, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || n <= 0 {
		d.fail(w, r, http.StatusBadRequest, "job id must be a positive whole number")
		return 0, false
	}
	return n, true
}

func (d *Dashboard) job(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	id, ok := d.pathID(w, r)
	if !ok {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	row, err := sh.reader.JobGet(ctx, id)
	if errors.Is(err, skiplock.ErrJobNotFound) {
		d.fail(w, r, http.StatusNotFound, "no job "+strconv.FormatInt(id, 10)+
			" in flight, in the dead-letter table or in the finished-job history")
		return
	}
	if err != nil {
		d.dbFail(w, r, "job", err)
		return
	}
	j := detailOf(row)
	if row.State == skiplock.JobStateReady || row.State == skiplock.JobStateScheduled {
		// Why it is not running; the page still shows the job without it.
		if e, err := sh.reader.JobExplain(ctx, id); err == nil {
			j.Explain = e
		} else {
			d.logFor(sh).Warn("dashboard: job explain", slog.Int64("job_id", id), slog.Any("error", err))
		}
	}
	if row.State == skiplock.JobStateCompleted && !d.opts.ReadOnly {
		end, err := sh.reader.JobResult(ctx, id)
		if err != nil {
			d.dbFail(w, r, "job", err)
			return
		}
		if end.Result != nil {
			var pretty bytes.Buffer
			if json.Indent(&pretty, end.Result, "", "  ") == nil {
				res := pretty.String()
				j.Result = &res
			}
		}
	}
	if d.opts.ReadOnly {
		j.hideForViewers()
	}
	d.render(w, r, http.StatusOK, "job", "", d.withFlash(r, d.view("jobs", "Job "+strconv.FormatInt(id, 10), j)))
}

// payload reveals one job's payload (a POST, refused cross-origin), when
// Options.ShowPayloads allows it, to an authenticated user only: New already
// refuses ShowPayloads without credentials; this check holds even if that
// one were lost.
func (d *Dashboard) payload(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	if !d.opts.ShowPayloads || d.opts.ReadOnly {
		d.fail(w, r, http.StatusForbidden, "payloads are hidden (start skiplock serve with --show-payloads to allow revealing them)")
		return
	}
	user, ok := d.authenticated(r)
	if !ok {
		d.fail(w, r, http.StatusForbidden, "revealing a payload requires an authenticated user")
		return
	}
	id, ok := d.pathID(w, r)
	if !ok {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	raw, err := sh.client.JobPayload(ctx, id)
	if errors.Is(err, skiplock.ErrJobNotFound) {
		d.fail(w, r, http.StatusNotFound, "no such job")
		return
	}
	if err != nil {
		d.dbFail(w, r, "payload", err)
		return
	}
	d.logFor(sh).Info("dashboard: payload revealed", slog.Int64("job_id", id), slog.String("user", user))
	var pretty bytes.Buffer
	if json.Indent(&pretty, raw, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(raw)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(`<pre class="payload" id="payload-text">` + template.HTMLEscapeString(pretty.String()) + "</pre>\n"))
}

func (d *Dashboard) cancelJob(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	id, ok := d.pathID(w, r)
	if !ok {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	state, err := sh.client.JobCancel(ctx, id)
	// A dead or completed job is refused (ErrJobState) as an unknown one
	// is: neither is in flight.
	if errors.Is(err, skiplock.ErrJobNotFound) || errors.Is(err, skiplock.ErrJobState) {
		d.fail(w, r, http.StatusNotFound, "job "+strconv.FormatInt(id, 10)+" is not in flight")
		return
	}
	if err != nil {
		d.dbFail(w, r, "cancel", err)
		return
	}
	d.logFor(sh).Info("dashboard: job cancelled", slog.Int64("job_id", id), slog.String("was", string(state)), slog.String("user", d.who(r)))
	d.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), "cancel requested (the job was "+string(state)+")")
}

// replayJob replays one dead letter at once.
func (d *Dashboard) replayJob(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	id, ok := d.pathID(w, r)
	if !ok {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	// JobRetry, not a replay by id: it is idempotent, so a double click
	// (or two operators) makes one copy and the second answers the first's.
	// Only a dead letter (or one replayed already, which is gone from every
	// table but the record of its retry) is replayed here.
	newID, err := int64(0), error(nil)
	if rec, gerr := sh.client.JobGet(ctx, id); gerr == nil && rec.State != skiplock.JobStateDead {
		err = &skiplock.JobStateError{ID: id, State: rec.State, Action: "replay", Allow: "dead"}
	} else {
		newID, err = sh.client.JobRetry(ctx, id)
	}
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, skiplock.ErrJobNotFound) || errors.Is(err, skiplock.ErrJobState) ||
		errors.As(err, &pe) && pe.Code == "55000":
		d.fail(w, r, http.StatusConflict, "job "+strconv.FormatInt(id, 10)+
			" is not in the dead-letter table (or a job with its unique key is in flight)")
		return
	case err != nil:
		d.dbFail(w, r, "replay", err)
		return
	}
	d.logFor(sh).Info("dashboard: dead letter replayed", slog.Int64("job_id", id), slog.Int64("new_id", newID), slog.String("user", d.who(r)))
	d.redirect(w, r, "/dead", "job "+strconv.FormatInt(id, 10)+" replayed as job "+strconv.FormatInt(newID, 10))
}

// Dead letters -----------------------------------------------------------------

type deadData struct {
	Kind    string
	Groups  []skiplock.DeadLetterGroup
	Size    health.DeadLetterSize
	Replays []replayStatus
	Rate    float64
}

func (d *Dashboard) dead(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	kind := strings.TrimSpace(r.URL.Query().Get("kind"))
	replays := d.replays.status(sh.name) // before the groups: see status
	ctx, cancel := d.timeout(r)
	defer cancel()
	groups, err := sh.reader.DeadLetterList(ctx, kind, 200)
	if errors.Is(err, skiplock.ErrInvalidJob) {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		d.dbFail(w, r, "dead-letter groups", err)
		return
	}
	size, err := health.DeadLetterSizeOf(ctx, sh.read, d.opts.Schema)
	if err != nil {
		d.dbFail(w, r, "dead-letter size", err)
		return
	}
	if d.opts.ReadOnly {
		for i := range groups {
			groups[i].SampleError = "" // error text is data too: see hideForViewers
		}
	}
	data := deadData{Kind: kind, Groups: groups, Size: size, Replays: replays, Rate: d.opts.ReplayRate}
	d.render(w, r, http.StatusOK, "dead", "", d.withFlash(r, d.view("dead", "Dead letters", data)))
}

type confirmData struct {
	Action          string // replay or purge
	Kind, Signature string
	Count           int64
	Rate            float64
}

// groupFilter reads kind and signature (both required: a group).
func groupFilter(get func(string) string) (skiplock.DeadLetterFilter, bool) {
	f := skiplock.DeadLetterFilter{Kind: strings.TrimSpace(get("kind")), Signature: get("signature")}
	return f, f.Kind != "" && f.Signature != ""
}

func (d *Dashboard) deadConfirm(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	q := r.URL.Query()
	action := q.Get("action")
	if action != "replay" && action != "purge" {
		d.fail(w, r, http.StatusBadRequest, "action must be replay or purge")
		return
	}
	f, ok := groupFilter(q.Get)
	if !ok {
		d.fail(w, r, http.StatusBadRequest, "kind and signature are required")
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	n, err := sh.client.DeadLetterCount(ctx, f)
	if err != nil {
		d.dbFail(w, r, "count dead letters", err)
		return
	}
	data := confirmData{Action: action, Kind: f.Kind, Signature: f.Signature, Count: n, Rate: d.opts.ReplayRate}
	d.render(w, r, http.StatusOK, "confirm", "", d.view("dead", "Confirm "+action, data))
}

// confirmed reads a group action's form: kind, signature and confirm=yes.
func (d *Dashboard) confirmed(w http.ResponseWriter, r *http.Request) (skiplock.DeadLetterFilter, bool) {
	f, ok := groupFilter(r.PostFormValue)
	if !ok {
		d.fail(w, r, http.StatusBadRequest, "kind and signature are required")
		return f, false
	}
	if r.PostFormValue("confirm") != "yes" {
		d.fail(w, r, http.StatusBadRequest, "confirmation required (confirm=yes)")
		return f, false
	}
	return f, true
}

func (d *Dashboard) replayGroup(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	f, ok := d.confirmed(w, r)
	if !ok {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	n, err := sh.client.DeadLetterCount(ctx, f)
	if err != nil {
		d.dbFail(w, r, "count dead letters", err)
		return
	}
	started := d.replays.start(sh.name, sh.client, f, n, d.opts.ReplayRate, d.log)
	if !started {
		d.redirect(w, r, "/dead", "a replay of this group is already running")
		return
	}
	d.logFor(sh).Info("dashboard: replay started", slog.String("kind", f.Kind), slog.String("signature", f.Signature),
		slog.Int64("dead_letters", n), slog.Float64("per_second", d.opts.ReplayRate), slog.String("user", d.who(r)))
	d.redirect(w, r, "/dead", "replaying "+num(n)+" "+f.Kind+" dead letters at "+
		strconv.FormatFloat(d.opts.ReplayRate, 'f', -1, 64)+"/s")
}

func (d *Dashboard) purgeGroup(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	f, ok := d.confirmed(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*d.opts.QueryTimeout)
	defer cancel()
	n, err := sh.client.DeadLetterPurge(ctx, f)
	if err != nil {
		d.dbFail(w, r, "purge", err)
		return
	}
	d.logFor(sh).Info("dashboard: dead letters purged", slog.String("kind", f.Kind), slog.String("signature", f.Signature),
		slog.Int64("purged", n), slog.String("user", d.who(r)))
	d.redirect(w, r, "/dead", "purged "+num(n)+" "+f.Kind+" dead letters")
}

// Schedules, workers, health ------------------------------------------------------

func (d *Dashboard) schedules(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	list, err := sh.client.ScheduleList(ctx)
	if err != nil {
		d.dbFail(w, r, "schedules", err)
		return
	}
	// The schedules that fire into a kind no live worker handles, with the
	// fix (doctor's orphan_schedules); the page still lists them all if
	// this read fails.
	orphans := map[string]health.OrphanSchedule{}
	if os, err := health.OrphanSchedules(ctx, sh.read, d.opts.Schema); err == nil {
		for _, o := range os {
			orphans[o.Name] = o
		}
	} else {
		d.logFor(sh).Warn("dashboard: orphan schedules", slog.Any("error", err))
	}
	rows := make([]scheduleRow, len(list))
	for i, s := range list {
		s.Payload = nil // never rendered
		rows[i] = scheduleRow{ScheduleInfo: s}
		if o, ok := orphans[s.Name]; ok {
			rows[i].Orphan = &o
		}
	}
	d.render(w, r, http.StatusOK, "schedules", "", d.view("schedules", "Schedules", rows))
}

// scheduleRow is one schedule on the schedules page; Orphan is set when no
// live worker handles its kind.
type scheduleRow struct {
	skiplock.ScheduleInfo
	Orphan *health.OrphanSchedule
}

type workerRow struct {
	health.Worker
	Jobs []health.LongRunner
	More int
}

func (d *Dashboard) workers(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	list, err := health.Workers(ctx, sh.read, d.opts.Schema)
	if err != nil {
		d.dbFail(w, r, "workers", err)
		return
	}
	running, err := health.LongRunners(ctx, sh.read, d.opts.Schema, 1000)
	if err != nil {
		d.dbFail(w, r, "running jobs", err)
		return
	}
	byWorker := map[string][]health.LongRunner{}
	for _, j := range running {
		byWorker[j.LockedBy] = append(byWorker[j.LockedBy], j)
	}
	rows := make([]workerRow, len(list))
	for i, x := range list {
		jobs := byWorker[x.ID]
		rows[i] = workerRow{Worker: x, Jobs: jobs[:min(len(jobs), 10)], More: max(0, len(jobs)-10)}
	}
	d.render(w, r, http.StatusOK, "workers", "", d.view("workers", "Workers", rows))
}

func (d *Dashboard) doctor(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*d.opts.QueryTimeout)
	defer cancel()
	var o health.DoctorOptions
	if d.opts.Replica != nil {
		o.Replica = d.opts.Replica
	}
	checks, err := health.DoctorWith(ctx, sh.pool, d.opts.Schema, o)
	if err != nil {
		d.dbFail(w, r, "doctor", err)
		return
	}
	d.render(w, r, http.StatusOK, "health", "", d.view("health", "Health", checks))
}
