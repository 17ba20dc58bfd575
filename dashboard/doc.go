// Package dashboard is skiplock's web dashboard as an http.Handler: the five
// panels of the operations article (queue lag, claim rate and p99, running
// jobs, dead-letter size and daily delta, the hot table's vacuum state) with
// throughput and lag charted over time, job search and detail, dead-letter
// triage and replay, queue pause and resume, schedules, workers and the
// doctor's checks.
//
// Pages are server-rendered with html/template (every value escaped by
// context); htmx refreshes the overview and uPlot draws the charts, both
// vendored and embedded, so the dashboard needs nothing but the binary. A
// strict Content-Security-Policy allows no inline script or style.
//
// Payloads are personal data: no page renders one. With
// Options.ShowPayloads (which needs User/Password or Token) an authenticated
// user may reveal one job's payload at a time, by a POST (logged with the job
// id and user, never the payload); a read-only dashboard never does, and
// hides error text, unique keys and entities too. Every action is a POST,
// refused cross-origin and in read-only mode. The handler answers only to
// Options.AllowedHosts (by default, without credentials, loopback names),
// against DNS rebinding. `skiplock serve` runs it; mount it in your own
// server with
//
//	h, err := dashboard.New(pool, dashboard.Options{Prefix: "/jobs", User: u, Password: p})
//	mux.Handle("/jobs/", h)
//
// and call h.(*dashboard.Dashboard).Close() on shutdown. See docs/dashboard.md.
package dashboard
