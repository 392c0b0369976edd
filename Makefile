# The Makefile only wraps go. `make help` lists the targets.
GO        ?= go
BIN       ?= bin
PREFIX    ?= /usr/local
DEMO_OUT  ?= runs/demo
# Tests that need an outside component skip on a developer machine and fail
# in CI, where FORKLINE_REQUIRE names the components (see .ci/run).
TESTFLAGS ?=

.PHONY: help build test test-short bench demo lint install images images-debian clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

build: ## build collect, export and replay into bin/
	$(GO) build -o $(BIN)/ ./cmd/...

test: ## run every test (about 3-6 minutes on 2 cores)
	$(GO) test $(TESTFLAGS) -count=1 -timeout 14m ./...

test-short: ## the quick tests only
	$(GO) test -short -count=1 ./...

bench: ## benchmarks: every provider's reset against recreate, local and docker reset latency (needs an engine), collector throughput
	$(GO) test -run '^$$' -bench Reset -v ./providers/...
	$(GO) run ./benchmarks/reset
	$(GO) run ./benchmarks/docker
	$(GO) run ./benchmarks/throughput

demo: build ## collect the example tasks: 4 replicas, 24 episodes, into runs/demo
	rm -rf $(DEMO_OUT)
	$(BIN)/collect -tasks examples/tasks -replicas 4 -repeats 8 -out $(DEMO_OUT)
	@echo
	@echo "Dataset: $(DEMO_OUT)   (manifest: $(DEMO_OUT)/manifest.json)"
	@echo "Look at it:  $(BIN)/export -in $(DEMO_OUT) -to jsonl -out - | head -c 2000"
	@echo "       or:   duckdb -c \"select task_id, exit_reason, steps from '$(DEMO_OUT)/episodes/*.parquet'\""

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

install: build ## install as forkline-collect, forkline-export, forkline-replay
	install -d $(PREFIX)/bin
	install -m 0755 $(BIN)/collect $(PREFIX)/bin/forkline-collect
	install -m 0755 $(BIN)/export $(PREFIX)/bin/forkline-export
	install -m 0755 $(BIN)/replay $(PREFIX)/bin/forkline-replay

clean: ## remove build output and the demo dataset
	rm -rf $(BIN) runs

images: ## build the Docker images forkline/busybox (and reuse them when present)
	$(GO) run ./providers/docker/mkimages

images-debian: ## also build forkline/debian from a debootstrap rootfs (root; slow, about a minute)
	$(GO) run ./providers/docker/mkimages -debian

.PHONY: images-browser
images-browser: ## build forkline/chromium, the Docker image for browser tasks (root, debootstrap; minutes)
	$(GO) run ./browser/mkimage
