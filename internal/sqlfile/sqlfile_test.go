package sqlfile

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestParseExpandsFragmentsAndRenders(t *testing.T) {
	fsys := fstest.MapFS{
		"sql/a.sql": {Data: []byte(`-- fragment: due
-- a comment line that must not reach the statement
(j.state = 'ready' AND j.run_at <= now())

-- name: one
-- what one does
SELECT 1 FROM {{schema}}.jobs AS j WHERE {{due}} AND j.queue = {{schema_lit}};
`)},
		"sql/b.sql":    {Data: []byte("-- name: two\nSELECT 2 FROM {{schema}}.jobs AS j WHERE {{due}};\n")},
		"sql/notes.md": {Data: []byte("-- name: ignored\n")},
	}
	stmts, err := Parse(fsys, "sql")
	require.NoError(t, err)
	require.Len(t, stmts, 2, "only .sql files, fragments are not statements")
	require.NotContains(t, stmts["one"], "{{due}}")
	require.Contains(t, stmts["one"], "(j.state = 'ready' AND j.run_at <= now())")
	require.Contains(t, stmts["two"], "(j.state = 'ready' AND j.run_at <= now())", "a fragment serves every file")
	require.NotContains(t, stmts["one"], "must not reach")

	r := Render(stmts, `we"ird`, func(s string) string { return strings.ReplaceAll(s, "SELECT 1", "SELECT 11") })
	require.Contains(t, r["one"], `SELECT 11 FROM "we""ird".jobs`)
	require.Contains(t, r["one"], `j.queue = 'we"ird'`)
}

func TestParseRefusesDuplicatesAndUnusedFragments(t *testing.T) {
	_, err := Parse(fstest.MapFS{"sql/a.sql": {Data: []byte("-- name: x\nSELECT 1;\n-- name: x\nSELECT 2;\n")}}, "sql")
	require.ErrorContains(t, err, `duplicate section "x"`)
	_, err = Parse(fstest.MapFS{"sql/a.sql": {Data: []byte("-- fragment: f\n(true)\n-- name: x\nSELECT 1;\n")}}, "sql")
	require.ErrorContains(t, err, `fragment "f" is used by no statement`)
}

// A fragment may use other fragments, nested in any order across files; a
// cycle is refused.
func TestParseExpandsNestedFragments(t *testing.T) {
	fsys := fstest.MapFS{
		"sql/a.sql": {Data: []byte("-- fragment: outer\nWITH x AS (SELECT {{middle}})\n-- name: one\n{{outer}} SELECT * FROM x;\n")},
		"sql/b.sql": {Data: []byte("-- fragment: middle\n{{inner}} + 1\n-- fragment: inner\n(41)\n")},
	}
	stmts, err := Parse(fsys, "sql")
	require.NoError(t, err)
	require.Equal(t, "WITH x AS (SELECT (41) + 1) SELECT * FROM x;", stmts["one"])

	_, err = Parse(fstest.MapFS{"sql/a.sql": {Data: []byte(
		"-- fragment: f\n({{g}})\n-- fragment: g\n({{f}})\n-- name: x\nSELECT {{f}};\n")}}, "sql")
	require.ErrorContains(t, err, "fragment")
}
