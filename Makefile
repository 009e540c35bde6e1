# Conclave build targets. `make run` starts the embedded default; `make test` runs every test.
GO       ?= go
BIN      ?= bin/conclave
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
# SERVICES=1 makes PostgreSQL, Redis and sshd available first (installing them on a fresh Debian machine).
SERVICES ?= 0

.PHONY: build run test fuzz bench bench-records soak eval lint services proto classifier

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/conclave

run: build
	./$(BIN) serve

services:
	scripts/services.sh

# classifier trains the task classifier on the training split of internal/core/classify/data (seeded:
# the same data gives the same file) and writes the weights the classify package embeds. A test fails
# when the shipped weights were not trained from the data and options of the build.
classifier:
	$(GO) run ./cmd/classifier

# test runs every test with the race detector, the fuzz targets' corpora among them, then each fuzz
# target for FUZZTIME more (make fuzz FUZZTIME=10m for a long run). The fuzzing build leaves out the
# contract tests against large client and specification libraries (-tags fuzz), which the fuzzer would
# otherwise instrument. The default is a count of inputs, not a duration: with a duration, Go 1.26's
# fuzzing coordinator can report its own deadline as a failure (golang/go#75804, fixed in Go 1.27);
# 5000 inputs take each target 1 to 4 s here.
FUZZTIME ?= 5000x
test:
	@if [ "$(SERVICES)" = 1 ]; then scripts/services.sh; fi
	$(GO) test -race -count=1 ./...
	$(MAKE) fuzz

fuzz:
	$(GO) test -tags fuzz -run='^$$' -fuzz='^FuzzRouteAndChatBodies$$' -fuzztime=$(FUZZTIME) ./http
	$(GO) test -tags fuzz -run='^$$' -fuzz='^FuzzReadFrame$$' -fuzztime=$(FUZZTIME) ./internal/adapters/fleet
	$(GO) test -tags fuzz -run='^$$' -fuzz='^FuzzParseResponses$$' -fuzztime=$(FUZZTIME) ./internal/adapters/providers
	$(GO) test -tags fuzz -run='^$$' -fuzz='^FuzzLoad$$' -fuzztime=$(FUZZTIME) ./internal/platform/config

# bench runs the Go benchmarks (decision core, the whole pipeline, and dispatch over a real sshd to the
# built worker: agent session against exec per job), then the load run: the real
# server against a bare net/http JSON handler, as separate processes, at concurrency 1 and 16, with the
# top entries of a CPU profile of the server under that load; then the passthrough run: one model through the OpenAI adapter to a local mock against calling the mock directly.
# The load run includes conclave recording to PostgreSQL (a database of its own on BENCH_DATABASE_URL's
# server), for the recorder's effect on latency and CPU. Last, the keyed run: a direct call made with an
# API key (its budget held in Redis and settled), and one made with a key in a team (two budgets held),
# against the admin token's, recording to PostgreSQL: server CPU and PostgreSQL's CPU per request;
# BASELINE_CONCLAVE (an older build's binary) is measured beside it when set.
BENCH_DATABASE_URL ?= postgres://conclave:conclave@127.0.0.1:5432/conclave_test?sslmode=disable
bench: build
	CONCLAVE_BIN=$(abspath $(BIN)) $(GO) test -run='^$$' -bench=. -benchmem ./...
	$(GO) run ./bench/load --conclave $(BIN) --database '$(BENCH_DATABASE_URL)'
	$(GO) run ./bench/load --conclave $(BIN) --passthrough
	$(GO) run ./bench/load --conclave $(BIN) --cache
	$(GO) run ./bench/load --conclave $(BIN) --keyed --database '$(BENCH_DATABASE_URL)' $(if $(BASELINE_CONCLAVE),--baseline-conclave $(BASELINE_CONCLAVE))
	$(MAKE) bench-records

# bench-records fills a database of its own on BENCH_DATABASE_URL's server with the records of
# BENCH_RECORDS requests over 35 days (the current week at that density, earlier weeks thinner where
# the database would outgrow BENCH_MAX_GB), then measures the p95 of a key's spend over 30 days by
# model and by day, the cost of recording (time, the server backend's CPU and WAL per record) against
# an empty database, and bytes per record; it prints the plans of the insert path. About 15 minutes
# at the defaults; the databases are dropped at the end.
BENCH_RECORDS ?= 10000000
BENCH_MAX_GB ?= 30
bench-records:
	CONCLAVE_TEST_DATABASE_URL='$(BENCH_DATABASE_URL)' CONCLAVE_REQUIRE_SERVICES=1 CONCLAVE_BENCH_RECORDS=$(BENCH_RECORDS) \
		CONCLAVE_BENCH_MAX_GB=$(BENCH_MAX_GB) $(GO) test -v -count=1 -run='^$$' -bench='^BenchmarkRecordsAtScale$$' -benchtime=1x \
		-timeout=90m ./internal/adapters/store/postgres

# soak first runs the fault matrix: the built server with a real PostgreSQL, Redis and three sshd worker
# hosts at 40 requests/s, every row of the specification's error table injected in turn for
# FAULT_PHASE each, counting the answers per row; every answer must have its record at the end. Then
# the books' outages at their full length: PostgreSQL, then Redis, away for OUTAGE (15 s) under keyed
# load, every request answered and the books balanced after (make test runs them for 3 s). Then it
# runs conclave for SOAK_DURATION under steady load through the whole pipeline (16 connections,
# simulated faults on, limits raised, info logs) and prints its RSS, heap goal and goroutines over the
# run, which must stay flat after the warm-up; then it drives the embedded default as it ships
# (simulated faults, default rate limits) with SOAK_REQUESTS requests at 32 connections and tallies the
# answers: the only refusals should be rate limits' 503s with Retry-After, and no provider breaker
# should be open at the end. Last, the overload run: the embedded default as it ships, 128 connections
# for OVERLOAD_FOR, far beyond its rate limits; it prints the answers by status with their p50, p99 and
# longest times, and fails when any answer took longer than max_queue_seconds (5 s) + 1 s.
OUTAGE ?= 15s
SOAK_DURATION ?= 30m
SOAK_REQUESTS ?= 200000
FAULT_PHASE ?= 10s
OVERLOAD_FOR ?= 20s
soak: build
	CONCLAVE_FAULT_PHASE=$(FAULT_PHASE) $(GO) test -tags soak -count=1 -timeout 30m -run '^TestFaultMatrixUnderLoad$$' -v ./cmd/conclave
	CONCLAVE_TEST_OUTAGE=$(OUTAGE) $(GO) test -count=1 -timeout 10m -run 'OutageStopsNoKeyedTraffic|LostRedisStopsNoKeyedTraffic' -v ./http
	$(GO) run ./bench/load --conclave $(BIN) --endurance $(SOAK_DURATION)
	$(GO) run ./bench/load --conclave $(BIN) --sustained $(SOAK_REQUESTS) --sustained-concurrency 32
	$(GO) run ./bench/load --conclave $(BIN) --overload $(OVERLOAD_FOR) --overload-concurrency 128

# eval replays the shared dev data (recorded answers of public models to public benchmarks) through the
# real pipeline under seeds 1, 2 and 3 and writes reports/eval/report.{json,md,svg}: every figure as its
# mean and range over the seeds (the chart is seed 1's).
REPLAY ?= ../shared/data/replay
eval: build
	./$(BIN) eval --data $(REPLAY) --seeds 1,2,3 --out reports/eval

# proto regenerates messages/*.pb.go; it needs protoc (Debian: protobuf-compiler), protoc-gen-go
# (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12) and protoc-gen-go-vtproto
# (go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.1-0.20240319094008-0393e58bdf10, the version go.mod requires).
proto:
	protoc -I messages -I "$$($(GO) list -m -f '{{.Dir}}' github.com/asynkron/protoactor-go)/actor" -I /usr/include \
		--go_out=. --go_opt=module=github.com/conclave-ai/conclave \
		--go-vtproto_out=. --go-vtproto_opt=module=github.com/conclave-ai/conclave,features=marshal+unmarshal+size messages/conclave.proto

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags fuzz ./...
