package gobuild

import (
	"os"
	"strings"
	"testing"
)

// TestMatchesRelease holds Command's settings to the release's
// (.goreleaser.yaml), to .ci/e2e.sh's build and to the Makefile's lint: a
// difference would not fail a build, only compile everything twice.
func TestMatchesRelease(t *testing.T) {
	yaml, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"- " + Env + " ", "- -trimpath\n", "tags:\n      - " + Tags + "\n"} {
		if !strings.Contains(string(yaml), want) {
			t.Errorf(".goreleaser.yaml has no %q: gobuild's settings differ from the release's", want)
		}
	}
	e2e, err := os.ReadFile("../../.ci/e2e.sh")
	if err != nil {
		t.Fatal(err)
	}
	line := Env + " go build " + strings.Join(Flags, " ") + " "
	if !strings.Contains(string(e2e), line) {
		t.Errorf(".ci/e2e.sh has no %q: its CLI is not built as the release's", line)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RELEASE_ENV  := " + Env + ` GOFLAGS="-trimpath `, "RELEASE_TAGS := -tags " + Tags + "\n"} {
		if !strings.Contains(string(mk), want) {
			t.Errorf("Makefile has no %q: lint does not read the code as the release builds it", want)
		}
	}
}

// TestCommand: the command Command returns is go build with the release's
// flags before the package, in dir, with CGO_ENABLED=0 last in its
// environment (the last of a repeated variable is the one that holds).
func TestCommand(t *testing.T) {
	t.Setenv("CGO_ENABLED", "1")
	cmd := Command("/src", "/tmp/out", "./cmd/skiplock")
	want := "go build -o /tmp/out -trimpath -tags skiplock_cloud ./cmd/skiplock"
	if got := strings.Join(cmd.Args, " "); got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	if cmd.Dir != "/src" {
		t.Errorf("dir %q", cmd.Dir)
	}
	if last := cmd.Env[len(cmd.Env)-1]; last != "CGO_ENABLED=0" {
		t.Errorf("last environment entry %q", last)
	}
}
