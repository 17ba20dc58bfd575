package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version describes this binary from its build info: the module version,
// the VCS commit, its time and whether the tree was dirty, and the Go
// version. `go install github.com/skiplock/skiplock/cmd/skiplock@v1.2.3`
// reports v1.2.3; go build in a git checkout reports a pseudo-version and
// the commit; a build without VCS information (-buildvcs=false) reports
// "(devel)".
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown) " + runtime.Version()
	}
	return describeBuild(bi)
}

func describeBuild(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	var parts []string
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		parts = append(parts, "commit "+rev)
	}
	if at != "" {
		parts = append(parts, at)
	}
	if dirty {
		parts = append(parts, "dirty")
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%s %s", v, goVersion)
	}
	return fmt.Sprintf("%s (%s) %s", v, strings.Join(parts, ", "), goVersion)
}
