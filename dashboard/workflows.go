package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/skiplock/skiplock"
)

// workflowsPage is the list of workflows and batches, newest first.
type workflowsPage struct {
	State string
	Rows  []skiplock.WorkflowStatus
}

func (d *Dashboard) workflows(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	p := workflowsPage{State: r.URL.Query().Get("state")}
	list, err := sh.client.WorkflowList(ctx, skiplock.WorkflowFilter{State: p.State, Limit: 200})
	var fe *skiplock.FieldError
	if errors.As(err, &fe) {
		d.fail(w, r, http.StatusBadRequest, fe.Error())
		return
	}
	if err != nil {
		d.dbFail(w, r, "workflows", err)
		return
	}
	p.Rows = list
	d.render(w, r, http.StatusOK, "workflows", "", d.view("workflows", "Workflows", p))
}

// workflowPage is one workflow: its tasks by level of the graph (a task's
// level is one more than its deepest parent's), with states and timings,
// and what its tasks wait for. Outputs are not part of the page: like
// payloads they may hold personal data, and are revealed one at a time
// (taskOutput); error text is hidden on a read-only dashboard.
type workflowPage struct {
	skiplock.WorkflowStatus
	Levels [][]skiplock.TaskStatus
	Waits  []skiplock.WorkflowWait
	Hidden bool
}

func (d *Dashboard) workflow(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	n, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || n <= 0 {
		d.fail(w, r, http.StatusBadRequest, "workflow id must be a positive whole number")
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	st, err := sh.client.WorkflowGet(ctx, n, false)
	if errors.Is(err, skiplock.ErrWorkflowNotFound) {
		d.fail(w, r, http.StatusNotFound, "no workflow "+strconv.FormatInt(n, 10))
		return
	}
	if err != nil {
		d.dbFail(w, r, "workflow", err)
		return
	}
	waits, err := sh.client.WorkflowWaitList(ctx, n)
	if err != nil {
		d.dbFail(w, r, "workflow waits", err)
		return
	}
	if d.opts.ReadOnly {
		st.Metadata = nil
		for i := range st.TaskList {
			st.TaskList[i].Error = ""
		}
	}
	p := workflowPage{WorkflowStatus: st, Levels: levels(st.TaskList), Waits: waits, Hidden: d.opts.ReadOnly}
	p.TaskList = nil
	d.render(w, r, http.StatusOK, "workflow", "", d.view("workflows", "Workflow "+strconv.FormatInt(n, 10), p))
}

// levels groups tasks by their depth in the graph, each level in the order
// the tasks were added. Parents are always added before their children.
func levels(tasks []skiplock.TaskStatus) [][]skiplock.TaskStatus {
	depth := make(map[string]int, len(tasks))
	var out [][]skiplock.TaskStatus
	for _, t := range tasks {
		l := 0
		for _, p := range t.DependsOn {
			l = max(l, depth[p]+1)
		}
		depth[t.Name] = l
		for len(out) <= l {
			out = append(out, nil)
		}
		out[l] = append(out[l], t)
	}
	for _, l := range out {
		slices.SortStableFunc(l, func(a, b skiplock.TaskStatus) int { return int(a.ID - b.ID) })
	}
	return out
}

// taskOutput reveals one task's output (a POST, refused cross-origin), under
// the rules of a payload's reveal: allowed by Options.ShowPayloads, never on
// a read-only dashboard, to an authenticated user only, and logged (ids and
// user, never the output).
func (d *Dashboard) taskOutput(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	if !d.opts.ShowPayloads || d.opts.ReadOnly {
		d.fail(w, r, http.StatusForbidden, "task outputs are hidden (start skiplock serve with --show-payloads to allow revealing them)")
		return
	}
	user, ok := d.authenticated(r)
	if !ok {
		d.fail(w, r, http.StatusForbidden, "revealing a task output requires an authenticated user")
		return
	}
	wf, err1 := strconv.ParseInt(r.PathValue("id"), 10, 64)
	task, err2 := strconv.ParseInt(r.PathValue("task"), 10, 64)
	if err1 != nil || err2 != nil || wf <= 0 || task <= 0 {
		d.fail(w, r, http.StatusBadRequest, "workflow and task ids must be positive whole numbers")
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	raw, err := sh.client.WorkflowTaskOutput(ctx, wf, task)
	if errors.Is(err, skiplock.ErrTaskNotFound) {
		d.fail(w, r, http.StatusNotFound, "no such task")
		return
	}
	if err != nil {
		d.dbFail(w, r, "task output", err)
		return
	}
	d.logFor(sh).Info("dashboard: task output revealed", slog.Int64("workflow_id", wf), slog.Int64("task_id", task), slog.String("user", user))
	text := "(no output)"
	if raw != nil {
		var pretty bytes.Buffer
		if json.Indent(&pretty, raw, "", "  ") != nil {
			pretty.Reset()
			pretty.Write(raw)
		}
		text = pretty.String()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(`<pre class="payload">` + template.HTMLEscapeString(text) + "</pre>\n"))
}
