#!/usr/bin/env bash
# Installs the pinned goreleaser (.ci/goreleaser.version) from the Go module
# proxy into $(go env GOPATH)/bin, unless that version is there already.
# Used by .ci/run (in the background, first thing) and .ci/release-check.sh.
# Built without optimizations, inlining or symbol tables: goreleaser runs for
# seconds in the release check, and its compile is the costliest one in CI.
# From an empty build cache on this VM's 2 cores (2026-12-02): 350 s of wall
# time and 655 CPU-seconds as plain `go install` builds it, 273 s and 511
# CPU-seconds so. Its --version (the module's, from the build info) is the
# same either way.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(cat .ci/goreleaser.version)
bin=$(go env GOPATH)/bin/goreleaser
if "$bin" --version 2>/dev/null | grep -q "GitVersion:.*${version#v}\$"; then
  exit 0
fi
echo "installing goreleaser $version"
go install -gcflags='all=-N -l' -ldflags='-s -w' "github.com/goreleaser/goreleaser/v2@$version"
