// emu.h — just enough of CUDA to run src/*.cu on the CPU, for testing the
// kernels' logic (indexing, masking, reductions, scaling) on machines without
// a GPU (kernels/cuda/emu_test.go). Not a performance tool.
//
// A launch runs blocks one after another; the threads of a block are real
// threads (std::thread) with std::barrier for __syncthreads and __syncwarp,
// and an exchange buffer per warp for shuffles. __shared__ becomes `static`
// (safe because blocks run one at a time); dynamic shared memory is a
// per-block buffer. WMMA fragments hold the whole 16×16 tile in every lane
// and multiply in fp32; stores are done by lane 0 (the kernels __syncwarp
// before reading them). bf16 rounds to nearest even like the hardware.
// Compile with -ffp-contract=off so __fmul_rn & co. stay unfused.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
	unsigned x = 1, y = 1, z = 1;
};
struct uint4 {
	uint32_t x, y, z, w;
};
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
struct float2 {
	float x, y;
};

struct EmuThread {
	dim3 tid;
	std::barrier<>* block_bar;
	std::barrier<>* warp_bar;
	uint64_t* warp_buf;  // 32 slots
	unsigned char* dyn;
	unsigned dyn_size;
};
inline thread_local EmuThread emu_t;
inline thread_local dim3 emu_block_idx;
inline dim3 emu_block_dim, emu_grid_dim;
#define threadIdx (emu_t.tid)
#define blockIdx (emu_block_idx)
#define blockDim (emu_block_dim)
#define gridDim (emu_grid_dim)

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define IC_DYNAMIC_SMEM(name) unsigned char* name = emu_t.dyn

static inline void __syncthreads() { emu_t.block_bar->arrive_and_wait(); }
static inline void __syncwarp() { emu_t.warp_bar->arrive_and_wait(); }
[[noreturn]] static inline void __trap() {
	std::fprintf(stderr, "emu: __trap\n");
	std::abort();
}
static inline unsigned emu_dynamic_smem_size() { return emu_t.dyn_size; }

template <class T>
static inline T __shfl_xor_sync(unsigned, T v, int o) {
	static_assert(sizeof(T) <= 8, "shuffle of a large type");
	const int lane = threadIdx.x & 31;
	uint64_t slot = 0;
	std::memcpy(&slot, &v, sizeof(T));
	emu_t.warp_buf[lane] = slot;
	__syncwarp();
	slot = emu_t.warp_buf[lane ^ o];
	__syncwarp();
	T r;
	std::memcpy(&r, &slot, sizeof(T));
	return r;
}

// integer min/max as in CUDA device code
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }

static inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
using std::isinf;
using std::isnan;

inline std::mutex emu_atomic_mu;
template <class T>
static inline T atomicAdd(T* p, T v) {
	std::lock_guard<std::mutex> g(emu_atomic_mu);
	T old = *p;
	*p = old + v;
	return old;
}
static inline int atomicExch(int* p, int v) {
	std::lock_guard<std::mutex> g(emu_atomic_mu);
	int old = *p;
	*p = v;
	return old;
}

// bf16
struct __nv_bfloat16 {
	uint16_t x;
};
struct __nv_bfloat162 {
	__nv_bfloat16 x, y;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
	uint32_t b;
	std::memcpy(&b, &f, 4);
	if ((b & 0x7fffffffu) > 0x7f800000u) return {uint16_t((b >> 16) | 0x40)};
	b += 0x7fffu + ((b >> 16) & 1u);
	return {uint16_t(b >> 16)};
}
static inline float __bfloat162float(__nv_bfloat16 h) {
	uint32_t b = uint32_t(h.x) << 16;
	float f;
	std::memcpy(&f, &b, 4);
	return f;
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
static inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {__bfloat162float(v.x), __bfloat162float(v.y)}; }

// WMMA, 16×16×16 only. Only lane 0 of a warp does fragment work: the kernels
// never read fragment elements, only store whole tiles, and stores come from
// lane 0; the other lanes' fragments are left untouched.
static inline bool emu_lane0() { return (threadIdx.x & 31) == 0; }
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
	float v[16][16];
};
template <class Use, class T, class L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const __nv_bfloat16* p, unsigned ld) {
	if (!emu_lane0()) return;
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			// element (i, j) of the operand: row-major at p[i·ld + j], column-major at p[j·ld + i]
			const bool col = std::is_same<L, col_major>::value;
			f.v[i][j] = __bfloat162float(col ? p[j * ld + i] : p[i * ld + j]);
		}
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ld, layout_t l) {
	if (!emu_lane0()) return;
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) f.v[i][j] = l == mem_row_major ? p[i * ld + j] : p[j * ld + i];
}
static inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ld, layout_t l) {
	if (!emu_lane0()) return;
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) (l == mem_row_major ? p[i * ld + j] : p[j * ld + i]) = f.v[i][j];
}
static inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float x) {
	if (!emu_lane0()) return;
	for (auto& r : f.v)
		for (auto& e : r) e = x;
}
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
		const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
	if (!emu_lane0()) return;
	float out[16][16];
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			float s = c.v[i][j];
			for (int k = 0; k < 16; k++) s += a.v[i][k] * b.v[k][j];
			out[i][j] = s;
		}
	std::memcpy(d.v, out, sizeof out);
}
}  // namespace wmma
}  // namespace nvcuda

// emu_launch_seq runs a kernel that has no barriers, shuffles or shared
// memory (element-wise kernels) in the calling thread, thread after thread.
static inline void emu_launch_seq(dim3 grid, dim3 block, const std::function<void()>& body) {
	emu_grid_dim = grid;
	emu_block_dim = block;
	const unsigned nt = block.x * block.y * block.z, nb = grid.x * grid.y * grid.z;
	for (unsigned b = 0; b < nb; b++) {
		emu_block_idx = {b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)};
		for (unsigned t = 0; t < nt; t++) {
			emu_t.tid = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
			emu_t.block_bar = nullptr;  // a barrier here would crash: the kernel is not barrier-free
			emu_t.warp_bar = nullptr;
			body();
		}
	}
}

// emu_launch runs body for every thread of every block of grid × block. One
// worker thread per thread of a block is created per launch; the workers run
// the blocks one after another (a barrier between blocks keeps `static`
// shared memory private to the running block). Each block gets fresh
// barriers, from which a thread drops out when it returns, as exited threads
// do on the device.
static inline void emu_launch(dim3 grid, dim3 block, unsigned smem, const std::function<void()>& body) {
	const unsigned nt = block.x * block.y * block.z;
	if (nt % 32 != 0 && nt != 1) {
		std::fprintf(stderr, "emu: block of %u threads (want a multiple of 32)\n", nt);
		std::abort();
	}
	emu_grid_dim = grid;
	emu_block_dim = block;
	const unsigned nb = grid.x * grid.y * grid.z, nw = (nt + 31) / 32;
	std::vector<unsigned char> dyn(smem + 128);
	unsigned char* dynp = dyn.data() + (128 - (reinterpret_cast<uintptr_t>(dyn.data()) & 127));
	std::memset(dynp, 0xcd, smem);  // garbage, as on the device
	std::barrier<> step(nt);
	std::vector<std::unique_ptr<std::barrier<>>> bbars, wbars;
	for (unsigned b = 0; b < nb; b++) {
		bbars.emplace_back(new std::barrier<>(nt));
		for (unsigned w = 0; w < nw; w++) wbars.emplace_back(new std::barrier<>(std::min(32u, nt - 32 * w)));
	}
	std::vector<uint64_t> wbuf(32 * nw);
	std::vector<std::thread> ts;
	for (unsigned t = 0; t < nt; t++)
		ts.emplace_back([&, t] {
			emu_t.tid = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
			emu_t.warp_buf = &wbuf[32 * (t / 32)];
			emu_t.dyn = dynp;
			emu_t.dyn_size = smem;
			for (unsigned b = 0; b < nb; b++) {
				emu_block_idx = {b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)};
				emu_t.block_bar = bbars[b].get();
				emu_t.warp_bar = wbars[b * nw + t / 32].get();
				body();
				emu_t.block_bar->arrive_and_drop();
				emu_t.warp_bar->arrive_and_drop();
				step.arrive_and_wait();
			}
		});
	for (auto& t : ts) t.join();
}
