package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Stamped at link time by release builds (.goreleaser.yaml):
//
//	-X main.buildVersion=v0.1.0 -X main.buildCommit=<sha> -X main.buildDate=<RFC 3339>
//
// They stay empty in `go build` and `go install` builds, which describe
// themselves from their build info instead.
var (
	buildVersion string
	buildCommit  string
	buildDate    string
)

// version describes this binary. A release build reports what goreleaser
// stamped into it. Any other build reports its build info: the module
// version, the VCS commit, its time and whether the tree was dirty, and the
// Go version. `go install github.com/skiplock/skiplock/cmd/skiplock@v1.2.3`
// reports v1.2.3; go build in a git checkout reports a pseudo-version and
// the commit; a build without VCS information (-buildvcs=false) reports
// "(devel)".
func version() string {
	if buildVersion != "" {
		return describeStamp(buildVersion, buildCommit, buildDate, runtime.Version())
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown) " + runtime.Version()
	}
	return describeBuild(bi)
}

// describeStamp formats the values a release build was stamped with, in the
// same shape as describeBuild.
func describeStamp(v, commit, date, goVersion string) string {
	return formatVersion(v, commit, date, false, goVersion)
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
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return formatVersion(v, rev, at, dirty, goVersion)
}

// formatVersion renders "v1.2.3 (commit 0123456789ab, <time>, dirty) go1.x",
// leaving out the parenthesis when there is nothing to put in it.
func formatVersion(v, rev, at string, dirty bool, goVersion string) string {
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
	if len(parts) == 0 {
		return fmt.Sprintf("%s %s", v, goVersion)
	}
	return fmt.Sprintf("%s (%s) %s", v, strings.Join(parts, ", "), goVersion)
}
