# The commands of the README's quick start.
GOTEST := go test -race -count=1

.PHONY: test test-dynalite test-dynamodb-local test-otel vet demo fuzz bench

## test: every test, with the race detector, against each local server in
## turn (dynalite, then Amazon's DynamoDB Local), which the test harness
## starts by itself (installed from the lockfiles, once, into the user's
## cache directory: see internal/testserver); then the fuzz targets.
test: vet test-dynalite test-dynamodb-local test-otel
	$(MAKE) fuzz FUZZTIME=10s

## vet: go vet, and go.mod and go.sum as go mod tidy would write them.
vet:
	go vet ./...
	go mod tidy -diff
	cd otel && go vet ./... && go mod tidy -diff

## test-dynalite, test-dynamodb-local: the whole suite against one server.
test-dynalite:
	@echo "=== go test ./... against dynalite (DDBLOCK_TEST_SERVER=dynalite)"
	@if [ -n "$$DDBLOCK_TEST_ENDPOINT" ]; then echo "=== DDBLOCK_TEST_ENDPOINT is set: the tests run against $$DDBLOCK_TEST_ENDPOINT instead"; fi
	DDBLOCK_TEST_SERVER=dynalite $(GOTEST) ./...
	@echo "=== passed against dynalite"

test-dynamodb-local:
	@echo "=== go test ./... against DynamoDB Local (DDBLOCK_TEST_SERVER=dynamodb-local)"
	@if [ -n "$$DDBLOCK_TEST_ENDPOINT" ]; then echo "=== DDBLOCK_TEST_ENDPOINT is set: the tests run against $$DDBLOCK_TEST_ENDPOINT instead"; fi
	DDBLOCK_TEST_SERVER=dynamodb-local $(GOTEST) ./...
	@echo "=== passed against DynamoDB Local"

## test-otel: the OpenTelemetry module's tests (otel/, a module of its
## own, which go test ./... at the root does not enter), against each
## server in turn; they start it through internal/cmd/testserver.
test-otel:
	@for s in dynalite dynamodb-local; do \
		echo "=== otel module: go test ./... against $$s (DDBLOCK_TEST_SERVER=$$s)"; \
		(cd otel && DDBLOCK_TEST_SERVER=$$s $(GOTEST) ./...) || exit 1; \
	done

## bench: the single-call benchmarks against each local server in turn,
## one after the other (doc/benchmarks.md).
bench:
	@for s in dynalite dynamodb-local; do \
		echo "=== benchmarks against $$s (DDBLOCK_TEST_SERVER=$$s)"; \
		DDBLOCK_TEST_SERVER=$$s go test -run '^$$' -bench . -benchtime 2s -count 3 . || exit 1; \
	done

## fuzz: a short run of each fuzz target (longer: make fuzz FUZZTIME=5m).
FUZZTIME ?= 30s
fuzz:
	go test -run '^$$' -fuzz '^FuzzDecodeItem$$' -fuzztime $(FUZZTIME) .
	go test -run '^$$' -fuzz '^FuzzOptions$$' -fuzztime $(FUZZTIME) .

## demo: two workers contend for a lock, one dies, the other takes over.
## It runs against dynalite: Node.js only, and up in well under a second.
## The first run installs dynalite into the user's cache directory, as an
## installed binary's `ddblock demo` does.
demo:
	go run ./cmd/ddblock demo
