# skiplock — the commands that matter:
#   make run          local PostgreSQL (unless DATABASE_URL is set), migrations, demo workload, workers, dashboard
#   make test-fast    the edit-test loop: every package but the fault tier, -short, no race detector (about a minute)
#   make test         lint + every test but the fault tier against real PostgreSQL, with the race detector
#   make test-faults  the fault tier: kill -9, restarts, failover and SIGSTOP on real worker processes
#   make api          accept an intended change of the public API: rewrite api/*.txt (docs/api.md)
# CI (.ci/run) runs test and test-faults, each against a private cluster with the image's settings.
GO        ?= go
GOBIN     := $(shell $(GO) env GOPATH)/bin
PKGS      := ./...
# The fault tier: packages that build worker binaries and crash, restart or
# freeze processes and databases. Their tests skip with -short.
FAULT_PKGS := ./test/faults/... ./test/exactlyonce/...
# Everything else. Most of its time is waiting on PostgreSQL, not CPU: more
# tests in flight than cores (-parallel) pays on 2 cores. Not too many: the
# image's server takes 100 connections, and at -parallel 6 (12 tests at
# once with -p 2) the suite held 82 of them at its peak.
CORE_PKGS  = $(shell $(GO) list ./... | grep -v -e /test/faults -e /test/exactlyonce)
# The fast tier leaves out, besides, the benchmark harness's own checks and
# test/badinput (which builds the CLI and runs it as a process per input).
FAST_PKGS  = $(shell $(GO) list ./... | grep -v -e /test/ -e /bench)
PARALLEL  ?= 4
# staticcheck, pinned: a release that flags more would fail CI on a change
# that did not cause it. .ci/run installs this version early (in the
# background, while packages install); lint installs it when missing.
STATICCHECK_VERSION := v0.8.2

.PHONY: run test test-fast test-faults lint staticcheck test-go api docs bench bench-peers pressure build chaos chaos-long chaos-failover fuzz fuzz-cpu fuzz-jobs e2e

run:
	$(GO) run ./cmd/skiplock dev

test: lint test-go

# contrib/otelskiplock is a module of its own (OpenTelemetry stays out of
# skiplock's go.mod); it builds against this checkout through a replace.
CONTRIB   := contrib/otelskiplock
# test/river is a module of its own too: River's own migrator and client make
# the schema and the jobs `skiplock import river` moves, and River needs newer
# golang.org/x modules than skiplock's go.mod pins.
RIVERTEST := test/river

test-go:
	$(GO) test -race -count=1 -p 2 -parallel $(PARALLEL) -timeout 15m $(CORE_PKGS)
	cd $(CONTRIB) && $(GO) test -race -count=1 -timeout 5m ./...
	cd $(RIVERTEST) && $(GO) test -race -count=1 -timeout 10m ./...

# The fast tier: unit tests and the in-process database tests. Tests that
# start clusters of their own or run for long are gated on testing.Short.
test-fast:
	$(GO) test -short -count=1 -p 2 -parallel $(PARALLEL) -timeout 5m $(FAST_PKGS)

# The fault tier, one package at a time (each starts worker processes and
# clusters of its own).
test-faults:
	$(GO) test -race -count=1 -p 1 -timeout 20m $(FAULT_PKGS)

# The API guard: internal/apilist's test (run by test and test-fast) fails
# when the public packages' API differs from api/*.txt. This rewrites the
# listings from the code; commit them with the change (docs/api.md).
api:
	$(GO) test -count=1 -run '^TestAPIMatchesListing$$' ./internal/apilist -update

# Regenerate what is generated from the code: the CLI reference from the
# command tree (docs/reference/cli.md) and today's schema (schema.sql); tests
# fail while either is stale.
docs:
	$(GO) test -count=1 -run '^TestCLIReferenceIsCurrent$$' ./cmd/skiplock -update
	$(GO) generate ./internal/migrations

# Programs the fault tiers build from testdata at run time: ./... skips
# testdata, so lint vets them by name (a break shows in make test, not only
# in make test-faults).
TESTDATA_MAINS := ./test/faults/testdata/worker ./test/exactlyonce/testdata/worker

# Lint reads the code as the release builds it (.goreleaser.yaml, and
# internal/gobuild for the tests' builds of the CLI): static, -trimpath, with
# the skiplock_cloud tag, so cmd/skiplock/buckets.go is vetted too. vet and
# staticcheck compile every dependency for its export data; with these
# settings that is the build cache the tests' CLI builds and the release
# snapshot use, where plain settings made a second compile of the module and
# its dependencies (137-147 s of both cores from an empty cache).
RELEASE_ENV  := CGO_ENABLED=0 GOFLAGS="-trimpath $(GOFLAGS)"
RELEASE_TAGS := -tags skiplock_cloud

lint: staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(RELEASE_ENV) $(GO) vet $(RELEASE_TAGS) $(PKGS) $(TESTDATA_MAINS)
	$(RELEASE_ENV) $(GOBIN)/staticcheck $(RELEASE_TAGS) $(PKGS)
	cd $(CONTRIB) && $(RELEASE_ENV) $(GO) vet $(RELEASE_TAGS) ./... && $(RELEASE_ENV) $(GOBIN)/staticcheck $(RELEASE_TAGS) ./...
	cd $(RIVERTEST) && $(RELEASE_ENV) $(GO) vet $(RELEASE_TAGS) ./... && $(RELEASE_ENV) $(GOBIN)/staticcheck $(RELEASE_TAGS) ./...

# Installs the pinned staticcheck unless that version is already in GOBIN.
staticcheck:
	@$(GOBIN)/staticcheck -version 2>/dev/null | grep -qF '($(STATICCHECK_VERSION:v%=%))' || \
	  $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x $(PKGS)

# skiplock, River and asynq through the same scenarios, one after the other
# (about 25 minutes; see bench/peers/run.sh and docs/performance.md).
bench-peers:
	bash bench/peers/run.sh

# The pressure suite (issue 15): every scenario (clean, idle-tx, rr-readers,
# overload) at 2,000 jobs/s with the default phases, about 22 minutes, against
# $$DATABASE_URL (migrated). PRESSURE_FLAGS adds flags, e.g. --json or
# --pressure-timeline pressure.ndjson.
pressure:
	$(GO) run ./cmd/skiplock bench --pressure all $(PRESSURE_FLAGS)

build:
	$(GO) build -o bin/skiplock ./cmd/skiplock

e2e:
	bash .ci/e2e.sh

# Time-boxed chaos run (test/faults TestChaos): producers, workers and random
# faults, then the invariant checker. SKIPLOCK_CHAOS sets the duration,
# SKIPLOCK_CHAOS_SEED replays a run, SKIPLOCK_CHAOS_REPORT saves the summary.
chaos:
	SKIPLOCK_CHAOS=$${SKIPLOCK_CHAOS:-2m} $(GO) test -count=1 -run '^TestChaos$$' -v -timeout 20m ./test/faults/

chaos-long:
	SKIPLOCK_CHAOS=$${SKIPLOCK_CHAOS:-30m} $(GO) test -count=1 -run '^TestChaos$$' -v -timeout 0 ./test/faults/

# The chaos run on a primary with a synchronous standby: failovers among the faults.
chaos-failover:
	SKIPLOCK_CHAOS_FAILOVER=1 SKIPLOCK_CHAOS=$${SKIPLOCK_CHAOS:-3m} $(GO) test -count=1 -run '^TestChaos$$' -v -timeout 20m ./test/faults/

# Every fuzz target for FUZZTIME each, except the two that run a job through
# PostgreSQL per input (a fixed count of 500 and 300); corpora under
# testdata/fuzz are also replayed by make test. The database-backed targets
# use TEST_DATABASE_URL.
# FUZZTIME is a duration or a count of executions per target (CI: 30000x).
# Go 1.26's fuzz coordinator can fail a duration run with a bare "context
# deadline exceeded" when a worker is busy (minimizing) at the deadline,
# with no failing input (golang/go#75804, fixed in Go 1.27): a count has no
# deadline to race, and a real finding still fails and writes its input.
# fuzz-cpu is the targets that only compute; fuzz-jobs the two that run a
# job per input (CI runs the first in the background and the second on its
# own: starved of CPU, an input of those takes long enough for the fuzz
# coordinator to take its process for hung).
FUZZTIME ?= 20s
fuzz: fuzz-cpu fuzz-jobs
fuzz-cpu:
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/cron/
	$(GO) test -run '^$$' -fuzz '^FuzzParseNDJSONLine$$' -fuzztime $(FUZZTIME) ./cmd/skiplock/
	$(GO) test -run '^$$' -fuzz '^FuzzHTTPInputs$$' -fuzztime $(FUZZTIME) ./dashboard/
	$(GO) test -run '^$$' -fuzz '^FuzzErrorText$$' -fuzztime $(FUZZTIME) ./internal/worker/
fuzz-jobs:
	@# A job through PostgreSQL (and a child process) per input: a fixed short count.
	$(GO) test -run '^$$' -fuzz '^FuzzHandlerErrorText$$' -fuzztime 500x .
	$(GO) test -run '^$$' -fuzz '^FuzzExecStderr$$' -fuzztime 300x ./cmd/skiplock/
