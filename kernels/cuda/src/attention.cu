// attention.cu — causal grouped-query attention, flash style: the forward pass
// keeps only the log-sum-exp per query; the backward pass recomputes the
// probabilities tile by tile. Same layout and math as kernels.AttentionForward /
// AttentionBackward on the CPU:
//
//   qkv (B, T, (H+2·KV)·HD) bf16, one token row = [q: H×HD | k: KV×HD | v: KV×HD]
//   out (B, T, H·HD) bf16, lse (B, H, T) fp32 natural log, D (B, H, T) fp32
//
// Query head h reads key/value head h/(H/KV). Scores are scaled by 1/√HD.
// One thread owns one query row (forward, dq) or one key row (dk/dv); K/V or
// Q/dO tiles of TILE rows are staged in shared memory and read by broadcast.
// Scores run in base 2 (exp2f) with log2(e) folded into the scale.
#include "common.cuh"

#define TILE 64
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

template <int HD>
static __device__ __forceinline__ void load_row_f32(float* dst, const bf16* src) {
	const __nv_bfloat162* s2 = reinterpret_cast<const __nv_bfloat162*>(src);
#pragma unroll
	for (int d = 0; d < HD / 2; d++) {
		float2 f = __bfloat1622float2(s2[d]);
		dst[2 * d] = f.x;
		dst[2 * d + 1] = f.y;
	}
}

template <int HD>
static __device__ __forceinline__ float dot_row(const float* a, const bf16* b) {
	const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(b);
	float s = 0.f;
#pragma unroll
	for (int d = 0; d < HD / 2; d++) {
		float2 f = __bfloat1622float2(b2[d]);
		s = fmaf(a[2 * d], f.x, s);
		s = fmaf(a[2 * d + 1], f.y, s);
	}
	return s;
}

template <int HD>
static __device__ __forceinline__ void axpy_row(float* y, float a, const bf16* x) {
	const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(x);
#pragma unroll
	for (int d = 0; d < HD / 2; d++) {
		float2 f = __bfloat1622float2(x2[d]);
		y[2 * d] = fmaf(a, f.x, y[2 * d]);
		y[2 * d + 1] = fmaf(a, f.y, y[2 * d + 1]);
	}
}

// stage copies `rows` rows of HD bf16 (global row stride `stride` elements,
// starting at row r0 of at most rmax) into smem[TILE][HD], zero-filling past rmax.
template <int HD>
static __device__ __forceinline__ void stage(bf16* smem, const bf16* g, long long stride, int r0, int rmax) {
	constexpr int V = HD / 8;  // uint4 (8 bf16) per row
	for (int e = threadIdx.x; e < TILE * V; e += blockDim.x) {
		const int r = e / V, c = e % V;
		uint4 val = make_uint4(0, 0, 0, 0);
		if (r0 + r < rmax) val = reinterpret_cast<const uint4*>(g + (long long)(r0 + r) * stride)[c];
		reinterpret_cast<uint4*>(smem + r * HD)[c] = val;
	}
}

// Forward. grid (ceil(T/TILE), H, B), block TILE.
template <int HD>
static __device__ void attn_fwd(bf16* out, float* lse, const bf16* qkv, int T, int H, int KV) {
	__shared__ __align__(16) bf16 Ks[TILE * HD];
	__shared__ __align__(16) bf16 Vs[TILE * HD];
	const int b = blockIdx.z, h = blockIdx.y, kh = h / (H / KV);
	const int t = blockIdx.x * TILE + threadIdx.x;
	const long long W = (long long)(H + 2 * KV) * HD;
	const bf16* base = qkv + (long long)b * T * W;
	const float sc = rsqrtf((float)HD) * LOG2E;
	float q[HD], acc[HD];
	if (t < T) load_row_f32<HD>(q, base + t * W + h * HD);
#pragma unroll
	for (int d = 0; d < HD; d++) { q[d] *= sc; acc[d] = 0.f; }
	float m = -INFINITY, l = 0.f;
	for (int kt = 0; kt <= (int)blockIdx.x; kt++) {
		__syncthreads();
		stage<HD>(Ks, base + (H + kh) * HD, W, kt * TILE, T);
		stage<HD>(Vs, base + (H + KV + kh) * HD, W, kt * TILE, T);
		__syncthreads();
		if (t >= T) continue;
		const int jmax = min(TILE, t - kt * TILE + 1);  // causal: keys ≤ t
		float s[TILE];
		float tm = m;
#pragma unroll 8
		for (int j = 0; j < TILE; j++) {
			s[j] = j < jmax ? dot_row<HD>(q, Ks + j * HD) : -INFINITY;
			tm = fmaxf(tm, s[j]);
		}
		const float corr = exp2f(m - tm);  // m = −∞ on the first tile: corr = 0
		l *= corr;
#pragma unroll
		for (int d = 0; d < HD; d++) acc[d] *= corr;
		m = tm;
#pragma unroll 4
		for (int j = 0; j < jmax; j++) {
			const float p = exp2f(s[j] - m);
			l += p;
			axpy_row<HD>(acc, p, Vs + j * HD);
		}
	}
	if (t >= T) return;
	const float inv = 1.f / l;
	__nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(out + ((long long)b * T + t) * H * HD + h * HD);
#pragma unroll
	for (int d = 0; d < HD / 2; d++) o2[d] = __floats2bfloat162_rn(acc[2 * d] * inv, acc[2 * d + 1] * inv);
	lse[((long long)b * H + h) * T + t] = (m + log2f(l)) * LN2;
}

// attn_bwd_d: D[b,h,t] = Σ_d dout·out (grid-stride over B·T·H rows).
KERNEL void attn_bwd_d(float* D, const bf16* dout, const bf16* out, int B, int T, int H, int HD) {
	for (long long idx = gtid(); idx < (long long)B * T * H; idx += gstride()) {
		const int h = idx % H;
		const long long n = idx / H;  // token b·T + t
		const bf16* a = dout + n * H * HD + (long long)h * HD;
		const bf16* o = out + n * H * HD + (long long)h * HD;
		float s = 0.f;
		for (int d = 0; d < HD; d++) s += __bfloat162float(a[d]) * __bfloat162float(o[d]);
		const long long b = n / T, t = n % T;
		D[(b * H + h) * T + t] = s;
	}
}

// dq. grid (ceil(T/TILE), H, B), block TILE. Writes the q part of dqkv.
template <int HD>
static __device__ void attn_bwd_dq(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* D, int T, int H, int KV) {
	__shared__ __align__(16) bf16 Ks[TILE * HD];
	__shared__ __align__(16) bf16 Vs[TILE * HD];
	const int b = blockIdx.z, h = blockIdx.y, kh = h / (H / KV);
	const int t = blockIdx.x * TILE + threadIdx.x;
	const long long W = (long long)(H + 2 * KV) * HD;
	const bf16* base = qkv + (long long)b * T * W;
	const float sc = rsqrtf((float)HD);
	float q[HD], dO[HD], dq[HD];
	float l2 = 0.f, Dt = 0.f;
	if (t < T) {
		load_row_f32<HD>(q, base + t * W + h * HD);
		load_row_f32<HD>(dO, dout + ((long long)b * T + t) * H * HD + h * HD);
		l2 = lse[((long long)b * H + h) * T + t] * LOG2E;
		Dt = D[((long long)b * H + h) * T + t];
	}
#pragma unroll
	for (int d = 0; d < HD; d++) { q[d] *= sc * LOG2E; dq[d] = 0.f; }
	for (int kt = 0; kt <= (int)blockIdx.x; kt++) {
		__syncthreads();
		stage<HD>(Ks, base + (H + kh) * HD, W, kt * TILE, T);
		stage<HD>(Vs, base + (H + KV + kh) * HD, W, kt * TILE, T);
		__syncthreads();
		if (t >= T) continue;
		const int jmax = min(TILE, t - kt * TILE + 1);
		for (int j = 0; j < jmax; j++) {
			const float p = exp2f(dot_row<HD>(q, Ks + j * HD) - l2);
			const float dp = dot_row<HD>(dO, Vs + j * HD);
			axpy_row<HD>(dq, p * (dp - Dt), Ks + j * HD);
		}
	}
	if (t >= T) return;
	__nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(dqkv + ((long long)b * T + t) * W + h * HD);
#pragma unroll
	for (int d = 0; d < HD / 2; d++) o2[d] = __floats2bfloat162_rn(dq[2 * d] * sc, dq[2 * d + 1] * sc);
}

// dk, dv. grid (ceil(T/TILE), KV, B), block TILE: a thread owns key row s of
// kv head kh and sums over the H/KV query heads of its group and every query
// t ≥ s. Writes the k and v parts of dqkv.
template <int HD>
static __device__ void attn_bwd_dkdv(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* D, int T, int H, int KV) {
	__shared__ __align__(16) bf16 Qs[TILE * HD];
	__shared__ __align__(16) bf16 Os[TILE * HD];
	__shared__ float Ls[TILE], Ds[TILE];
	const int b = blockIdx.z, kh = blockIdx.y, grp = H / KV;
	const int s = blockIdx.x * TILE + threadIdx.x;
	const long long W = (long long)(H + 2 * KV) * HD;
	const bf16* base = qkv + (long long)b * T * W;
	const float sc = rsqrtf((float)HD);
	float k[HD], v[HD], dk[HD], dv[HD];
	if (s < T) {
		load_row_f32<HD>(k, base + s * W + (H + kh) * HD);
		load_row_f32<HD>(v, base + s * W + (H + KV + kh) * HD);
	}
#pragma unroll
	for (int d = 0; d < HD; d++) { k[d] *= sc * LOG2E; dk[d] = 0.f; dv[d] = 0.f; }
	const int ntiles = (T + TILE - 1) / TILE;
	for (int h = kh * grp; h < (kh + 1) * grp; h++) {
		for (int qt = blockIdx.x; qt < ntiles; qt++) {
			__syncthreads();
			stage<HD>(Qs, base + h * HD, W, qt * TILE, T);
			stage<HD>(Os, dout + (long long)b * T * H * HD + h * HD, (long long)H * HD, qt * TILE, T);
			for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
				const int t = qt * TILE + i;
				Ls[i] = t < T ? lse[((long long)b * H + h) * T + t] * LOG2E : 0.f;
				Ds[i] = t < T ? D[((long long)b * H + h) * T + t] : 0.f;
			}
			__syncthreads();
			if (s >= T) continue;
			const int i0 = max(0, s - qt * TILE);          // causal: queries t ≥ s
			const int i1 = min(TILE, T - qt * TILE);
			for (int i = i0; i < i1; i++) {
				const float p = exp2f(dot_row<HD>(k, Qs + i * HD) - Ls[i]);
				axpy_row<HD>(dv, p, Os + i * HD);
				const float dp = dot_row<HD>(v, Os + i * HD);
				axpy_row<HD>(dk, p * (dp - Ds[i]), Qs + i * HD);
			}
		}
	}
	if (s >= T) return;
	__nv_bfloat162* k2 = reinterpret_cast<__nv_bfloat162*>(dqkv + ((long long)b * T + s) * W + (H + kh) * HD);
	__nv_bfloat162* v2 = reinterpret_cast<__nv_bfloat162*>(dqkv + ((long long)b * T + s) * W + (H + KV + kh) * HD);
#pragma unroll
	for (int d = 0; d < HD / 2; d++) {
		k2[d] = __floats2bfloat162_rn(dk[2 * d] * sc, dk[2 * d + 1] * sc);
		v2[d] = __floats2bfloat162_rn(dv[2 * d], dv[2 * d + 1]);
	}
}

#define ATTN_INSTANCES(HD)                                                                                  \
	KERNEL void attn_fwd_hd##HD(bf16* out, float* lse, const bf16* qkv, int T, int H, int KV) {            \
		attn_fwd<HD>(out, lse, qkv, T, H, KV);                                                               \
	}                                                                                                       \
	KERNEL void attn_bwd_dq_hd##HD(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse,       \
			const float* D, int T, int H, int KV) {                                                        \
		attn_bwd_dq<HD>(dqkv, qkv, dout, lse, D, T, H, KV);                                                  \
	}                                                                                                       \
	KERNEL void attn_bwd_dkdv_hd##HD(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse,     \
			const float* D, int T, int H, int KV) {                                                        \
		attn_bwd_dkdv<HD>(dqkv, qkv, dout, lse, D, T, H, KV);                                                \
	}

ATTN_INSTANCES(32)
ATTN_INSTANCES(64)
ATTN_INSTANCES(128)
