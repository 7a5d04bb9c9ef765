#!/usr/bin/env bash
# build.sh — the CUDA side of intellect-node, run from anywhere.
#
#   kernels/cuda/build.sh headers   fetch cuda.h + the libcuda stub into .cuda-headers/ (once)
#   kernels/cuda/build.sh ptx       regenerate kernels/cuda/ptx/*.ptx from src/*.cu with nvcc
#   kernels/cuda/build.sh build     go build -tags cuda ./cmd/intellect-node → bin/intellect-node-cuda
#   kernels/cuda/build.sh vet       go vet -tags cuda on the cuda packages (CI: keeps them from rotting)
#   kernels/cuda/build.sh test-build  compile the cuda binary and the cuda-tagged test binaries into
#                                   bin/ (bin/intellect-node-cuda, bin/cuda-tests/*.test); no GPU needed
#   kernels/cuda/build.sh gpu-test  on a GPU machine, from the repository root, after test-build:
#                                   run the kernel and engine tests, the PyTorch comparison (when
#                                   python3 has torch + transformers) and the step benchmark
#   kernels/cuda/build.sh ptxas     compile the PTX to sm_90 SASS and print registers/spills per kernel
#   kernels/cuda/build.sh env       print the CGO_* exports the other modes use
#
# Building needs no nvcc and no GPU: only cuda.h and a libcuda.so stub, taken from Debian's
# non-free nvidia-cuda-dev package (downloaded, not installed, with a private apt config so the
# system's sources are left alone). The binary needs libcuda.so.1 (the driver) at run time, and
# cuBLAS is dlopen()ed (libcublas.so.13/.12/.11, or $INTELLECT_CUBLAS).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HDR="$ROOT/.cuda-headers"
PKG_CUDA=(./kernels/cuda/... ./train/gpu/... ./cmd/intellect-node/...)

fetch_headers() {
	if [[ -f "$HDR/include/cuda.h" && -f "$HDR/lib/libcuda.so" ]]; then return; fi
	local apt="$HDR/apt" codename
	codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
	mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$HDR/include" "$HDR/lib"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $codename non-free" >"$apt/sources.list"
	local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/none"
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "APT::Sandbox::User=root" -q)
	apt-get "${opts[@]}" update >&2
	(cd "$apt" && apt-get "${opts[@]}" download nvidia-cuda-dev >&2)
	local deb; deb="$(ls "$apt"/nvidia-cuda-dev_*.deb | head -n1)"
	rm -rf "$apt/x" && mkdir -p "$apt/x"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$apt/x" ./usr/include/cuda.h ./usr/lib/x86_64-linux-gnu/stubs/libcuda.so
	cp "$apt/x/usr/include/cuda.h" "$HDR/include/"
	cp "$apt/x/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" "$HDR/lib/"
	rm -rf "$apt/x" "$apt/cache" "$deb"
	echo "build.sh: cuda.h and libcuda stub in $HDR" >&2
}

# src_hash: SHA-256 over "name\n" + contents of every src file, in name order
# (the same recipe as srcHash in kernels/cuda/manifest_test.go).
src_hash() {
	(cd "$1" && for f in $(ls | LC_ALL=C sort); do printf '%s\n' "$f"; cat "$f"; done) | sha256sum | cut -d' ' -f1
}

cgo_env() {
	export CGO_ENABLED=1
	export CGO_CFLAGS="-I$HDR/include ${CGO_CFLAGS:-}"
	export CGO_LDFLAGS="-L$HDR/lib ${CGO_LDFLAGS:-}"
}

gen_ptx() {
	command -v nvcc >/dev/null || { echo "build.sh: nvcc not found (apt-get install nvidia-cuda-toolkit)" >&2; exit 1; }
	local src="$ROOT/kernels/cuda/src" out="$ROOT/kernels/cuda/ptx"
	# The first line of each PTX records the SHA-256 of the sources it came from
	# (src_hash below; TestPTXIsFresh recomputes it), so a stale PTX fails the tests.
	local hash; hash="$(src_hash "$src")"
	for arch in 80 90; do
		# --use_fast_math is NOT used: expf/logf must stay accurate for the loss to
		# match the CPU core.
		nvcc -ptx -std=c++17 -O3 -arch=compute_$arch -I"$src" -o "$out/tmp.ptx" "$src/kernels.cu"
		{ echo "// intellect-node src-sha256 $hash"; cat "$out/tmp.ptx"; } >"$out/kernels_sm$arch.ptx"
		rm -f "$out/tmp.ptx"
	done
	echo "build.sh: wrote $out/kernels_sm80.ptx and kernels_sm90.ptx" >&2
}

# gpu_test runs the prebuilt test binaries (they need only libcuda.so.1 and a
# libcublas.so.13/.12/.11, or $INTELLECT_CUBLAS). Exit status: the first failure.
gpu_test() {
	local t="$ROOT/bin/cuda-tests" out="${INTELLECT_TORCH_DIR:-$ROOT/out/torchcheck}" rc=0
	[[ -x "$t/kernels_cuda.test" && -x "$t/train_gpu.test" ]] || { echo "build.sh: run test-build first" >&2; exit 1; }
	(cd "$ROOT/kernels/cuda" && "$t/kernels_cuda.test" -test.v -test.count=1) || rc=1
	(cd "$ROOT/train/gpu" && "$t/train_gpu.test" -test.v -test.count=1) || rc=1
	if python3 -c 'import torch, transformers, safetensors' 2>/dev/null; then
		mkdir -p "$out"
		(cd "$ROOT/train/gpu" && INTELLECT_TORCH_DIR="$out" "$t/train_gpu.test" -test.v -test.run TestExportForTorch) &&
			python3 "$ROOT/kernels/cuda/check_torch.py" "$out" || rc=1
	else
		echo "build.sh: python3 lacks torch/transformers/safetensors: PyTorch comparison skipped" >&2
	fi
	(cd "$ROOT/train/gpu" && "$t/train_gpu.test" -test.run '^$' -test.bench BenchmarkStep -test.benchtime "${BENCHTIME:-10x}") || rc=1
	return $rc
}

cd "$ROOT"
case "${1:-build}" in
headers) fetch_headers ;;
ptx) gen_ptx ;;
env) fetch_headers; cgo_env; echo "export CGO_ENABLED=1 CGO_CFLAGS='$CGO_CFLAGS' CGO_LDFLAGS='$CGO_LDFLAGS'" ;;
build) fetch_headers; cgo_env; mkdir -p bin; go build -tags cuda -o bin/intellect-node-cuda ./cmd/intellect-node ;;
vet) fetch_headers; cgo_env; go vet -tags cuda "${PKG_CUDA[@]}" ;;
test-build)
	fetch_headers; cgo_env; mkdir -p bin/cuda-tests
	go build -tags cuda -o bin/intellect-node-cuda ./cmd/intellect-node
	go test -tags cuda -c -o bin/cuda-tests/kernels_cuda.test ./kernels/cuda
	go test -tags cuda -c -o bin/cuda-tests/train_gpu.test ./train/gpu ;;
gpu-test) gpu_test ;;
ptxas)
	nvcc -cubin -std=c++17 -O3 -arch=sm_90 -I"$ROOT/kernels/cuda/src" -Xptxas -v -o /dev/null \
		"$ROOT/kernels/cuda/src/kernels.cu" 2>&1 | grep -E "Compiling entry|registers|spill" ;;
*) echo "usage: $0 headers|ptx|build|vet|test-build|gpu-test|ptxas|env" >&2; exit 2 ;;
esac
