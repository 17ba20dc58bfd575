package store_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/migrations"
	"github.com/skiplock/skiplock/internal/sqlfile"
)

// A copy path is a statement that carries a jobs row somewhere else: into
// history (jobs_done), into the dead letters (jobs_dead), back from them
// (replays), or to another database (a tenant move). Each names the jobs
// columns it leaves behind on purpose, with the reason; a column added to
// jobs must be carried by every path or named here, or
// TestCopiesCarryEveryJobsColumn fails. (The ring's move, ring_evict, lists
// no columns: it reads them from the catalog; TestRingEvictCarriesANewColumn.)
type copyPath struct {
	where   string            // file and statement
	sql     string            // the statement's text
	table   string            // the INSERT's table, or "" for the SELECT list of jobs
	omitted map[string]string // jobs column -> why it is not carried
}

// The reasons, shared by paths of one kind.
var (
	leaseEnded = map[string]string{
		"lease_token":      "the lease ended with the job",
		"lease_expires_at": "the lease ended with the job",
		"cancel_requested": "a request to the running handler; jobs_dead's reason records a cancel",
		"state":            "the table the row goes to is its state",
		"task_id":          "a workflow task's outcome is recorded by its workflow (tasks_left)",
		"gen":              "the hot table's partition; nothing outside it has one",
	}
	toDone = with(leaseEnded, map[string]string{
		"unique_key": "a finished job holds no key: jobs_done has no unique_key",
	})
	toDead = with(leaseEnded, map[string]string{
		"attempted_at": "jobs_dead keeps dead_at, not the last attempt's start",
		"progress":     "jobs_dead keeps no progress: a failed job's result is its last error",
	})
	replay = map[string]string{
		"id":               "a replay is a new job with a new id",
		"attempts":         "a replay starts its attempts again",
		"created_at":       "a replay is created now",
		"lease_token":      "a replay is not running",
		"lease_expires_at": "a replay is not running",
		"attempted_at":     "a replay has not started",
		"cancel_requested": "a replay is not running",
		"state":            "a replay is ready",
		"locked_by":        "a replay is not running",
		"last_error":       "a replay starts clean; the dead letter keeps the error",
		"task_id":          "a replay is a plain job, outside any workflow",
		"gen":              "the insert chooses the partition",
		"progress":         "a replay has not started",
	}
	moved = map[string]string{
		"lease_token":      "only ready jobs move",
		"lease_expires_at": "only ready jobs move",
		"locked_by":        "only ready jobs move",
		"cancel_requested": "only ready jobs move",
		"state":            "only ready jobs move",
		"attempted_at":     "a moved job has not started in the target",
		"task_id":          "workflow tasks stay with their workflow",
		"gen":              "the target puts a moved job in jobs_keyed",
		"progress":         "only ready jobs move: their progress is a past attempt's",
	}
)

func with(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func copyPaths(t *testing.T) []copyPath {
	t.Helper()
	stmts, err := sqlfile.Parse(os.DirFS("."), "sql")
	require.NoError(t, err)
	fn := map[string]string{}
	for _, f := range migrations.Functions() {
		fn[f.Name] = f.SQL
	}
	s := func(name string) string {
		q, ok := stmts[name]
		require.True(t, ok, "no statement %s", name)
		return q
	}
	return []copyPath{
		{"lease.sql complete_archive", s("complete_archive"), "jobs_done", with(toDone, map[string]string{
			"progress": "a run that reported progress completes through complete_archive_result, which carries it (issue 39: a run without result or progress writes no more than before)",
		})},
		{"lease.sql complete_archive_result", s("complete_archive_result"), "jobs_done", toDone},
		{"lease.sql complete_one_archive", s("complete_one_archive"), "jobs_done", toDone},
		{"lease.sql dead_letter", s("dead_letter"), "jobs_dead", toDead},
		{"lease.sql reap", s("reap"), "jobs_dead", toDead},
		{"lease.sql cancel", s("cancel"), "jobs_dead", toDead},
		{"functions/cancel_workflow.sql", fn["cancel_workflow"], "jobs_dead", toDead},
		{"functions/enqueue_unique.sql (supersede)", fn["enqueue_unique"], "jobs_dead", toDead},
		{"deadletter.sql replay_dead", s("replay_dead"), "jobs", replay},
		{"functions/retry_job.sql (from jobs_dead)", fn["retry_job"], "jobs_keyed", replay},
		{"functions/retry_job.sql (from jobs_done)", fn["retry_job"], "jobs", with(replay, map[string]string{
			"unique_key": "jobs_done keeps no unique_key to give back",
		})},
		{"move.sql move_lock_batch", s("move_lock_batch"), "", with(moved, nil)},
		{"move.sql move_insert", s("move_insert"), "jobs_keyed", with(moved, map[string]string{
			"id": "the target issues its own id; moved_in maps the source's to it",
		})},
	}
}

var (
	insertRe  = regexp.MustCompile(`(?s)INSERT INTO \{\{schema\}\}\.(\w+)(?: AS \w+)? ?\(([^)]*)\)`)
	selectRe  = regexp.MustCompile(`(?s)^SELECT (.*?)\s+FROM \{\{schema\}\}\.jobs\b`)
	commentRe = regexp.MustCompile(`(?m)^\s*--.*$`)
)

// columns reads the column list a path writes (or selects).
func (p copyPath) columns(t *testing.T) []string {
	t.Helper()
	var list string
	if p.table == "" {
		m := selectRe.FindStringSubmatch(strings.TrimSpace(commentRe.ReplaceAllString(p.sql, "")))
		require.NotNil(t, m, "%s: no SELECT list", p.where)
		list = m[1]
	} else {
		for _, m := range insertRe.FindAllStringSubmatch(p.sql, -1) {
			if m[1] == p.table {
				list = m[2]
				break
			}
		}
		require.NotEmpty(t, list, "%s: no INSERT INTO %s", p.where, p.table)
	}
	var out []string
	for _, c := range strings.Split(list, ",") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

// uncarried returns, for each path, the columns of jobs it neither writes nor
// names as omitted, and the omissions that are not jobs columns any more.
func uncarried(t *testing.T, jobsColumns []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range copyPaths(t) {
		cols := p.columns(t)
		for _, c := range jobsColumns {
			if !slices.Contains(cols, c) && p.omitted[c] == "" {
				out[p.where] = append(out[p.where], c)
			}
		}
		for c := range p.omitted {
			if !slices.Contains(jobsColumns, c) || slices.Contains(cols, c) {
				out[p.where] = append(out[p.where], "stale omission "+c)
			}
		}
	}
	return out
}

func jobsColumns(t *testing.T) []string {
	t.Helper()
	db := dbtest.New(t)
	rows, err := db.Pool.Query(context.Background(), `SELECT a.attname FROM pg_attribute AS a
		WHERE a.attrelid = 'skiplock.jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, cols, "payload")
	return cols
}

// Every statement that copies a jobs row carries every column of jobs, but
// the ones it names with a reason; a new column fails this test until each
// path carries it or says why not.
func TestCopiesCarryEveryJobsColumn(t *testing.T) {
	t.Parallel()
	cols := jobsColumns(t)
	require.Empty(t, uncarried(t, cols), "jobs columns a copy drops without a reason")

	// The test notices a new column on every path.
	added := uncarried(t, append(cols, "added_later"))
	require.Len(t, added, len(copyPaths(t)))
	for where, missing := range added {
		require.Equal(t, []string{"added_later"}, missing, where)
	}
}

// The ring's move carries a column added to jobs, value and all: its column
// list is the catalog's.
func TestRingEvictCarriesANewColumn(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		ALTER TABLE skiplock.jobs ADD COLUMN added_later text;
		INSERT INTO skiplock.jobs (queue, kind, gen, added_later, priority, metadata)
		VALUES ('q', 'k', 1, 'carried', 7, '{"m": 1}');`)
	require.NoError(t, err)
	var moved int64
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.ring_evict(1::smallint)").Scan(&moved))
	require.Equal(t, int64(1), moved)
	var gen, priority int
	var added, metadata string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT gen, added_later, priority, metadata::text FROM skiplock.jobs_keyed`).
		Scan(&gen, &added, &priority, &metadata))
	require.Equal(t, -1, gen)
	require.Equal(t, "carried", added)
	require.Equal(t, 7, priority)
	require.Equal(t, `{"m": 1}`, metadata)
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs_g1").Scan(&left))
	require.Zero(t, left)
}

// history_import_dead lists jobs_dead's columns (error_signature is
// generated and cannot be written): a column added to jobs_dead must be
// added there too, or an imported dead letter comes back without it.
func TestHistoryImportDeadCarriesEveryColumn(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rows, err := db.Pool.Query(context.Background(), `SELECT a.attname FROM pg_attribute AS a
		WHERE a.attrelid = 'skiplock.jobs_dead'::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, want, "payload")
	stmts, err := sqlfile.Parse(os.DirFS("."), "sql")
	require.NoError(t, err)
	p := copyPath{where: "maintenance.sql history_import_dead", sql: stmts["history_import_dead"], table: "jobs_dead"}
	require.ElementsMatch(t, want, p.columns(t))
}
