package apilist

import (
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/skiplock/skiplock"

// importRules is docs/architecture.md's "Import rules" as data: for each
// package of the module, the module's packages it may import. A package
// missing here fails the test (a new package states its rule), and so does
// an import the rule does not allow (a dependency running back up: the data
// layer reaching for the runtime, the runtime for the workflow engine, the
// CLI or the dashboard for the internals behind the public API).
var importRules = map[string][]string{
	// Leaves: they know nothing of skiplock's other packages.
	"internal/sqlfile":  {},
	"internal/service":  {},
	"internal/sentinel": {},
	"internal/errtext":  {},
	"internal/jsonerr":  {},
	"internal/cron":     {},
	"internal/apilist":  {},
	"devdb":             {},
	"bench/measure":     {},
	// The schema, and the data layer over it: SQL files and typed methods.
	"internal/migrations": {"internal/sqlfile"},
	"internal/store":      {"internal/sqlfile"},
	// Read-side figures: they read through the data layer, never write.
	"internal/health": {"internal/store", "internal/migrations", "internal/sqlfile"},
	// The runtime: the data layer through worker.Data, never the engine
	// behind its hook or the root.
	"internal/notify": {"internal/service"},
	"internal/worker": {"internal/store", "internal/notify", "internal/service", "internal/sentinel", "internal/errtext"},
	// The workflow engine: behind worker.RunHook, never the root.
	"internal/flow": {"internal/store", "internal/worker", "internal/sentinel", "internal/jsonerr"},
	// History export and import: files of finished jobs, read through the
	// data layer.
	"internal/history": {"internal/store"},
	// Background passes of one shape.
	"internal/maintenance": {"internal/store", "internal/health", "internal/history", "internal/service", "internal/cron"},
	// The public API: the one package that wires the internals together.
	"": {"internal/cron", "internal/errtext", "internal/flow", "internal/health", "internal/jsonerr",
		"internal/maintenance", "internal/migrations", "internal/history", "internal/sentinel", "internal/service",
		"internal/store", "internal/worker", "internal/notify", "internal/sqlfile"},
	// Clients of the public API.
	"metrics":           {"", "internal/health"},
	"dashboard":         {"", "internal/health", "internal/migrations", "internal/service"},
	"skiplocktest":      {"", "internal/store"},
	"internal/importer": {"", "internal/sqlfile"},
	"cmd/skiplock": {"", "bench", "dashboard", "devdb", "metrics", "internal/errtext", "internal/health",
		"internal/importer", "internal/migrations"},
	// Measurement harnesses read below the API on purpose (statement tracing).
	// bench's own SQL (the plain-SQL reference's table) is read by sqlfile,
	// the one loader.
	"bench":              {"", "bench/measure", "internal/health", "internal/migrations", "internal/store", "internal/sqlfile"},
	"bench/surroundings": {"", "internal/health", "internal/store"},
	// Test support.
	"internal/dbtest":        {"devdb", "internal/migrations", "internal/sqlfile"},
	"internal/pgbouncertest": {"internal/dbtest"},
	"internal/gobuild":       {},
}

// TestImportRules holds every package of the module to its rule in
// importRules (test/ packages and test files are harnesses, free to reach
// anything).
func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	var broken, unruled []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := local(fields[0])
		if strings.HasPrefix(pkg, "test/") {
			continue
		}
		allowed, ok := importRules[pkg]
		if !ok {
			unruled = append(unruled, pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			if dep := local(imp); !contains(allowed, dep) {
				broken = append(broken, ruleName(pkg)+" imports "+ruleName(dep))
			}
		}
	}
	sort.Strings(broken)
	require.Empty(t, unruled, "packages with no import rule: state each one's in internal/apilist/layers_test.go and docs/architecture.md (\"Import rules\")")
	require.Empty(t, broken, "imports the rules do not allow (docs/architecture.md, \"Import rules\"): move the code, or change the rule there and here on purpose")
}

// TestImportRulesCatchARuleBroken shows the check firing: the data layer
// importing the runtime is not allowed.
func TestImportRulesCatchARuleBroken(t *testing.T) {
	require.False(t, contains(importRules["internal/store"], "internal/worker"))
	require.False(t, contains(importRules["internal/worker"], "internal/flow"))
	require.False(t, contains(importRules["internal/flow"], ""))
	require.False(t, contains(importRules["cmd/skiplock"], "internal/store"))
	require.False(t, contains(importRules["dashboard"], "internal/worker"))
}

func local(path string) string {
	if path == module {
		return ""
	}
	return strings.TrimPrefix(path, module+"/")
}

func ruleName(pkg string) string {
	if pkg == "" {
		return "the root package"
	}
	return pkg
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
