// elementwise.cu — casts, embedding, SwiGLU, RoPE, AdamW, Muon's element-wise
// steps, norms of vectors.
#include "common.cuh"

// cast_f32_bf16: out[i] = bf16(in[i]), round to nearest even.
KERNEL void cast_f32_bf16(bf16* out, const float* in, long long n) {
	for (long long i = gtid(); i < n; i += gstride()) out[i] = __float2bfloat16_rn(in[i]);
}

// cast_bf16_f32: out[i] = float(in[i]).
KERNEL void cast_bf16_f32(float* out, const bf16* in, long long n) {
	for (long long i = gtid(); i < n; i += gstride()) out[i] = __bfloat162float(in[i]);
}

// embed_forward: out (N, C) fp32 = wte[tok[n]] rows of the fp32 master table (V, C).
// grid (N), block 256.
KERNEL void embed_forward(float* out, const int* tok, const float* wte, int N, int C) {
	const int n = blockIdx.x;
	const float* row = wte + (long long)tok[n] * C;
	for (int i = threadIdx.x; i < C; i += blockDim.x) out[(long long)n * C + i] = row[i];
}

// embed_backward: dwte[tok[n]] += dout[n] for every row n; atomics because
// tokens repeat. grid (N), block 256.
KERNEL void embed_backward(float* dwte, const int* tok, const float* dout, int N, int C) {
	const int n = blockIdx.x;
	float* row = dwte + (long long)tok[n] * C;
	for (int i = threadIdx.x; i < C; i += blockDim.x) atomicAdd(row + i, dout[(long long)n * C + i]);
}

// swiglu_forward: out (N, F) = silu(gate)·up, gu (N, 2F) = [gate | up] per row.
KERNEL void swiglu_forward(bf16* out, const bf16* gu, int N, int F) {
	const long long total = (long long)N * F;
	for (long long idx = gtid(); idx < total; idx += gstride()) {
		const long long n = idx / F, i = idx % F;
		const float g = __bfloat162float(gu[n * 2 * F + i]);
		const float u = __bfloat162float(gu[n * 2 * F + F + i]);
		const float s = 1.f / (1.f + expf(-g));
		out[idx] = __float2bfloat16_rn(g * s * u);
	}
}

// swiglu_backward: dgu (N, 2F) overwritten from dout (N, F) and gu.
KERNEL void swiglu_backward(bf16* dgu, const bf16* dout, const bf16* gu, int N, int F) {
	const long long total = (long long)N * F;
	for (long long idx = gtid(); idx < total; idx += gstride()) {
		const long long n = idx / F, i = idx % F;
		const float g = __bfloat162float(gu[n * 2 * F + i]);
		const float u = __bfloat162float(gu[n * 2 * F + F + i]);
		const float dy = __bfloat162float(dout[idx]);
		const float s = 1.f / (1.f + expf(-g));
		dgu[n * 2 * F + F + i] = __float2bfloat16_rn(dy * g * s);
		dgu[n * 2 * F + i] = __float2bfloat16_rn(dy * u * s * (1.f + g * (1.f - s)));
	}
}

// rope: rotates in place the first nh heads (size hd) of each row of x
// (row n = token (b, t), t = n % T, row stride `stride` elements), HF
// rotate_half convention; sign = +1 forward, −1 backward (transpose).
// cos, sin (T, hd/2) fp32.
KERNEL void rope(bf16* x, const float* cosT, const float* sinT, int N, int T, int nh, int hd, int stride, float sign) {
	const int half = hd / 2;
	const long long total = (long long)N * nh * half;
	for (long long idx = gtid(); idx < total; idx += gstride()) {
		const int i = idx % half;
		const long long rest = idx / half;
		const int h = rest % nh;
		const long long n = rest / nh;
		const int t = n % T;
		const float c = cosT[t * half + i], s = sign * sinT[t * half + i];
		bf16* p = x + n * stride + (long long)h * hd;
		const float a = __bfloat162float(p[i]), b = __bfloat162float(p[i + half]);
		p[i] = __float2bfloat16_rn(a * c - b * s);
		p[i + half] = __float2bfloat16_rn(b * c + a * s);
	}
}

// adamw: one decoupled-weight-decay Adam step on n fp32 master weights with
// the exact float32 operations, in the same order and without fused
// multiply-adds, of kernels.AdamW on the CPU (so both give the same bits from
// the same gradient), then refreshes the bf16 working copy pb. The host passes
// c1 = 1−β1, c2 = 1−β2 and ib1 = 1/(1−β1^step), ib2 = 1/(1−β2^step) as float32;
// gscale carries global-norm clipping.
KERNEL void adamw(float* p, bf16* pb, const float* g, float* m, float* v, long long n, float lr,
		float b1, float c1, float b2, float c2, float ib1, float ib2, float eps, float wd, float gscale) {
	for (long long i = gtid(); i < n; i += gstride()) {
		const float gi = __fmul_rn(g[i], gscale);
		const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(c1, gi));
		const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(c2, gi), gi));
		m[i] = mi;
		v[i] = vi;
		const float den = __fadd_rn(__fsqrt_rn(__fmul_rn(vi, ib2)), eps);
		const float upd = __fadd_rn(__fdiv_rn(__fmul_rn(mi, ib1), den), __fmul_rn(wd, p[i]));
		const float pi = __fsub_rn(p[i], __fmul_rn(lr, upd));
		p[i] = pi;
		pb[i] = __float2bfloat16_rn(pi);
	}
}

// The element-wise steps of Muon (train/muon.go) on one hidden matrix of n
// fp32 values, with the CPU trainer's float32 operations in its order and no
// fused multiply-adds; the Newton–Schulz products between them are cuBLAS
// fp32 GEMMs (train/gpu/muon.go).
//
// muon_momentum: gi = g·gscale, m ← μ·m + gi, u = gi + μ·m (Nesterov).
KERNEL void muon_momentum(float* u, float* m, const float* g, long long n, float mu, float gscale) {
	for (long long i = gtid(); i < n; i += gstride()) {
		const float gi = __fmul_rn(g[i], gscale);
		const float mi = __fadd_rn(__fmul_rn(mu, m[i]), gi);
		m[i] = mi;
		u[i] = __fadd_rn(gi, __fmul_rn(mu, mi));
	}
}

// MUON_NS_EPS is train's nsNormEps: X = u / (‖u‖_F + ε).
#define MUON_NS_EPS 1e-7

// muon_normalize: x[i] *= float(1 / (√ss + ε)), ss = Σ x² in double on the device
// (sumsq_partial + sum_f64), so the scale never leaves the GPU.
KERNEL void muon_normalize(float* x, long long n, const double* ss) {
	const float inv = (float)(1.0 / (sqrt(*ss) + MUON_NS_EPS));  // IEEE double ops, as Go's
	for (long long i = gtid(); i < n; i += gstride()) x[i] = __fmul_rn(x[i], inv);
}

// muon_update: p ← p − lr·(scale·o + wd·p), o the orthogonalized update,
// scale = 0.2·√max(rows, cols); then refreshes the bf16 working copy pb.
KERNEL void muon_update(float* p, bf16* pb, const float* o, long long n, float lr, float scale, float wd) {
	for (long long i = gtid(); i < n; i += gstride()) {
		const float upd = __fadd_rn(__fmul_rn(scale, o[i]), __fmul_rn(wd, p[i]));
		const float pi = __fsub_rn(p[i], __fmul_rn(lr, upd));
		p[i] = pi;
		pb[i] = __float2bfloat16_rn(pi);
	}
}

// sumsq_partial: partial[blockIdx.x] = Σ x[i]² over this block's grid-stride
// share, in double. With a fixed grid the result is deterministic (no atomics).
KERNEL void sumsq_partial(double* partial, const float* x, long long n) {
	double s = 0.0;
	for (long long i = gtid(); i < n; i += gstride()) s += (double)x[i] * (double)x[i];
	s = block_sum_d(s);
	if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// sum_f64: *out = Σ_{i<n} x[i] in a fixed order. One block.
KERNEL void sum_f64(double* out, const double* x, int n) {
	double s = 0.0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
	s = block_sum_d(s);
	if (threadIdx.x == 0) *out = s;
}

// scale_f32: x[i] *= a.
KERNEL void scale_f32(float* x, long long n, float a) {
	for (long long i = gtid(); i < n; i += gstride()) x[i] *= a;
}
