// Package gobuild builds the repository's programs for tests as the release
// builds them (.goreleaser.yaml): static (CGO_ENABLED=0), -trimpath and the
// skiplock_cloud tag. A test that runs the CLI so runs the program users
// install. And Go's build cache keys each compiled package by these
// settings: with the same ones, these builds, make lint (vet and
// staticcheck), .ci/e2e.sh's build and the release check's snapshot compile
// each package once between them, where a plain `go build` beside the
// release's compiled the module and its dependencies a second time (two to
// three minutes of CI's two cores).
//
// Builds with -race (the fault tier's worker processes) are not made here:
// the race detector needs cgo, and those share make test's race builds.
package gobuild

import (
	"os"
	"os/exec"
)

// Tags, Flags and Env are the release build's settings, as .goreleaser.yaml
// writes them (TestMatchesRelease holds the two together, and .ci/e2e.sh and
// the Makefile's lint, which spell the same three).
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
