# consumerd — see README.md. Every target works on a fresh Debian machine after `make deps`.
SHELL        := /bin/bash
.SHELLFLAGS  := -o pipefail -c
GO        ?= go
PKGS      ?= ./...
DATA_DIR  ?= ./consumerd-data
APT_PKGS  := librocksdb-dev etcd-server etcd-client nats-server prometheus chromium
# TESTFLAGS: -race catches data races; the timeout bounds a hung test well under CI's limit.
TESTFLAGS ?= -race -count=1 -timeout 25m

.PHONY: deps build test bench bench-quick bench-nexmark chaos run lint staticcheck-install clean

# deps installs the system packages the build and tests need, only when missing.
deps:
	@missing=""; for p in $(APT_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	else echo "deps: all present"; fi

# -buildvcs=auto stamps the commit into the binary (consumerd --version) where git can
# read the checkout, whatever GOFLAGS says, and builds without it elsewhere.
build:
	$(GO) build -buildvcs=auto -o bin/consumerd ./cmd/consumerd

# PUBLISH_RESTART_LINES: the publish-through-restarts tests (daemon) publish this many
# lines instead of the issue's 300,000, to keep make test fast.
PUBLISH_RESTART_LINES ?= 60000
test:
	PUBLISH_RESTART_LINES=$(PUBLISH_RESTART_LINES) $(GO) test $(TESTFLAGS) $(PKGS)

# bench prints BENCH lines: each figure the median over several rounds (with the headline's
# min and max), each round measuring its raw baseline too. -p 1: one package at a time, so no
# package's benchmarks disturb another's. bench-quick: one round of each, a fast check.
BENCHFLAGS ?= -run '^$$' -bench . -benchtime 1x -timeout 30m -p 1
# (Nexmark has a target of its own: bench-nexmark.)
BENCH_PKGS ?= $(shell $(GO) list $(PKGS) | grep -v /examples/nexmark)
bench:
	$(GO) test $(BENCHFLAGS) $(BENCH_PKGS) | grep -E '^(BENCH|ok|FAIL|---)'

bench-quick:
	CONSUMERD_BENCH_ROUNDS=1 $(GO) test $(BENCHFLAGS) $(BENCH_PKGS) | grep -E '^(BENCH|ok|FAIL|---)'

# bench-nexmark runs every Nexmark query over the same 1 M generated events
# (CONSUMERD_NEXMARK_EVENTS=N for another size), 3 rounds, and prints one
# BENCH nexmark.qN line each against Flink's published per-core figure.
bench-nexmark:
	$(GO) test -run '^$$' -bench Nexmark -benchtime 1x -timeout 30m ./examples/nexmark/ | grep -E '^(BENCH|ok|FAIL|---)'

# chaos runs the chaos harness (internal/chaos) once per seed: network namespaces
# with a 3-node etcd, a 3-node JetStream cluster (R=3, fsync always) and 4
# members in two zones; every fault kind per seed; one CHAOS line per run.
# Needs root. Replay one seed: make chaos SEEDS=5. `make test` runs one short seed.
SEEDS ?= 1,2,3
chaos:
	$(GO) run ./internal/chaos/cmd/chaos --seeds $(SEEDS)

run: build
	./bin/consumerd serve --data-dir $(DATA_DIR)

# staticcheck: the pinned version, installed into GOBIN (else the first GOPATH's bin) only when
# missing or another version, and called by that path.
STATICCHECK_VERSION := v0.8.2
GOBIN_DIR   = $(or $(shell $(GO) env GOBIN),$(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin)
STATICCHECK = $(GOBIN_DIR)/staticcheck

staticcheck-install:
	@$(GO) version -m $(STATICCHECK) 2>/dev/null | grep -qE '^\s+mod\s+honnef\.co/go/tools\s+$(STATICCHECK_VERSION)\s' || \
		{ echo "installing staticcheck $(STATICCHECK_VERSION) into $(GOBIN_DIR)"; \
		  GOBIN=$(GOBIN_DIR) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); }

lint: staticcheck-install
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)

clean:
	rm -rf bin $(DATA_DIR)
