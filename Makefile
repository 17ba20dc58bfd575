# skiplock — the two commands that matter:
#   make run    local PostgreSQL (unless DATABASE_URL is set), migrations, demo workload, workers, dashboard
#   make test   lint + every test against real PostgreSQL, with the race detector
GO        ?= go
GOBIN     := $(shell $(GO) env GOPATH)/bin
PKGS      := ./...

.PHONY: run test lint test-go bench build chaos chaos-long fuzz e2e

run:
	$(GO) run ./cmd/skiplock dev

test: lint test-go

test-go:
	$(GO) test -race -count=1 -p 2 -timeout 15m $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest
	$(GOBIN)/staticcheck $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x $(PKGS)

build:
	$(GO) build -o bin/skiplock ./cmd/skiplock
