package apilist

import (
	"flag"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite api/*.txt from the code (make api)")

// root is the module's root, where api/ lives.
const root = "../.."

// TestAPIMatchesListing is the API guard: the code's exported API must be
// the one api/*.txt records. A line the code no longer has is a breaking
// change; a line the listing lacks is an addition to write down. Both
// fail; `make api` (this test with -update) accepts them.
func TestAPIMatchesListing(t *testing.T) {
	files := make([]string, 0, len(Packages))
	paths := make([]string, 0, len(Packages))
	for file, path := range Packages {
		files = append(files, file)
		paths = append(paths, path)
	}
	sort.Strings(files)
	lists, err := Load(root, paths...)
	require.NoError(t, err)
	for _, file := range files {
		path := Packages[file]
		current := lists[path]
		name := filepath.Join(root, "api", file)
		for _, l := range current {
			require.NotContains(t, l, "/internal/", "%s exposes an internal package: %s", path, l)
		}
		if *update {
			require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
			require.NoError(t, os.WriteFile(name, Format(path, current), 0o644))
			continue
		}
		data, err := os.ReadFile(name)
		require.NoError(t, err, "no listing for %s: run make api", path)
		d := Compare(Parse(data), current)
		if d.Empty() {
			continue
		}
		var msg strings.Builder
		if d.Breaking() {
			msg.WriteString("BREAKING: the code no longer has these lines of api/" + file + ":\n")
			for _, l := range append(d.Removed, d.Changed...) {
				msg.WriteString("  " + l + "\n")
			}
		}
		if len(d.Added) > 0 {
			msg.WriteString("added to " + path + " but not to api/" + file + ":\n")
			for _, l := range d.Added {
				msg.WriteString("  " + l + "\n")
			}
		}
		msg.WriteString("If this is intended, run `make api` and commit api/" + file + " (docs/api.md, \"The API guard\").")
		t.Error(msg.String())
	}
}

// check type-checks src as package p (the standard library only).
func check(t *testing.T, src string) *types.Package {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	require.NoError(t, err)
	pkg, err := (&types.Config{Importer: importer.Default()}).Check("example.com/p", fset, []*ast.File{f}, nil)
	require.NoError(t, err)
	return pkg
}

const v1 = `package p

import (
	"context"
	"time"
)

const Max = 10
const Name = "x"
const Wait time.Duration = 90 * time.Second
var ErrGone error
type Tx interface{ Exec(ctx context.Context, sql string, args ...any) error }
type Row struct {
	ID    int64
	Queue string
	Backoff func(attempt int) time.Duration
	hidden bool
}
type Job[T any] struct {
	Row
	Args T
}
type State string
type Client struct{}
func (c *Client) JobGet(ctx context.Context, id int64) (*Row, error) { return nil, nil }
func (c *Client) unexported() {}
func (s State) String() string { return string(s) }
func Handle[T any](c *Client, kind string, fn func(context.Context, *Job[T]) error) error { return nil }
`

// TestList: one line per identifier, fields and methods included, without
// parameter names and without unexported names.
func TestList(t *testing.T) {
	require.Equal(t, []string{
		"const Max untyped int = 10",
		`const Name untyped string = "x"`,
		"const Wait time.Duration = 90000000000 (1m30s)",
		"field Job.Args T",
		"field Job.Row Row (embedded)",
		"field Row.Backoff func(int) time.Duration",
		"field Row.ID int64",
		"field Row.Queue string",
		"func Handle[T any](*Client, string, func(context.Context, *Job[T]) error) error",
		"method (*Client) JobGet(context.Context, int64) (*Row, error)",
		"method (State) String() string",
		"method (Tx) Exec(context.Context, string, ...any) error",
		"type Client struct",
		"type Job[T any] struct",
		"type Row struct",
		"type State string",
		"type Tx interface",
		"var ErrGone error",
	}, List(check(t, v1)))
}

// TestCompareCatchesBrokenSignature is the guard failing on purpose: the
// same package with one signature broken (JobGet takes a string id), one
// field removed (Row.Queue) and one function added must report the first two
// as breaking and the third as an addition; renaming a parameter is no
// change at all.
func TestCompareCatchesBrokenSignature(t *testing.T) {
	recorded := List(check(t, v1))

	broken := strings.Replace(v1, "JobGet(ctx context.Context, id int64)", "JobGet(ctx context.Context, id string)", 1)
	broken = strings.Replace(broken, "\tQueue string\n", "", 1)
	broken += "func Drain() {}\n"
	d := Compare(recorded, List(check(t, broken)))
	require.True(t, d.Breaking())
	require.Equal(t, []string{"field Row.Queue string"}, d.Removed)
	require.Equal(t, []string{"was: method (*Client) JobGet(context.Context, int64) (*Row, error)\n" +
		"  now: method (*Client) JobGet(context.Context, string) (*Row, error)"}, d.Changed)
	require.Equal(t, []string{"func Drain()"}, d.Added)

	renamed := strings.Replace(v1, "JobGet(ctx context.Context, id int64)", "JobGet(cx context.Context, jobID int64)", 1)
	require.True(t, Compare(recorded, List(check(t, renamed))).Empty(), "a parameter's name is not part of the API")

	added := Compare(recorded, List(check(t, v1+"func Drain() {}\n")))
	require.False(t, added.Breaking(), "an addition breaks nothing")
	require.False(t, added.Empty(), "but it must be written down")
}

// TestKey: what a line declares.
func TestKey(t *testing.T) {
	for line, key := range map[string]string{
		"func Handle[T any](*Client) error":                       "func Handle",
		"method (*Client) JobGet(context.Context, int64) error":   "method (*Client) JobGet",
		"method (Tx) Exec(context.Context, string, ...any) error": "method (Tx) Exec",
		"field Job.Row Row (embedded)":                            "field Job.Row",
		"type Job[T any] struct":                                  "type Job",
		"const Max untyped int = 10":                              "const Max",
		"var ErrGone error":                                       "var ErrGone",
	} {
		require.Equal(t, key, Key(line), line)
	}
}

// TestParseFormat: a listing file reads back as the lines it was written
// from, its header and blank lines skipped.
func TestParseFormat(t *testing.T) {
	lines := List(check(t, v1))
	require.Equal(t, lines, Parse(append(Format("example.com/p", lines), "\n\n"...)))
}

// TestCLIAndDashboardUsePublicAPI: the CLI and the dashboard are clients of
// the library. They may import internal/health (read-side figures) but not
// the data layer or the runtime, whose needs the public API meets.
func TestCLIAndDashboardUsePublicAPI(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./cmd/...", "./dashboard/...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	forbidden := []string{"github.com/skiplock/skiplock/internal/store", "github.com/skiplock/skiplock/internal/worker"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			require.NotContains(t, forbidden, imp, "%s imports %s: give the public API what it needs instead", fields[0], imp)
		}
	}
}
