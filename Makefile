# intellect-node — see README.md for what each target does.
GO        ?= go
BIN       := bin
# Packages run under the race detector too (the concurrent ones; the numeric
# packages are single-goroutine per call or covered by their own tests).
RACE_PKGS := ./mesh/... ./p2p/... ./node/...

.PHONY: all build vet test test-short demo demo-train bench bench-gemm bench-train bench-net \
	bench-wan wan-cleanup bench-convergence build-cuda vet-cuda clean

all: build

build:
	$(GO) build -o $(BIN)/intellect-node ./cmd/intellect-node

vet:
	$(GO) vet ./...

# The whole suite, as CI runs it (.ci/run). Bounded: see docs/testing.md.
test: vet
	$(GO) test -count=1 -timeout 12m ./...
	$(GO) test -count=1 -race -timeout 12m $(RACE_PKGS)

# The quick subset (skips multi-process and long numeric checks).
test-short:
	$(GO) test -short -count=1 ./...

# A local network on 127.0.0.1: 3 nodes, a 4th joining mid-run, one leaving.
demo: build
	$(BIN)/intellect-node demo

# One node training the tiny preset alone.
demo-train: build
	$(BIN)/intellect-node train --preset tiny --home .intellect-train

# Speed figures, each as a ratio against a baseline measured in the same run.
bench: bench-gemm bench-train bench-net

# SGEMM vs OpenBLAS with its AVX-512 kernels (Debian's libopenblas-dev is the
# baseline only; installed here if missing, needs root).
bench-gemm:
	@dpkg -s libopenblas-dev >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq libopenblas-dev)
	OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=2 \
		$(GO) test -tags openblas -run XXX -bench GemmTable -benchtime 1x ./kernels/

bench-train:
	$(GO) test ./train -run XXX -bench 'TrainStep|SmallPreset' -benchtime 20x
	$(GO) test ./kernels -run XXX -bench Attention -benchtime 3x

bench-net:
	$(GO) test ./mesh -run XXX -bench 'Int8Codec' -benchtime 20x
	$(GO) test ./p2p -run XXX -bench 'AllReduceLoopback|StreamThroughput|CkptJoin|CkptDonorCompute' -benchtime 3x

clean:
	rm -rf $(BIN)
