package dashboard

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/health"
)

//go:embed templates
var templateFS embed.FS

// pageTemplate is one page: the layout plus the page's own blocks.
type pageTemplate struct{ t *template.Template }

var pageNames = []string{"overview", "queues", "jobs", "job", "dead", "confirm", "schedules", "limits", "workers", "health", "error", "workflows", "workflow", "choose"}

func parsePages() (map[string]*pageTemplate, error) {
	out := map[string]*pageTemplate{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/panels.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		out[name] = &pageTemplate{t: t}
	}
	return out, nil
}

// view is what every page template gets.
type view struct {
	Base string // the mount prefix, then the database's scope: for links
	Root string // the mount prefix alone: static assets and the brand
	// Databases is the database selector of a dashboard over several (the
	// first entry, with no name, is all of them); DB names the database of
	// the page ("" on the overview of all of them, or with one database).
	Databases []dbLink
	DB        string
	Title     string
	Active    string // nav entry
	ReadOnly  bool
	Reveal    bool // payload reveal allowed
	Schema    string
	Flash     string
	// ReplicaNote says how stale the page's figures are when they were read
	// on Options.Replica (empty without one); ReplicaStale marks a replica
	// that is not streaming or is more than replicaStaleAfter behind.
	ReplicaNote  string
	ReplicaStale bool
	Data         any
}

// replicaStaleAfter is the lag at which the replica note turns to a warning.
const replicaStaleAfter = 30 * time.Second

// replicaNote reads the replica's lag for the note every page shows.
func (d *Dashboard) replicaNote(r *http.Request, v *view) {
	if d.opts.Replica == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	st, err := health.Replica(ctx, d.opts.Replica, d.opts.Schema)
	if err != nil {
		d.log.Error("dashboard: replica status", slog.String("error", err.Error()))
		v.ReplicaNote, v.ReplicaStale = "read on a replica whose lag could not be read (see the server log)", true
		return
	}
	v.ReplicaNote = st.Describe()
	v.ReplicaStale = st.InRecovery && (!st.Streaming || st.LagSeconds > replicaStaleAfter.Seconds())
}

func (d *Dashboard) view(active, title string, data any) view {
	return view{Base: d.opts.Prefix, Title: title, Active: active, ReadOnly: d.opts.ReadOnly,
		Reveal: d.opts.ShowPayloads && !d.opts.ReadOnly, Schema: d.opts.Schema, Data: data}
}

// render executes a page (block "" = the whole layout) into a buffer first,
// so a template error never leaves half a page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, page, block string, v view) {
	pt, ok := d.pages[page]
	if !ok {
		panic("dashboard: no page " + page)
	}
	if block == "" {
		block = "layout.html"
	}
	if page != "error" {
		d.replicaNote(r, &v)
	}
	v.Root, v.Base, v.Databases = d.opts.Prefix, d.base(r), d.selector(r)
	if sh := d.scoped(r); sh != nil {
		v.DB = sh.name
	}
	var buf bytes.Buffer
	if err := pt.t.ExecuteTemplate(&buf, block, v); err != nil {
		d.log.Error("dashboard: render", slog.String("page", page), slog.String("error", err.Error()))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page; the message must not carry job data.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	d.render(w, r, status, "error", "", d.view("", http.StatusText(status), msg))
}

// dbFail logs a database error and renders a generic 500.
func (d *Dashboard) dbFail(w http.ResponseWriter, r *http.Request, what string, err error) {
	d.log.Error("dashboard: "+what, slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	d.fail(w, r, http.StatusInternalServerError, what+" failed; see the server log")
}

var funcs = template.FuncMap{
	"ago":     ago,
	"agoPtr":  agoPtr,
	"secs":    secs,
	"num":     num,
	"rate":    func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"ms":      msPtr,
	"pct":     func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
	"ts":      ts,
	"tsPtr":   tsPtr,
	"bytes":   humanBytes,
	"join":    strings.Join,
	"delta":   delta,
	"deref":   func(p *string) string { return deref(p) },
	"deref64": func(p *int64) int64 { return *p },
	"derefI":  func(p *int) string { return derefInt(p) },
	"statusc": func(s status) string { return string(s) },
}

// ago renders how long before now t was: "3s", "4m 10s", "2h 5m", "3d 4h".
func ago(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := time.Since(t)
	if d < 0 {
		return "in " + human(-d)
	}
	return human(d) + " ago"
}

func agoPtr(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return ago(*t)
}

func secs(s float64) string {
	if s <= 0 {
		return "0s"
	}
	if s < 10 {
		return strconv.FormatFloat(s, 'f', 1, 64) + "s"
	}
	return human(time.Duration(s * float64(time.Second)))
}

func human(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

func num(v any) string {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int:
		n = int64(x)
	case int32:
		n = int64(x)
	default:
		return fmt.Sprint(v)
	}
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func delta(cur, prev int64) string {
	d := cur - prev
	if d > 0 {
		return "+" + num(d)
	}
	return num(d)
}

func msPtr(p *float64) string {
	if p == nil || math.IsNaN(*p) {
		return "—"
	}
	return strconv.FormatFloat(*p, 'f', 1, 64) + " ms"
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func tsPtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return ts(*t)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefInt(p *int) string {
	if p == nil {
		return "—"
	}
	return strconv.Itoa(*p)
}
