// Package gobuild builds the repository's programs for tests as the release
// builds them (.goreleaser.yaml): static (CGO_ENABLED=0), -trimpath and the
// skiplock_cloud tag. A test that runs the CLI so runs the program users
// install, and every such build, the release check's snapshot and
// .ci/e2e.sh's compile each package once between them: Go's build cache
// keys a package by these settings, and a build that differed in any of
// them (a plain `go build` beside the release's) compiled the module and
// its dependencies a second time, two to three minutes of CI's two cores.
//
// Builds with -race (the fault tier's worker processes) are not made here:
// the race detector needs cgo, and those share make test's race builds.
package gobuild

import (
	"os"
	"os/exec"
)

// Tags, Flags and Env are the release build's settings, as .goreleaser.yaml
// writes them (TestMatchesRelease holds the two together; .ci/e2e.sh spells
// the same three).
const (
	Tags = "skiplock_cloud"
	Env  = "CGO_ENABLED=0"
)

// Flags are the release build's go build flags, without its -ldflags (those
// change only the link, never what the cache holds).
var Flags = []string{"-trimpath", "-tags", Tags}

// Command returns `go build -o out pkg` with the release's settings, run in
// dir (the module root, or "" for the current directory).
func Command(dir, out, pkg string) *exec.Cmd {
	args := append([]string{"build", "-o", out}, Flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), Env)
	return cmd
}
