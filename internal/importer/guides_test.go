package importer_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var docsRegion = regexp.MustCompile(`(?s)// docs:([a-z-]+)\n(.*?)\n+// docs:end\n`)

// TestGuidesShowThePorts keeps docs/coming-from-river.md and
// docs/coming-from-asynq.md showing the ported code compiled and run in
// this package: every region between docs: markers appears in its guide
// verbatim as a ```go block.
func TestGuidesShowThePorts(t *testing.T) {
	guides := map[string]string{"river": "../../docs/coming-from-river.md", "asynq": "../../docs/coming-from-asynq.md"}
	seen := map[string]int{}
	for _, src := range []string{"port_river_test.go", "port_asynq_test.go"} {
		body, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docsRegion.FindAllStringSubmatch(string(body), -1) {
			guide := guides[strings.SplitN(m[1], "-", 2)[0]]
			text, err := os.ReadFile(guide)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(text), "```go\n"+m[2]+"\n```") {
				t.Errorf("%s: the code of region %s (%s) is not shown verbatim", guide, m[1], src)
			}
			seen[guide]++
		}
	}
	if seen[guides["river"]] != 3 || seen[guides["asynq"]] != 1 {
		t.Errorf("regions per guide: %v", seen)
	}
}
