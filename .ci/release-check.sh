#!/usr/bin/env bash
# Release check (docs/releasing.md): what a tag would ship, built and run.
#   - goreleaser (pinned, installed from the Go module proxy) checks its
#     config and builds a snapshot: the archives and checksums under dist/;
#   - the linux/amd64 archive's binary reports the stamped version and commit;
#   - .ci/ocibuild packs the linux binaries into the container image (an OCI
#     layout under dist/image); its layer is unpacked and its binary runs as
#     the image's user: --version, then migrate up / status --check / down
#     against $TEST_DATABASE_URL in a schema of its own, removed at the end.
# Needs go, git, jq, tar and a migrated-or-empty PostgreSQL at
# $TEST_DATABASE_URL. RELEASE_CHECK_TARGETS=all builds all four targets
# (what a tag ships; the image then has both of its platforms); the default
# builds linux/amd64 alone (the image with that platform), to stay within
# CI's budget.
# Cost on 2 cores: the first run on a machine compiles goreleaser (about
# 4.5 minutes, .ci/install-goreleaser.sh) and the linux/amd64 build with
# the cloud drivers (about 3 minutes cold; nothing in CI, where the tests
# built the CLI with the same settings: internal/gobuild); later runs reuse
# both and take about 10-30 s.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pin, one file for this script and .ci/install-goreleaser.sh (which
# .ci/run starts in the background first): v2.17+ needs a module the proxy
# refuses (go-msix); v2.18+ needs Go 1.27.
GORELEASER_VERSION=$(cat .ci/goreleaser.version)
: "${TEST_DATABASE_URL:?release-check: set TEST_DATABASE_URL (a PostgreSQL the check may create a schema in)}"

start=$SECONDS
step() { echo "release-check: $* (+$((SECONDS - start))s)"; }

step "goreleaser $GORELEASER_VERSION"
bash .ci/install-goreleaser.sh
goreleaser=$(go env GOPATH)/bin/goreleaser
if ! command -v jq >/dev/null && [ "$(id -u)" = 0 ]; then
  step "installing jq"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null
fi
for tool in jq tar git sha256sum; do
  command -v "$tool" >/dev/null || { echo "release-check: $tool is missing" >&2; exit 1; }
done

# goreleaser reads the commit only if `git ls-remote --get-url` answers; a
# checkout with no remote (a linked worktree) gets one for this run only,
# through the environment, leaving the repository's config alone.
if ! git ls-remote --get-url >/dev/null 2>&1; then
  export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url GIT_CONFIG_VALUE_0=https://github.com/skiplock/skiplock.git
fi

step "goreleaser check"
"$goreleaser" check

step "snapshot build"
if [ "${RELEASE_CHECK_TARGETS:-}" = all ]; then
  "$goreleaser" release --snapshot --clean
else
  # The config's builds, narrowed to linux/amd64 (the machine's own):
  # darwin's and arm64's are the same code through the same flags, and each
  # cold cross build with the cloud drivers (skiplock_cloud) took about
  # 2.5 minutes of CI's 20. RELEASE_CHECK_TARGETS=all builds every one.
  cfg=$(mktemp --suffix .yaml)
  trap 'rm -f "$cfg"' EXIT
  sed -e 's/goos: \[linux, darwin\]/goos: [linux]/' -e 's/goarch: \[amd64, arm64\]/goarch: [amd64]/' .goreleaser.yaml >"$cfg"
  grep -q 'goos: \[linux\]' "$cfg" && grep -q 'goarch: \[amd64\]' "$cfg" ||
    { echo "release-check: could not narrow the targets" >&2; exit 1; }
  "$goreleaser" release --snapshot --clean --config "$cfg"
fi

version=v$(jq -r .version dist/metadata.json)
commit=$(git rev-parse HEAD)
commit_date=$(git show -s --format=%cI HEAD)
want="skiplock $version (commit ${commit:0:12}, "

# checksums cover every archive
(cd dist && sha256sum --quiet -c ./*_checksums.txt)

work=$(mktemp -d)
trap 'rm -rf "$work" ${cfg:+"$cfg"}' EXIT
chmod 755 "$work"

step "the linux/amd64 archive's --version"
archive=$(jq -r '.[] | select(.type == "Archive" and .goos == "linux" and .goarch == "amd64") | .path' dist/artifacts.json)
mkdir "$work/archive"
tar -xzf "$archive" -C "$work/archive"
for f in skiplock LICENSE README.md CHANGELOG.md; do
  [ -e "$work/archive/$f" ] || { echo "release-check: $archive lacks $f" >&2; exit 1; }
done
out=$("$work/archive/skiplock" --version)
echo "$out"
case "$out" in "$want"*) ;; *) echo "release-check: want a line starting '$want'" >&2; exit 1 ;; esac
# built with skiplock_cloud: history export reaches s3:// (cmd/skiplock/buckets.go)
for mod in gocloud.dev github.com/aws/aws-sdk-go-v2/service/s3; do
  go version -m "$work/archive/skiplock" | grep -q "dep[[:space:]]*$mod[[:space:]]" ||
    { echo "release-check: the archive's binary lacks $mod (the skiplock_cloud tag)" >&2; exit 1; }
done

step "image (OCI layout, FROM scratch)"
(cd .ci/ocibuild && go vet . && go test -count=1 .)
binary() { jq -r --arg os "$1" --arg arch "$2" '.[] | select(.type == "Binary" and .goos == $os and .goarch == $arch) | .path' dist/artifacts.json; }
image_args=()
for arch in amd64 arm64; do
  bin=$(binary linux $arch)
  if [ -n "$bin" ]; then image_args+=(-binary "linux/$arch=$PWD/$bin"); fi
done
(cd .ci/ocibuild && go run . "${image_args[@]}" \
  -layout "$PWD/../../dist/image" -tag "skiplock:$version" \
  -version "$version" -revision "$commit" -created "$commit_date")

# Read the layout the way a registry client would: index.json -> the image
# index -> linux/amd64's manifest -> its config and its one layer.
blob() { echo "dist/image/blobs/${1/://}"; }
index=$(jq -r '.manifests[0].digest' dist/image/index.json)
manifest=$(jq -r '.manifests[] | select(.platform.os == "linux" and .platform.architecture == "amd64") | .digest' "$(blob "$index")")
config=$(jq -r .config.digest "$(blob "$manifest")")
user=$(jq -r .config.User "$(blob "$config")")
entrypoint=$(jq -c .config.Entrypoint "$(blob "$config")")
[ "$user" = 65532:65532 ] || { echo "release-check: image user is '$user'" >&2; exit 1; }
[ "$entrypoint" = '["/skiplock"]' ] || { echo "release-check: image entrypoint is $entrypoint" >&2; exit 1; }
[ "$(jq '.layers | length' "$(blob "$manifest")")" = 1 ] || { echo "release-check: want one layer" >&2; exit 1; }
mkdir "$work/rootfs"
tar -xzf "$(blob "$(jq -r '.layers[0].digest' "$(blob "$manifest")")")" -C "$work/rootfs"
ls -l "$work/rootfs/skiplock"

step "the image's binary, as its user"
as_image_user() {
  if [ "$(id -u)" = 0 ]; then
    setpriv --reuid 65532 --regid 65532 --clear-groups -- "$@"
  else
    "$@"
  fi
}
skiplock="$work/rootfs/skiplock"
out=$(as_image_user "$skiplock" --version)
echo "$out"
case "$out" in "$want"*) ;; *) echo "release-check: want a line starting '$want'" >&2; exit 1 ;; esac
schema=release_check_$$
export DATABASE_URL=$TEST_DATABASE_URL
cleanup_schema() { "$skiplock" migrate down --to 0 --yes --schema "$schema" >/dev/null 2>&1 || true; }
trap 'cleanup_schema; rm -rf "$work" ${cfg:+"$cfg"}' EXIT
as_image_user "$skiplock" migrate up --schema "$schema"
as_image_user "$skiplock" migrate status --check --schema "$schema" >/dev/null
as_image_user "$skiplock" migrate down --to 0 --yes --schema "$schema"

ls -l dist/*.tar.gz dist/*_checksums.txt
step "done in $((SECONDS - start))s"
