package store

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStatementsAreReachedThroughTypedMethods keeps the data layer the one
// home of skiplock's statements: outside this package, product code reaches
// them through Store's typed methods, never by name. The exceptions read a
// statement's text without running it as a query of their own: doctor
// EXPLAINs the claim, and the benchmark tools time statements by name.
func TestStatementsAreReachedThroughTypedMethods(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"internal/health/doctor.go": true}
	byName := regexp.MustCompile(`\.SQL\("`)
	checked := 0
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			if strings.HasPrefix(e.Name(), ".") || rel == "internal/store" || rel == "bench" || e.Name() == "testdata" ||
				e.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || allowed[rel] {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(src), "\n") {
			if byName.MatchString(line) {
				t.Errorf("%s:%d runs a statement by name; add a typed method to internal/store: %s", rel, i+1,
					strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files under %s: the walk did not find the module", checked, root)
	}
}
