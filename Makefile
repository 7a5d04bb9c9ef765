# intellect-node — see README.md for what each target does.
GO        ?= go
BIN       := bin
PKG       := ./...
# Packages cheap enough to run under the race detector in CI.
RACE_PKGS := ./mesh/... ./p2p/... ./node/...

.PHONY: all build test test-race test-short vet demo bench bench-wan build-cuda clean

all: build

build:
	$(GO) build -o $(BIN)/intellect-node ./cmd/intellect-node

vet:
	$(GO) vet ./...

# The whole suite, as CI runs it (.ci/run). Bounded: see docs/testing.md.
test: vet
	$(GO) test -count=1 -timeout 12m ./...
	$(GO) test -count=1 -race -timeout 12m $(RACE_PKGS)

test-short:
	$(GO) test -short -count=1 ./...

demo: build
	$(BIN)/intellect-node demo

clean:
	rm -rf $(BIN)
