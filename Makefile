# Targets mirror CI (.ci/run runs `make test`).
GO      ?= go
PKGS    ?= ./...
BIN     ?= bin
LDFLAGS ?= -s -w

.PHONY: all build test test-short lint fmt vet bench bench-write bench-fire bench-work fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# The README's test command: vet, then every test with the race detector
# against real redis-server, embedded etcd and kfake.
test: vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

test-short:
	$(GO) test -race -short -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Benchmarks print their method and figures; results go to docs/benchmarks.md.
bench: bench-write bench-fire bench-work

bench-write:
	$(GO) test ./internal/daemon -run '^$$' -bench 'BenchmarkWrite' -benchtime 1x -count 1 -timeout 20m

bench-fire:
	$(GO) test ./internal/event -run '^$$' -bench 'BenchmarkFire' -benchtime 1x -count 1 -timeout 20m

bench-work:
	$(GO) test ./worker -run '^$$' -bench 'BenchmarkThroughput' -benchtime 1x -count 1 -timeout 20m

fuzz:
	$(GO) test ./internal/task -run '^$$' -fuzz FuzzDecodeBody -fuzztime 30s
	$(GO) test ./internal/daemon -run '^$$' -fuzz FuzzDecodeTask -fuzztime 30s
	$(GO) test ./internal/journal -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 30s

clean:
	rm -rf $(BIN)
