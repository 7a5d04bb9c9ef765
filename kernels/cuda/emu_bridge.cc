//go:build cudaemu

// emu_bridge.cc — the emulated device behind `-tags cudaemu` (emudevice.go):
// host memory stands in for device memory, kernels run under emu/emu.h by
// name, and a plain column-major GEMM stands in for cuBLAS GemmEx.
// No fused multiply-adds (the kernels' __fmul_rn & co. must stay separate);
// x86-64's baseline has no FMA anyway.
#pragma GCC optimize("fp-contract=off")
#include "src/kernels.cu"

#include <string>
#include <unordered_map>

typedef unsigned long long u64;

static float bits2f(u64 v) {
	uint32_t b = (uint32_t)v;
	float f;
	std::memcpy(&f, &b, 4);
	return f;
}

#define PT(T, i) reinterpret_cast<T>(a[i])
#define IN(i) ((int)(int32_t)(uint32_t)a[i])
#define LL(i) ((long long)a[i])
#define FL(i) bits2f(a[i])

typedef std::function<void(const u64*)> Call;

static std::unordered_map<std::string, std::function<void(const u64*)>> table() {
	std::unordered_map<std::string, std::function<void(const u64*)>> t;
	t["cast_f32_bf16"] = [](const u64* a) { cast_f32_bf16(PT(bf16*, 0), PT(const float*, 1), LL(2)); };
	t["cast_bf16_f32"] = [](const u64* a) { cast_bf16_f32(PT(float*, 0), PT(const bf16*, 1), LL(2)); };
	t["embed_forward"] = [](const u64* a) { embed_forward(PT(float*, 0), PT(const int*, 1), PT(const float*, 2), IN(3), IN(4)); };
	t["embed_backward"] = [](const u64* a) { embed_backward(PT(float*, 0), PT(const int*, 1), PT(const float*, 2), IN(3), IN(4)); };
	t["swiglu_forward"] = [](const u64* a) { swiglu_forward(PT(bf16*, 0), PT(const bf16*, 1), IN(2), IN(3)); };
	t["swiglu_backward"] = [](const u64* a) { swiglu_backward(PT(bf16*, 0), PT(const bf16*, 1), PT(const bf16*, 2), IN(3), IN(4)); };
	t["rope"] = [](const u64* a) {
		rope(PT(bf16*, 0), PT(const float*, 1), PT(const float*, 2), IN(3), IN(4), IN(5), IN(6), IN(7), FL(8));
	};
	t["adamw"] = [](const u64* a) {
		adamw(PT(float*, 0), PT(bf16*, 1), PT(const float*, 2), PT(float*, 3), PT(float*, 4), LL(5), FL(6), FL(7), FL(8), FL(9),
			FL(10), FL(11), FL(12), FL(13), FL(14), FL(15));
	};
	t["muon_momentum"] = [](const u64* a) { muon_momentum(PT(float*, 0), PT(float*, 1), PT(const float*, 2), LL(3), FL(4), FL(5)); };
	t["muon_normalize"] = [](const u64* a) { muon_normalize(PT(float*, 0), LL(1), PT(const double*, 2)); };
	t["muon_update"] = [](const u64* a) {
		muon_update(PT(float*, 0), PT(bf16*, 1), PT(const float*, 2), LL(3), FL(4), FL(5), FL(6));
	};
	t["sumsq_partial"] = [](const u64* a) { sumsq_partial(PT(double*, 0), PT(const float*, 1), LL(2)); };
	t["sum_f64"] = [](const u64* a) { sum_f64(PT(double*, 0), PT(const double*, 1), IN(2)); };
	t["scale_f32"] = [](const u64* a) { scale_f32(PT(float*, 0), LL(1), FL(2)); };
	t["rmsnorm_forward"] = [](const u64* a) {
		rmsnorm_forward(PT(bf16*, 0), PT(float*, 1), PT(const float*, 2), PT(const float*, 3), IN(4), IN(5), FL(6));
	};
	t["rmsnorm_backward_dx"] = [](const u64* a) {
		rmsnorm_backward_dx(PT(float*, 0), PT(const bf16*, 1), PT(const float*, 2), PT(const float*, 3), PT(const float*, 4), IN(5), IN(6));
	};
	t["rmsnorm_backward_dw"] = [](const u64* a) {
		rmsnorm_backward_dw(PT(float*, 0), PT(const bf16*, 1), PT(const float*, 2), PT(const float*, 3), IN(4), IN(5), IN(6));
	};
	t["xent"] = [](const u64* a) {
		xent(PT(bf16*, 0), PT(float*, 1), PT(float*, 2), PT(const float*, 3), PT(const int*, 4), IN(5), IN(6), FL(7), FL(8));
	};
	t["sum_f32"] = [](const u64* a) { sum_f32(PT(double*, 0), PT(const float*, 1), IN(2)); };
	t["attn_bwd_d"] = [](const u64* a) { attn_bwd_d(PT(float*, 0), PT(const bf16*, 1), PT(const bf16*, 2), IN(3), IN(4), IN(5), IN(6)); };
	t["quant_int8"] = [](const u64* a) { quant_int8(PT(uint8_t*, 0), PT(float*, 1), PT(int*, 2), PT(const float*, 3), LL(4), IN(5)); };
	t["dequant_int8"] = [](const u64* a) { dequant_int8(PT(float*, 0), PT(const uint8_t*, 1), PT(const float*, 2), LL(3), IN(4), IN(5)); };
#define ATTN(HD)                                                                                                            \
	t["attn_fwd_hd" #HD] = [](const u64* a) { attn_fwd_hd##HD(PT(bf16*, 0), PT(float*, 1), PT(const bf16*, 2), IN(3), IN(4), IN(5)); }; \
	t["attn_fwd_tc_hd" #HD] = [](const u64* a) { attn_fwd_tc_hd##HD(PT(bf16*, 0), PT(float*, 1), PT(const bf16*, 2), IN(3), IN(4), IN(5)); }; \
	t["attn_bwd_dq_hd" #HD] = [](const u64* a) {                                                                            \
		attn_bwd_dq_hd##HD(PT(bf16*, 0), PT(const bf16*, 1), PT(const bf16*, 2), PT(const float*, 3), PT(const float*, 4), IN(5), IN(6), IN(7)); \
	};                                                                                                                      \
	t["attn_bwd_dkdv_hd" #HD] = [](const u64* a) {                                                                          \
		attn_bwd_dkdv_hd##HD(PT(bf16*, 0), PT(const bf16*, 1), PT(const bf16*, 2), PT(const float*, 3), PT(const float*, 4), IN(5), IN(6), IN(7)); \
	};                                                                                                                      \
	t["attn_bwd_dq_tc_hd" #HD] = [](const u64* a) {                                                                         \
		attn_bwd_dq_tc_hd##HD(PT(bf16*, 0), PT(const bf16*, 1), PT(const bf16*, 2), PT(const float*, 3), PT(const float*, 4), IN(5), IN(6), IN(7)); \
	};                                                                                                                      \
	t["attn_bwd_dkdv_tc_hd" #HD] = [](const u64* a) {                                                                       \
		attn_bwd_dkdv_tc_hd##HD(PT(bf16*, 0), PT(const bf16*, 1), PT(const bf16*, 2), PT(const float*, 3), PT(const float*, 4), IN(5), IN(6), IN(7)); \
	};                                                                                                                      \
	t["attn_tc_smem_hd" #HD] = [](const u64* a) { attn_tc_smem_hd##HD(PT(int*, 0)); };
	ATTN(32)
	ATTN(64)
	ATTN(128)
	return t;
}

extern "C" int ic_emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned smem, const u64* args, int nargs) {
	static const auto t = table();
	auto it = t.find(name);
	if (it == t.end()) return 1;
	std::vector<u64> a(args, args + nargs);
	a.resize(16);
	auto call = it->second;
	// Kernels without barriers, shuffles or shared memory run thread after
	// thread in this thread: much faster than a thread per CUDA thread.
	static const std::unordered_map<std::string, bool> seq = {
		{"cast_f32_bf16", true}, {"cast_bf16_f32", true}, {"embed_forward", true}, {"embed_backward", true},
		{"swiglu_forward", true}, {"swiglu_backward", true}, {"rope", true}, {"adamw", true}, {"scale_f32", true},
		{"muon_momentum", true}, {"muon_normalize", true}, {"muon_update", true},
		{"rmsnorm_backward_dw", true}, {"attn_bwd_d", true}, {"dequant_int8", true}};
	if (seq.count(name)) {
		emu_launch_seq(dim3{gx, gy, gz}, dim3{bx, by, bz}, [&] { call(a.data()); });
	} else {
		emu_launch(dim3{gx, gy, gz}, dim3{bx, by, bz}, smem, [&] { call(a.data()); });
	}
	return 0;
}

static float ld(u64 p, int type, long long i) {
	if (type == 14) return __bfloat162float(reinterpret_cast<const bf16*>(p)[i]);
	return reinterpret_cast<const float*>(p)[i];
}

// ic_emu_gemm is cublasGemmEx (column-major, fp32 accumulation): C = α·op(A)·op(B) + β·C.
extern "C" void ic_emu_gemm(int transa, int transb, int m, int n, int k, float alpha, u64 A, int at, int lda, u64 B, int bt,
		int ldb, float beta, u64 C, int ct, int ldc) {
	std::vector<float> a((size_t)m * k), b((size_t)k * n);  // op(A) row-major m×k, op(B)ᵀ row-major n×k
	for (int i = 0; i < m; i++)
		for (int p = 0; p < k; p++) a[(size_t)i * k + p] = ld(A, at, transa ? (long long)i * lda + p : (long long)p * lda + i);
	for (int j = 0; j < n; j++)
		for (int p = 0; p < k; p++) b[(size_t)j * k + p] = ld(B, bt, transb ? (long long)p * ldb + j : (long long)j * ldb + p);
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float s = 0.f;
			const float* ar = &a[(size_t)i * k];
			const float* br = &b[(size_t)j * k];
			for (int p = 0; p < k; p++) s += ar[p] * br[p];
			const long long ci = (long long)j * ldc + i;
			float v = alpha * s;
			if (beta != 0.f) v += beta * ld(C, ct, ci);
			if (ct == 14) reinterpret_cast<bf16*>(C)[ci] = __float2bfloat16_rn(v);
			else reinterpret_cast<float*>(C)[ci] = v;
		}
}

extern "C" u64 ic_emu_alloc(u64 bytes) { return (u64)std::aligned_alloc(256, (bytes + 255) & ~255ull); }
extern "C" void ic_emu_free(u64 p) { std::free((void*)p); }
extern "C" void ic_emu_h2d(u64 dst, const void* src, u64 n) { std::memcpy((void*)dst, src, n); }
extern "C" void ic_emu_d2h(void* dst, u64 src, u64 n) { std::memcpy(dst, (const void*)src, n); }
extern "C" void ic_emu_d2d(u64 dst, u64 src, u64 n) { std::memmove((void*)dst, (const void*)src, n); }
extern "C" void ic_emu_zero(u64 dst, u64 n) { std::memset((void*)dst, 0, n); }
// ic_emu_fill writes 0xff bytes: NaN as fp32 and bf16, −1 as int32 — like the
// garbage of fresh device memory, but loud.
extern "C" void ic_emu_fill(u64 dst, u64 n) { std::memset((void*)dst, 0xff, n); }
