package dashboard

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/health"
)

// shardKey is the request context key of the database a request is scoped
// to (a dashboard over several databases).
type shardKey struct{}

// shardNamed returns the database called name, or nil.
func (d *Dashboard) shardNamed(name string) *shard {
	for _, s := range d.shards {
		if s.name == name {
			return s
		}
	}
	return nil
}

// scopePath is the path prefix of database s's pages, below Options.Prefix:
// "" with one database, else /db/{name} (the name path-escaped, so a "/" in
// host:port/dbname stays inside one segment).
func (d *Dashboard) scopePath(s *shard) string {
	if len(d.shards) == 1 || s == nil {
		return ""
	}
	return "/db/" + url.PathEscape(s.name)
}

// scope reads which database a request of a dashboard over several is for:
// the /db/{name} prefix, which it strips (the request then routes as with
// one database, with the database in its context), or ?db=name on a GET,
// which it redirects to that prefix. A request with neither is unscoped:
// the overview adds every database up, other pages ask which one
// (shardFor). An unknown name is a 404.
func (d *Dashboard) scope(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/db/"); ok {
		seg, tail, slash := strings.Cut(rest, "/")
		name, err := url.PathUnescape(seg)
		s := d.shardNamed(name)
		if err != nil || s == nil {
			d.fail(w, r, http.StatusNotFound, "no such database (the overview lists them)")
			return nil, false
		}
		if !slash {
			http.Redirect(w, r, d.opts.Prefix+d.scopePath(s)+"/", http.StatusMovedPermanently)
			return nil, false
		}
		path, err := url.PathUnescape("/" + tail)
		if err != nil {
			http.NotFound(w, r)
			return nil, false
		}
		r2 := r.WithContext(context.WithValue(r.Context(), shardKey{}, s))
		u := *r.URL
		u.Path, u.RawPath = path, "/"+tail
		r2.URL = &u
		return r2, true
	}
	if name := r.URL.Query().Get("db"); name != "" && r.Method == http.MethodGet {
		s := d.shardNamed(name)
		if s == nil {
			d.fail(w, r, http.StatusNotFound, "no such database (the overview lists them)")
			return nil, false
		}
		q := r.URL.Query()
		q.Del("db")
		u := d.opts.Prefix + d.scopePath(s) + r.URL.EscapedPath()
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		http.Redirect(w, r, u, http.StatusSeeOther)
		return nil, false
	}
	return r, true
}

// scoped returns the database the request is for: the only one, or the one
// its path names; nil for an unscoped request to a dashboard over several.
func (d *Dashboard) scoped(r *http.Request) *shard {
	if len(d.shards) == 1 {
		return d.shards[0]
	}
	s, _ := r.Context().Value(shardKey{}).(*shard)
	return s
}

// shardFor is scoped for a page or action that shows or changes one
// database: an unscoped GET gets a page listing the databases, each linked
// to this page in its scope; an unscoped action is refused with 400.
func (d *Dashboard) shardFor(w http.ResponseWriter, r *http.Request) *shard {
	if s := d.scoped(r); s != nil {
		return s
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		d.fail(w, r, http.StatusBadRequest, "db: an action goes to one database: post it under /db/{name}/")
		return nil
	}
	links := make([]dbLink, len(d.shards))
	for i, s := range d.shards {
		links[i] = dbLink{Name: s.name, Href: d.opts.Prefix + d.scopePath(s) + r.URL.EscapedPath()}
		if r.URL.RawQuery != "" {
			links[i].Href += "?" + r.URL.RawQuery
		}
	}
	d.render(w, r, http.StatusOK, "choose", "", d.view(activeOf(r.URL.Path), "Choose a database", links))
	return nil
}

// dbLink is a database in the layout's selector and on the choose page.
type dbLink struct {
	Name, Href string
	Current    bool
}

// activeOf is the nav entry of a path.
func activeOf(path string) string {
	seg, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	switch seg {
	case "":
		return "overview"
	case "health":
		return "health"
	}
	return seg
}

// base is the prefix of the request's links: Options.Prefix, then the
// database's scope when it has one.
func (d *Dashboard) base(r *http.Request) string {
	return d.opts.Prefix + d.scopePath(d.scoped(r))
}

// selector lists the databases for the layout, each linked to the same
// page in its scope ("" Name first: all of them, the overview), with the
// current one marked; nil with one database.
func (d *Dashboard) selector(r *http.Request) []dbLink {
	if len(d.shards) == 1 {
		return nil
	}
	cur := d.scoped(r)
	path := r.URL.EscapedPath()
	if strings.HasPrefix(path, "/jobs/") || strings.HasPrefix(path, "/workflows/") || strings.HasPrefix(path, "/dead/") {
		path = "/" + activeOf(path) // a job id is per database: go to the list
	}
	if path == "/overview/panels" || path == "/api/series" {
		path = "/"
	}
	out := []dbLink{{Name: "", Href: d.opts.Prefix + "/", Current: cur == nil}}
	for _, s := range d.shards {
		out = append(out, dbLink{Name: s.name, Href: d.opts.Prefix + d.scopePath(s) + path, Current: s == cur})
	}
	return out
}

// dbSummary is one database's line in the overview's breakdown over
// several databases: the figures its own panels show.
type dbSummary struct {
	Name, Href                string
	Ready, Scheduled, Running int64
	Dead, DeadLast24h         int64
	MaxLag                    float64
	LiveWorkers               int
	ClaimP99                  *float64
	DeadTuples                int64
	Status                    status
	// Err says which of its figures could not be read ("" when all were).
	Err string
}

// loadAll reads every database's panels (at once) and adds them up: counts
// summed; lags, wait and claim p99s the worst; statuses the worst; the
// vacuum panel the worst database's (each table vacuums on its own); and
// the breakdown, one line per database. A database that cannot be read
// shows its error in its line and in the panels it breaks; the others'
// figures still add up.
func (d *Dashboard) loadAll(ctx context.Context) overviewData {
	parts := make([]overviewData, len(d.shards))
	var wg sync.WaitGroup
	for i, sh := range d.shards {
		wg.Go(func() { parts[i] = d.overviewFor(ctx, sh) })
	}
	wg.Wait()

	o := overviewData{Now: time.Now(), LagStatus: statusOK, ClaimStatus: statusOK, RunningStatus: statusOK, DeadStatus: statusOK}
	queues := map[string]*queueRow{}
	var unhandled [][]health.UnhandledKind
	var errs [5][]string // queue, claim, run, dead, unhandled
	vacuumFrom := -1
	for i, p := range parts {
		sh := d.shards[i]
		sum := dbSummary{Name: sh.name, Href: d.opts.Prefix + d.scopePath(sh) + "/", Ready: p.ReadyTotal,
			Scheduled: p.ScheduledTotal, Running: p.Running, Dead: p.Dead.Total, DeadLast24h: p.Dead.Last24h,
			MaxLag: p.MaxLag, LiveWorkers: p.LiveWorkers, ClaimP99: p.ClaimP99, DeadTuples: p.Vacuum.DeadTuples,
			Status: worst(p.LagStatus, p.ClaimStatus, p.RunningStatus, p.DeadStatus, p.VacuumStatus)}
		var perr []string
		for j, e := range []string{p.QueueErr, p.ClaimErr, p.RunErr, p.DeadErr, p.UnhandledErr} {
			if e != "" {
				errs[j] = append(errs[j], sh.name+": "+e)
				perr = append(perr, e)
			}
		}
		if p.VacuumErr != "" {
			perr = append(perr, p.VacuumErr)
		}
		sum.Err = strings.Join(perr, "; ")
		o.Databases = append(o.Databases, sum)

		o.LagStatus = worst(o.LagStatus, p.LagStatus)
		o.MaxLag = max(o.MaxLag, p.MaxLag)
		o.ReadyTotal += p.ReadyTotal
		o.ScheduledTotal += p.ScheduledTotal
		for _, q := range p.Queues {
			t := queues[q.Queue]
			if t == nil {
				t = &queueRow{QueueStat: health.QueueStat{Queue: q.Queue}, Status: statusOK}
				queues[q.Queue] = t
			}
			t.Add(q.QueueStat)
			t.WaitP50 = max(t.WaitP50, q.WaitP50)
			t.WaitP99 = max(t.WaitP99, q.WaitP99)
			t.Workers += q.Workers
			for _, pl := range q.Pools {
				if !slices.Contains(t.Pools, pl) {
					t.Pools = append(t.Pools, pl)
				}
			}
			t.Status = worst(t.Status, q.Status)
		}
		unhandled = append(unhandled, p.Unhandled)

		o.ClaimStatus = worst(o.ClaimStatus, p.ClaimStatus)
		o.LiveWorkers += p.LiveWorkers
		if p.ClaimP99 != nil && (o.ClaimP99 == nil || *p.ClaimP99 > *o.ClaimP99) {
			v := *p.ClaimP99
			o.ClaimP99 = &v
		}

		o.RunningStatus = worst(o.RunningStatus, p.RunningStatus)
		o.Running += p.Running
		o.ExpiredLeases += p.ExpiredLeases
		if o.RunningNote == "" && p.RunningNote != "" {
			o.RunningNote = sh.name + ": " + p.RunningNote
		}
		for _, r := range p.Runners {
			r.DB = sh.name
			o.Runners = append(o.Runners, r)
		}

		o.DeadStatus = worst(o.DeadStatus, p.DeadStatus)
		o.Dead.Total += p.Dead.Total
		o.Dead.Last24h += p.Dead.Last24h
		o.Dead.Prev24h += p.Dead.Prev24h
		if o.DeadDays == nil {
			o.DeadDays = make([]dayCount, len(p.DeadDays))
		}
		for j, x := range p.DeadDays {
			if j < len(o.DeadDays) {
				o.DeadDays[j].Day = x.Day
				o.DeadDays[j].Count += x.Count
			}
		}

		// The vacuum panel shows the worst database: failing first, then
		// the most dead tuples.
		if vacuumFrom < 0 || statusRank(p.VacuumStatus) > statusRank(parts[vacuumFrom].VacuumStatus) ||
			(p.VacuumStatus == parts[vacuumFrom].VacuumStatus && p.Vacuum.DeadTuples > parts[vacuumFrom].Vacuum.DeadTuples) {
			vacuumFrom = i
		}
	}
	o.QueueErr, o.ClaimErr, o.RunErr, o.DeadErr, o.UnhandledErr = strings.Join(errs[0], "; "), strings.Join(errs[1], "; "),
		strings.Join(errs[2], "; "), strings.Join(errs[3], "; "), strings.Join(errs[4], "; ")
	for _, q := range queues {
		sort.Strings(q.Pools)
		o.Queues = append(o.Queues, *q)
	}
	sort.Slice(o.Queues, func(i, j int) bool { return o.Queues[i].Queue < o.Queues[j].Queue })
	o.Unhandled = health.SumUnhandledKinds(unhandled...)
	sort.SliceStable(o.Runners, func(i, j int) bool { return o.Runners[i].RuntimeSeconds > o.Runners[j].RuntimeSeconds })
	o.Runners = o.Runners[:min(len(o.Runners), 5)]
	var top int64
	for _, x := range o.DeadDays {
		top = max(top, x.Count)
	}
	for i := range o.DeadDays {
		if top > 0 {
			o.DeadDays[i].Width = int(math.Round(100 * float64(o.DeadDays[i].Count) / float64(top)))
		}
	}
	if s, ok := d.sampler.latest(d.sampler.all()); ok {
		o.HaveSample = true
		o.ClaimRate, o.CompleteRate, o.FailRate = s.Claimed, s.Completed, s.Failed
	}
	v := parts[vacuumFrom]
	o.VacuumDB = d.shards[vacuumFrom].name
	o.Vacuum, o.Holders, o.PinHolder, o.PinCost = v.Vacuum, v.Holders, v.PinHolder, v.PinCost
	o.VacuumStatus, o.DeadTuplesStatus, o.XminStatus = v.VacuumStatus, v.DeadTuplesStatus, v.XminStatus
	o.LastVacuum, o.HOTShare, o.VacuumErr = v.LastVacuum, v.HOTShare, v.VacuumErr
	return o
}

// statusRank orders statuses from ok to fail.
func statusRank(s status) int {
	switch s {
	case statusFail:
		return 2
	case statusWarn:
		return 1
	}
	return 0
}

// logFor is the logger of an audit line about database sh: it names the
// database when the dashboard shows several.
func (d *Dashboard) logFor(sh *shard) *slog.Logger {
	if len(d.shards) == 1 {
		return d.log
	}
	return d.log.With(slog.String("database", sh.name))
}
