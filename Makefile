# The two commands of the README's quick start.
DYNALITE := internal/dynalite/testdata/dynalite

.PHONY: test demo deps fuzz

## test: every test, with the race detector, against a local dynalite
## that the test harness starts by itself (installed from the lockfile).
test: deps
	go vet ./...
	go test -race -count=1 ./...
	$(MAKE) fuzz FUZZTIME=10s

## fuzz: a short run of each fuzz target (longer: make fuzz FUZZTIME=5m).
FUZZTIME ?= 30s
fuzz:
	go test -run '^$$' -fuzz '^FuzzDecodeItem$$' -fuzztime $(FUZZTIME) .
	go test -run '^$$' -fuzz '^FuzzOptions$$' -fuzztime $(FUZZTIME) .

## demo: two workers contend for a lock, one dies, the other takes over.
demo: deps
	go run ./cmd/ddblock demo

deps:
	cd $(DYNALITE) && npm ci --no-audit --no-fund --loglevel=error
