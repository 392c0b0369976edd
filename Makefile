# The Makefile only wraps go. `make help` lists the targets.
GO        ?= go
BIN       ?= bin
PREFIX    ?= /usr/local
DEMO_OUT  ?= runs/demo
# Tests that need an outside component skip on a developer machine and fail
# in CI, where FORKLINE_REQUIRE names the components (see .ci/run).
TESTFLAGS ?=
# staticcheck's version, run with `go run` (it is not a dependency of the module).
STATICCHECK ?= v0.8.2

.PHONY: help build test test-bare test-race test-short bench bench-guard demo lint install images images-debian images-browser clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# forkline is linked statically (no cgo): -policy agent runs it inside
# docker sandboxes, whatever their image, as the relay to its gateway.
build: ## build forkline into bin/ (statically linked)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/forkline ./cmd/forkline

test: ## run every test (measured on a fresh clone with every component required: about 20 min on 2 cores shared at load average 7-9; less on idle cores, and when components are missing and their tests skip)
	$(GO) test $(TESTFLAGS) -count=1 -timeout 30m ./...

test-bare: ## every test as a bare machine runs it: every optional component hidden (FORKLINE_HIDE=all), the skips listed (7.5 min on 2 cores at load average 20)
	env -u FORKLINE_REQUIRE FORKLINE_HIDE=all $(GO) test $(TESTFLAGS) -json -count=1 -timeout 30m ./... | $(GO) run ./internal/testenv/skipreport

# -race turns on checkptr, which makes parquet-go's unsafe.Slice over a
# damaged page a fatal error no recover catches (seen in formats/shard
# TestDecodePanicRecovered, whose damaged shards must read as ErrCorrupt);
# without checkptr it is the panic the readers recover, as in a release
# build. checkptr stays on for every other package.
RACEFLAGS = -race -gcflags='github.com/parquet-go/parquet-go/...=-d=checkptr=0'

test-race: ## every test under the race detector (slower: about 3x)
	$(GO) test $(TESTFLAGS) $(RACEFLAGS) -count=1 -timeout 40m ./...

test-short: ## the quick tests only
	$(GO) test -short -count=1 ./...

bench: ## benchmarks: every provider's reset against recreate, local and docker reset latency (needs an engine), collector throughput
	$(GO) test -run '^$$' -bench Reset -v ./providers/...
	$(GO) run ./benchmarks/reset
	$(GO) run ./benchmarks/docker
	$(GO) run ./benchmarks/throughput

# The regression guards are ratios measured in the same run, never absolute
# times. Run them on an otherwise idle machine (CI runs them on their own).
#
# Export: CPU against DuckDB copying the same shards in the same run
# (benchmarks/export). On 2,000 episodes a process's start and the shard
# reads weigh more than at 25,000, so the bound (3.0) is looser than the goal
# of 1.0: it catches a gross regression, not a 20% one, and leaves room for
# the swings of a loaded machine (benchmarks/export/RESULTS.md).
BENCH_GUARD_EPISODES ?= 2000
BENCH_GUARD_RATIO    ?= 3.0
# Collection at 64 replicas against its ideal (every replica waiting on a
# model that answers after 1 s): 94% was measured on 2 idle cores, 55% at
# load average 26; the bound leaves room for a shared machine, not for a
# regression (benchmarks/scale/RESULTS.md).
MIN_OF_IDEAL ?= 0.70

bench-guard: ## short benchmarks whose ratio must stay within a bound: export CPU <= BENCH_GUARD_RATIO x DuckDB's on 2,000 episodes, collection at 64 replicas >= MIN_OF_IDEAL of ideal (about 3 min; the DuckDB baseline's first build takes longer)
	$(GO) run ./benchmarks/export -episodes $(BENCH_GUARD_EPISODES) -data $${TMPDIR:-/tmp}/forkline-bench-guard -max-cpu-ratio $(BENCH_GUARD_RATIO)
	$(GO) run ./benchmarks/scale -replicas 64 -rounds 3 -min-of-ideal $(MIN_OF_IDEAL)

demo: build ## collect the example tasks: 4 replicas, 24 episodes, into runs/demo
	rm -rf $(DEMO_OUT)
	$(BIN)/forkline collect -tasks examples/tasks -replicas 4 -repeats 8 -out $(DEMO_OUT)
	@echo
	@echo "Dataset: $(DEMO_OUT)   (manifest: $(DEMO_OUT)/manifest.json)"
	@echo "Look at it:  $(BIN)/forkline inspect $(DEMO_OUT)"
	@echo "   one episode as a transcript:  $(BIN)/forkline inspect $(DEMO_OUT) -episode PREFIX"
	@echo "   export it:  $(BIN)/forkline export -in $(DEMO_OUT) -to chat-jsonl -out out/chat"
	@echo "The browser tasks in examples/tasks/web are not in this demo (they need Chromium):"
	@echo "   $(BIN)/forkline collect -tasks examples/tasks/web -out runs/web"

lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK) ./...

install: build ## install forkline into $(PREFIX)/bin
	install -d $(PREFIX)/bin
	install -m 0755 $(BIN)/forkline $(PREFIX)/bin/forkline

clean: ## remove build output and the demo dataset
	rm -rf $(BIN) runs

images: build ## build the Docker image forkline/busybox (kept when present)
	$(BIN)/forkline images

images-debian: build ## also build forkline/debian from a debootstrap rootfs (root; slow, about a minute)
	$(BIN)/forkline images -image forkline/busybox,forkline/debian

images-browser: build ## build forkline/chromium, the Docker image for browser tasks, on forkline/debian (built first when missing; root, debootstrap; minutes)
	$(BIN)/forkline images -image forkline/debian,forkline/chromium
