# Targets mirror CI (.ci/run runs `make lint` and `make test`).
GO      ?= go
PKGS    ?= ./...
BIN     ?= bin
LDFLAGS ?= -s -w

.PHONY: all build install dev image test test-short test-integration lint fmt vet bench bench-short bench-scale bench-internal bench-tls bench-write bench-fire bench-lag bench-work bench-floor bench-instr bench-memory bench-bridge bench-keys chaos fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# dq on your PATH: go install puts it in $(go env GOBIN), or in
# $(go env GOPATH)/bin (~/go/bin) when GOBIN is unset.
install:
	$(GO) install ./cmd/dq
	@d=$$($(GO) env GOBIN); [ -n "$$d" ] || d=$$($(GO) env GOPATH)/bin; \
	echo "installed $$d/dq"; \
	case ":$$PATH:" in *":$$d:"*) ;; *) echo "$$d is not on your PATH: export PATH=\"$$d:\$$PATH\"";; esac

# The README's first command: the whole system in one process.
dev:
	@command -v redis-server >/dev/null 2>&1 || { s=""; [ "$$(id -u)" = 0 ] || s=sudo; $$s apt-get update -qq && $$s apt-get install -y -qq redis-server; }
	@# built, then run: `go run` exits 1 whenever it gets the Ctrl-C itself,
	@# however cleanly dq stopped (make then says "Error 1")
	$(GO) build -o $(BIN)/dq ./cmd/dq
	exec $(BIN)/dq dev --demo

# Images built locally (no registry needed): delayq:dev, delayq-dev:dev, delayq-redis:dev.
image:
	deploy/build-images.sh

test-integration:
	DQ_REQUIRE_DOCKER=1 $(GO) test -race -count=1 -timeout 15m ./integration

# The README's test command: vet, then every test with the race detector
# against real redis-server, embedded etcd and kfake. Three test binaries
# at a time, not GOMAXPROCS (2 on CI's machine): the long packages wait
# more than they compute (integration: ~450 s of wall time for ~270 s of
# CPU), and on the 2-vCPU VM -p 3 took .ci/run from 15m25s to 12m24s with
# every package's own time unchanged (session 32).
test: vet
	$(GO) test -race -count=1 -p 3 -timeout 20m $(PKGS)
	$(GO) test -race -count=1 -tags dqfault ./internal/fault
	$(GO) -C bench vet ./...
	$(GO) -C bench test -count=1 ./...

# The seeded fault suite (docs/reliability.md); `make test` runs its 2-minute
# default. DQ_CHAOS_SEED=n DQ_CHAOS_DURATION=20m make chaos for a long run.
chaos:
	$(GO) test -count=1 -v -timeout 60m ./integration/chaos -run 'TestChaos$$'

test-short:
	$(GO) test -race -short -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

# golangci-lint, pinned, fetched through the Go module proxy (the curated
# linters are in .golangci.yml). Both modules: delayq, then bench/ (its own
# go.mod) under the same config; its paths stay relative to the config file.
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

# golangci-lint reads the dqfault build (.golangci.yml); the planted-bug
# files (*plant_on.go, tag dqplant) are at least compiled here.
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) build -tags dqplant ./...
	$(GOLANGCI_LINT) run ./...
	cd bench && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

# Benchmarks print their method and figures; results go to docs/benchmarks.md.
# make bench: delayq next to asynq on the same redis-server (bench/, its own
# module); writes docs/bench/results.json, the charts and the table in
# docs/benchmarks.md. bench-short: the same in under 2 minutes.
# bench-scale: the real binaries on a Redis Cluster of 1, 2 and 4 masters
# (#20): schedule, burst drain, handled rate, Redis CPU per task per
# master, lag; BENCH_SCALE_FLAGS=-short for a smoke run (bench/README.md).
bench:
	$(GO) -C bench run ./cmd/compare

bench-short:
	$(GO) -C bench run ./cmd/compare -short

bench-scale:
	$(GO) -C bench run ./cmd/scale $(BENCH_SCALE_FLAGS)

# delayq's own benchmarks, each against its issue's target.
bench-internal: bench-memory bench-write bench-fire bench-work bench-floor bench-tls bench-keys

bench-memory:
	$(GO) test ./internal/redisstore -run '^$$' -bench BenchmarkMemoryPerTask -benchtime 1x -count 1

# plain TCP next to TLS with a client certificate and an ACL user (#18)
bench-tls:
	$(GO) test ./internal/config -run '^$$' -bench BenchmarkRedisTLS -benchtime 1x -count 1

bench-write:
	$(GO) test ./internal/daemon -run '^$$' -bench 'BenchmarkWrite' -benchtime 5s -count 1 -timeout 20m

bench-fire:
	$(GO) test ./internal/event -run '^$$' -bench 'BenchmarkFire' -benchtime 1x -count 1 -timeout 20m

# firing lag where users see it (#22): the real binaries (one daemon, two
# event processes), 4,000 tasks/s due over 5 s, an independent franz-go
# consumer; the lag split into take, transit and total, next to a raw
# kafka-go producer's transit. DQ_BENCH_RUNS=5 for the spread.
bench-lag:
	$(GO) test ./integration -run '^$$' -bench 'BenchmarkLag' -benchtime 1x -count 1 -timeout 20m

# one worker draining a full topic next to raw kafka-go (#4, #20), then
# paced at 2,000 and 10,000 tasks/s (small micro-batches over the shards)
bench-work:
	$(GO) test ./worker -run '^$$' -bench 'BenchmarkThroughput|BenchmarkPaced' -benchtime 1x -count 1 -timeout 20m

# Redis memory of a bridge (topics no work process handles, #41): 1,000,000
# tasks (DQ_BENCH_TASKS) scheduled, fired, settled delivered, then purged
# after a 10s retention by the takes; used_memory at each step and the
# time the purge took (DQ_BENCH_IDLE_POLL: the pollers' idle poll, 5s).
bench-bridge:
	$(GO) test ./internal/redisstore -run '^$$' -bench BenchmarkBridgeMemory -benchtime 1x -count 1 -timeout 30m

# Limits per key (#45): one worker over 10,000 task keys with a per-key
# concurrency rule, next to no rule and a type-wide rule; then the keyed
# type's Redis state after 80 s idle. The Redis cost of the admit script
# alone: BenchmarkAdmitKeyed in internal/ratelimit.
bench-keys:
	$(GO) test ./worker -run '^$$' -bench 'BenchmarkKeyLimits' -benchtime 1x -count 1 -timeout 20m
	$(GO) test ./internal/ratelimit -run '^$$' -bench 'BenchmarkAdmitKeyed' -benchtime 1x -count 1

# redis-server instructions per task of each transition of a handled task
# (valgrind's callgrind): the figure that a noisy VM's drift does not move
bench-instr:
	$(GO) test ./internal/redisstore -run '^$$' -bench BenchmarkRedisInstructions -benchtime 1x -count 1 -timeout 20m

# The least Redis work of the take, claim and finish, next to the real ones.
bench-floor:
	$(GO) test ./internal/redisstore -run '^$$' -bench 'BenchmarkRedisFloor' -benchtime 1x -count 1

fuzz:
	$(GO) test ./internal/task -run '^$$' -fuzz FuzzDecodeBody -fuzztime 30s
	$(GO) test ./internal/daemon/wire -run '^$$' -fuzz FuzzDecodeTask -fuzztime 30s
	$(GO) test ./internal/daemon -run '^$$' -fuzz FuzzJournalRoundTrip -fuzztime 10s
	$(GO) test ./internal/daemon/journal -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 30s

clean:
	rm -rf $(BIN)
