// attention_tc.cu — the same causal grouped-query attention as attention.cu,
// with the matrix products on tensor cores (WMMA, bf16 in, fp32 accumulate),
// FlashAttention-2 style. attention.cu's kernels are the reference twins these
// are tested against (kernels/cuda/device_test.go).
//
// Blocks of 128 threads = 4 warps; a block owns a tile of 64 query rows
// (forward, dq) or 64 key rows (dk/dv), each warp 16 of them. Score tiles are
// 16×64 per warp: computed with WMMA into shared memory, then two lanes per row
// apply mask/softmax in fp32 (exp2 with log2(e) folded into the scale) and
// write probabilities (or dS) back as bf16 for the next product. Running
// outputs/gradients live in shared memory in fp32 and are loaded into WMMA
// accumulators for each update. Shared memory exceeds 48 KB: the host raises
// the limit with cuFuncSetAttribute (AttnTCSmem in manifest.go gives the
// sizes; each kernel traps if launched with less).
#include "common.cuh"
#ifndef IC_EMU
#include <mma.h>
#endif

using namespace nvcuda;

#define TC_ROWS 64
#define TC_THREADS 128

template <int HD> struct TC {
	static constexpr int LDQ = HD + 8;      // bf16 row tiles (Q, K, V, dO)
	static constexpr int LDS = TC_ROWS + 4; // fp32 score scratch
	static constexpr int LDP = TC_ROWS + 8; // bf16 probabilities / dS
	static constexpr int LDO = HD + 4;      // fp32 accumulators
	static constexpr int TILEB = TC_ROWS * LDQ * 2;   // bytes of one bf16 row tile
	static constexpr int SBYTES = TC_ROWS * LDS * 4;
	static constexpr int PBYTES = TC_ROWS * LDP * 2;
	static constexpr int OBYTES = TC_ROWS * LDO * 4;
	static constexpr int FWD = 3 * TILEB + SBYTES + PBYTES + OBYTES;
	static constexpr int DQ = 4 * TILEB + SBYTES + PBYTES + OBYTES;
	static constexpr int DKDV = 4 * TILEB + SBYTES + 2 * PBYTES + 2 * OBYTES + 2 * TC_ROWS * 4;
};

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBt;  // Bᵀ from row-major rows
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

static __device__ __forceinline__ void need_smem(unsigned bytes) {
	unsigned dyn;
#ifdef IC_EMU
	dyn = emu_dynamic_smem_size();
#else
	asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
#endif
	if (dyn < bytes) __trap();
}

// stage_tc copies 64 rows of HD bf16 (global row stride `stride`) starting at
// row r0 (< rmax kept, the rest zero) into smem with leading dimension LDQ.
template <int HD>
static __device__ __forceinline__ void stage_tc(bf16* s, const bf16* g, long long stride, int r0, int rmax) {
	constexpr int V = HD / 8;
	for (int e = threadIdx.x; e < TC_ROWS * V; e += blockDim.x) {
		const int r = e / V, c = e % V;
		uint4 val = make_uint4(0, 0, 0, 0);
		if (r0 + r < rmax) val = reinterpret_cast<const uint4*>(g + (long long)(r0 + r) * stride)[c];
		*reinterpret_cast<uint4*>(s + r * TC<HD>::LDQ + c * 8) = val;
	}
}

// rowsT: S (16×64, fp32, ld LDS) = A (16×HD, row tile) · B (64×HD, row tile)ᵀ.
template <int HD>
static __device__ __forceinline__ void mm_abt(float* S, const bf16* A, const bf16* B) {
#pragma unroll
	for (int nb = 0; nb < TC_ROWS / 16; nb++) {
		FragC acc;
		wmma::fill_fragment(acc, 0.f);
#pragma unroll
		for (int kb = 0; kb < HD / 16; kb++) {
			FragA a;
			FragBt b;
			wmma::load_matrix_sync(a, A + kb * 16, TC<HD>::LDQ);
			wmma::load_matrix_sync(b, B + nb * 16 * TC<HD>::LDQ + kb * 16, TC<HD>::LDQ);
			wmma::mma_sync(acc, a, b, acc);
		}
		wmma::store_matrix_sync(S + nb * 16, acc, TC<HD>::LDS, wmma::mem_row_major);
	}
}

// acc_pb: O (16×HD, fp32, ld LDO) += P (16×64 bf16, ld LDP) · B (64×HD row tile).
template <int HD>
static __device__ __forceinline__ void acc_pb(float* O, const bf16* P, const bf16* B) {
#pragma unroll
	for (int nb = 0; nb < HD / 16; nb++) {
		FragC acc;
		wmma::load_matrix_sync(acc, O + nb * 16, TC<HD>::LDO, wmma::mem_row_major);
#pragma unroll
		for (int kb = 0; kb < TC_ROWS / 16; kb++) {
			FragA a;
			FragB b;
			wmma::load_matrix_sync(a, P + kb * 16, TC<HD>::LDP);
			wmma::load_matrix_sync(b, B + kb * 16 * TC<HD>::LDQ + nb * 16, TC<HD>::LDQ);
			wmma::mma_sync(acc, a, b, acc);
		}
		wmma::store_matrix_sync(O + nb * 16, acc, TC<HD>::LDO, wmma::mem_row_major);
	}
}

template <int HD>
static __device__ __forceinline__ void zero_f32(float* p, int n) {
	for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = 0.f;
}

// Forward. grid (ceil(T/64), H, B), block 128, dynamic smem TC<HD>::FWD.
template <int HD>
static __device__ void attn_fwd_tc(bf16* out, float* lse, const bf16* qkv, int T, int H, int KV) {
	IC_DYNAMIC_SMEM(smem);
	need_smem(TC<HD>::FWD);
	bf16* Qs = reinterpret_cast<bf16*>(smem);
	bf16* Ks = reinterpret_cast<bf16*>(smem + TC<HD>::TILEB);
	bf16* Vs = reinterpret_cast<bf16*>(smem + 2 * TC<HD>::TILEB);
	float* Ss = reinterpret_cast<float*>(smem + 3 * TC<HD>::TILEB);
	bf16* Ps = reinterpret_cast<bf16*>(smem + 3 * TC<HD>::TILEB + TC<HD>::SBYTES);
	float* Os = reinterpret_cast<float*>(smem + 3 * TC<HD>::TILEB + TC<HD>::SBYTES + TC<HD>::PBYTES);
	const int b = blockIdx.z, h = blockIdx.y, kh = h / (H / KV);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int r = lane >> 1, c0 = (lane & 1) * 32;  // this lane's row of the warp's 16, and column half
	const int q0 = blockIdx.x * TC_ROWS, qrow = q0 + warp * 16 + r;
	const long long W = (long long)(H + 2 * KV) * HD;
	const bf16* base = qkv + (long long)b * T * W;
	const float sc = rsqrtf((float)HD) * 1.4426950408889634f;
	stage_tc<HD>(Qs, base + h * HD, W, q0, T);
	zero_f32<HD>(Os, TC_ROWS * TC<HD>::LDO);
	float* Sw = Ss + warp * 16 * TC<HD>::LDS;
	bf16* Pw = Ps + warp * 16 * TC<HD>::LDP;
	float* Ow = Os + warp * 16 * TC<HD>::LDO;
	float m = -INFINITY, l = 0.f;
	for (int kt = 0; kt <= (int)blockIdx.x; kt++) {
		__syncthreads();
		stage_tc<HD>(Ks, base + (H + kh) * HD, W, kt * TC_ROWS, T);
		stage_tc<HD>(Vs, base + (H + KV + kh) * HD, W, kt * TC_ROWS, T);
		__syncthreads();
		mm_abt<HD>(Sw, Qs + warp * 16 * TC<HD>::LDQ, Ks);
		__syncwarp();
		float* srow = Sw + r * TC<HD>::LDS;
		float mx = -INFINITY;
#pragma unroll 8
		for (int c = 0; c < 32; c++) {
			const int key = kt * TC_ROWS + c0 + c;
			const float s = key <= qrow ? srow[c0 + c] * sc : -INFINITY;
			srow[c0 + c] = s;
			mx = fmaxf(mx, s);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		const float mn = fmaxf(m, mx);
		const float corr = exp2f(m - mn);  // 0 on the first tile (m = −∞)
		float sum = 0.f;
#pragma unroll 8
		for (int c = 0; c < 32; c++) {
			const float p = exp2f(srow[c0 + c] - mn);
			Pw[r * TC<HD>::LDP + c0 + c] = __float2bfloat16_rn(p);
			sum += p;
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		l = l * corr + sum;
		m = mn;
		for (int c = (lane & 1) * (HD / 2); c < (lane & 1 ? HD : HD / 2); c++) Ow[r * TC<HD>::LDO + c] *= corr;
		__syncwarp();
		acc_pb<HD>(Ow, Pw, Vs);
		__syncwarp();
	}
	if (qrow >= T) return;
	const float inv = 1.f / l;
	bf16* o = out + ((long long)b * T + qrow) * H * HD + h * HD;
	for (int c = (lane & 1) * (HD / 2); c < (lane & 1 ? HD : HD / 2); c++) o[c] = __float2bfloat16_rn(Ow[r * TC<HD>::LDO + c] * inv);
	if ((lane & 1) == 0) lse[((long long)b * H + h) * T + qrow] = (m + log2f(l)) * 0.6931471805599453f;
}

// dq. grid (ceil(T/64), H, B), block 128, dynamic smem TC<HD>::DQ. Writes the
// q part of dqkv. D = rowsum(dO∘O) from attn_bwd_d.
template <int HD>
static __device__ void attn_bwd_dq_tc(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* D, int T, int H, int KV) {
	IC_DYNAMIC_SMEM(smem);
	need_smem(TC<HD>::DQ);
	bf16* Qs = reinterpret_cast<bf16*>(smem);
	bf16* Os = reinterpret_cast<bf16*>(smem + TC<HD>::TILEB);  // dO
	bf16* Ks = reinterpret_cast<bf16*>(smem + 2 * TC<HD>::TILEB);
	bf16* Vs = reinterpret_cast<bf16*>(smem + 3 * TC<HD>::TILEB);
	float* Ss = reinterpret_cast<float*>(smem + 4 * TC<HD>::TILEB);
	bf16* Ps = reinterpret_cast<bf16*>(smem + 4 * TC<HD>::TILEB + TC<HD>::SBYTES);
	float* Gs = reinterpret_cast<float*>(smem + 4 * TC<HD>::TILEB + TC<HD>::SBYTES + TC<HD>::PBYTES);
	const int b = blockIdx.z, h = blockIdx.y, kh = h / (H / KV);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int r = lane >> 1, c0 = (lane & 1) * 32;
	const int q0 = blockIdx.x * TC_ROWS, qrow = q0 + warp * 16 + r;
	const long long W = (long long)(H + 2 * KV) * HD;
	const bf16* base = qkv + (long long)b * T * W;
	const float sc = rsqrtf((float)HD) * 1.4426950408889634f;
	stage_tc<HD>(Qs, base + h * HD, W, q0, T);
	stage_tc<HD>(Os, dout + (long long)b * T * H * HD + h * HD, (long long)H * HD, q0, T);
	zero_f32<HD>(Gs, TC_ROWS * TC<HD>::LDO);
	const float l2 = qrow < T ? lse[((long long)b * H + h) * T + qrow] * 1.4426950408889634f : 0.f;
	const float Dq = qrow < T ? D[((long long)b * H + h) * T + qrow] : 0.f;
	float* Sw = Ss + warp * 16 * TC<HD>::LDS;
	bf16* Pw = Ps + warp * 16 * TC<HD>::LDP;
	float* Gw = Gs + warp * 16 * TC<HD>::LDO;
	float p[32];
	for (int kt = 0; kt <= (int)blockIdx.x; kt++) {
		__syncthreads();
		stage_tc<HD>(Ks, base + (H + kh) * HD, W, kt * TC_ROWS, T);
		stage_tc<HD>(Vs, base + (H + KV + kh) * HD, W, kt * TC_ROWS, T);
		__syncthreads();
		mm_abt<HD>(Sw, Qs + warp * 16 * TC<HD>::LDQ, Ks);
		__syncwarp();
		float* srow = Sw + r * TC<HD>::LDS;
#pragma unroll
		for (int c = 0; c < 32; c++) {
			const int key = kt * TC_ROWS + c0 + c;
			p[c] = (key <= qrow && qrow < T) ? exp2f(srow[c0 + c] * sc - l2) : 0.f;
		}
		__syncwarp();
		mm_abt<HD>(Sw, Os + warp * 16 * TC<HD>::LDQ, Vs);  // dP = dO·Vᵀ
		__syncwarp();
#pragma unroll
		for (int c = 0; c < 32; c++) Pw[r * TC<HD>::LDP + c0 + c] = __float2bfloat16_rn(p[c] * (srow[c0 + c] - Dq));
		__syncwarp();
		acc_pb<HD>(Gw, Pw, Ks);  // dQ += dS·K
		__syncwarp();
	}
	if (qrow >= T) return;
	const float s = rsqrtf((float)HD);
	bf16* dq = dqkv + ((long long)b * T + qrow) * W + h * HD;
	for (int c = (lane & 1) * (HD / 2); c < (lane & 1 ? HD : HD / 2); c++) dq[c] = __float2bfloat16_rn(Gw[r * TC<HD>::LDO + c] * s);
}

// dk, dv. grid (ceil(T/64), KV, B), block 128, dynamic smem TC<HD>::DKDV: a
// block owns 64 keys of kv head kh and sums over the H/KV query heads of its
// group and every query tile at or after its own. Writes the k and v parts of dqkv.
template <int HD>
static __device__ void attn_bwd_dkdv_tc(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* D, int T, int H, int KV) {
	IC_DYNAMIC_SMEM(smem);
	need_smem(TC<HD>::DKDV);
	bf16* Ks = reinterpret_cast<bf16*>(smem);
	bf16* Vs = reinterpret_cast<bf16*>(smem + TC<HD>::TILEB);
	bf16* Qs = reinterpret_cast<bf16*>(smem + 2 * TC<HD>::TILEB);
	bf16* Os = reinterpret_cast<bf16*>(smem + 3 * TC<HD>::TILEB);  // dO
	unsigned char* rest = smem + 4 * TC<HD>::TILEB;
	float* Ss = reinterpret_cast<float*>(rest);
	bf16* Ps = reinterpret_cast<bf16*>(rest + TC<HD>::SBYTES);
	bf16* DSs = reinterpret_cast<bf16*>(rest + TC<HD>::SBYTES + TC<HD>::PBYTES);
	float* dKs = reinterpret_cast<float*>(rest + TC<HD>::SBYTES + 2 * TC<HD>::PBYTES);
	float* dVs = reinterpret_cast<float*>(rest + TC<HD>::SBYTES + 2 * TC<HD>::PBYTES + TC<HD>::OBYTES);
	float* Ls = reinterpret_cast<float*>(rest + TC<HD>::SBYTES + 2 * TC<HD>::PBYTES + 2 * TC<HD>::OBYTES);
	float* Dsm = Ls + TC_ROWS;
	const int b = blockIdx.z, kh = blockIdx.y, grp = H / KV;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int r = lane >> 1, c0 = (lane & 1) * 32;
	const int k0 = blockIdx.x * TC_ROWS, krow = k0 + warp * 16 + r;
	const long long W = (long long)(H + 2 * KV) * HD;
	const bf16* base = qkv + (long long)b * T * W;
	const float sc = rsqrtf((float)HD) * 1.4426950408889634f;
	stage_tc<HD>(Ks, base + (H + kh) * HD, W, k0, T);
	stage_tc<HD>(Vs, base + (H + KV + kh) * HD, W, k0, T);
	zero_f32<HD>(dKs, TC_ROWS * TC<HD>::LDO);
	zero_f32<HD>(dVs, TC_ROWS * TC<HD>::LDO);
	float* Sw = Ss + warp * 16 * TC<HD>::LDS;
	bf16* Pw = Ps + warp * 16 * TC<HD>::LDP;
	bf16* DSw = DSs + warp * 16 * TC<HD>::LDP;
	float* dKw = dKs + warp * 16 * TC<HD>::LDO;
	float* dVw = dVs + warp * 16 * TC<HD>::LDO;
	const int ntiles = (T + TC_ROWS - 1) / TC_ROWS;
	float p[32];
	for (int h = kh * grp; h < (kh + 1) * grp; h++) {
		for (int qt = blockIdx.x; qt < ntiles; qt++) {
			__syncthreads();
			stage_tc<HD>(Qs, base + h * HD, W, qt * TC_ROWS, T);
			stage_tc<HD>(Os, dout + (long long)b * T * H * HD + h * HD, (long long)H * HD, qt * TC_ROWS, T);
			for (int i = threadIdx.x; i < TC_ROWS; i += blockDim.x) {
				const int t = qt * TC_ROWS + i;
				Ls[i] = t < T ? lse[((long long)b * H + h) * T + t] * 1.4426950408889634f : 0.f;
				Dsm[i] = t < T ? D[((long long)b * H + h) * T + t] : 0.f;
			}
			__syncthreads();
			mm_abt<HD>(Sw, Ks + warp * 16 * TC<HD>::LDQ, Qs);  // Sᵀ = K·Qᵀ (16 keys × 64 queries)
			__syncwarp();
			float* srow = Sw + r * TC<HD>::LDS;
#pragma unroll
			for (int c = 0; c < 32; c++) {
				const int q = qt * TC_ROWS + c0 + c;
				p[c] = (q >= krow && q < T) ? exp2f(srow[c0 + c] * sc - Ls[c0 + c]) : 0.f;
				Pw[r * TC<HD>::LDP + c0 + c] = __float2bfloat16_rn(p[c]);
			}
			__syncwarp();
			mm_abt<HD>(Sw, Vs + warp * 16 * TC<HD>::LDQ, Os);  // dPᵀ = V·dOᵀ
			__syncwarp();
#pragma unroll
			for (int c = 0; c < 32; c++) DSw[r * TC<HD>::LDP + c0 + c] = __float2bfloat16_rn(p[c] * (srow[c0 + c] - Dsm[c0 + c]));
			__syncwarp();
			acc_pb<HD>(dVw, Pw, Os);   // dV += Pᵀ·dO
			acc_pb<HD>(dKw, DSw, Qs);  // dK += dSᵀ·Q
			__syncwarp();
		}
	}
	if (krow >= T) return;
	const float s = rsqrtf((float)HD);
	bf16* dk = dqkv + ((long long)b * T + krow) * W + (H + kh) * HD;
	bf16* dv = dqkv + ((long long)b * T + krow) * W + (H + KV + kh) * HD;
	for (int c = (lane & 1) * (HD / 2); c < (lane & 1 ? HD : HD / 2); c++) {
		dk[c] = __float2bfloat16_rn(dKw[r * TC<HD>::LDO + c] * s);
		dv[c] = __float2bfloat16_rn(dVw[r * TC<HD>::LDO + c]);
	}
}

#define ATTN_TC_INSTANCES(HD)                                                                               \
	KERNEL void attn_fwd_tc_hd##HD(bf16* out, float* lse, const bf16* qkv, int T, int H, int KV) {         \
		attn_fwd_tc<HD>(out, lse, qkv, T, H, KV);                                                            \
	}                                                                                                       \
	KERNEL void attn_bwd_dq_tc_hd##HD(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse,    \
			const float* D, int T, int H, int KV) {                                                        \
		attn_bwd_dq_tc<HD>(dqkv, qkv, dout, lse, D, T, H, KV);                                               \
	}                                                                                                       \
	KERNEL void attn_bwd_dkdv_tc_hd##HD(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse,  \
			const float* D, int T, int H, int KV) {                                                        \
		attn_bwd_dkdv_tc<HD>(dqkv, qkv, dout, lse, D, T, H, KV);                                             \
	}                                                                                                       \
	KERNEL void attn_tc_smem_hd##HD(int* out) {                                                             \
		out[0] = TC<HD>::FWD;                                                                                \
		out[1] = TC<HD>::DQ;                                                                                 \
		out[2] = TC<HD>::DKDV;                                                                               \
	}

ATTN_TC_INSTANCES(32)
ATTN_TC_INSTANCES(64)
ATTN_TC_INSTANCES(128)
