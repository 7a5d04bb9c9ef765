// norm.cu — RMSNorm forward and backward.
#include "common.cuh"

// rmsnorm_forward: out (N, C) bf16 = inp·rstd·w, rstd (N) = 1/sqrt(mean(inp²)+eps).
// inp (N, C) fp32 residual stream, w (C) fp32 master gain. grid (N), block 256.
KERNEL void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* w, int N, int C, float eps) {
	const long long n = blockIdx.x;
	const float* x = inp + n * C;
	float ss = 0.f;
	for (int i = threadIdx.x; i < C; i += blockDim.x) ss += x[i] * x[i];
	ss = block_sum(ss);
	const float r = rsqrtf(ss / C + eps);
	if (threadIdx.x == 0) rstd[n] = r;
	for (int i = threadIdx.x; i < C; i += blockDim.x) out[n * C + i] = __float2bfloat16_rn(x[i] * r * w[i]);
}

// rmsnorm_backward_dx: dinp (N, C) fp32 += r·w·dy − r³/C·x·Σ_j dy_j·w_j·x_j.
// dout (N, C) bf16. grid (N), block 256.
KERNEL void rmsnorm_backward_dx(float* dinp, const bf16* dout, const float* inp, const float* w, const float* rstd, int N, int C) {
	const long long n = blockIdx.x;
	const float* x = inp + n * C;
	const bf16* dy = dout + n * C;
	const float r = rstd[n];
	float s = 0.f;
	for (int i = threadIdx.x; i < C; i += blockDim.x) s += __bfloat162float(dy[i]) * w[i] * x[i];
	s = block_sum(s);
	const float k = r * r * r * s / C;
	for (int i = threadIdx.x; i < C; i += blockDim.x) dinp[n * C + i] += r * w[i] * __bfloat162float(dy[i]) - k * x[i];
}

// rmsnorm_backward_dw: dw (C) += Σ_n dy[n,i]·x[n,i]·r[n]. grid (ceil(C/256),
// ceil(N/rows)), block 256: a column per thread, `rows` rows per block, one
// atomic per (column, block).
KERNEL void rmsnorm_backward_dw(float* dw, const bf16* dout, const float* inp, const float* rstd, int N, int C, int rows) {
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C) return;
	const int n0 = blockIdx.y * rows, n1 = min(N, n0 + rows);
	float acc = 0.f;
	for (int n = n0; n < n1; n++) acc += __bfloat162float(dout[(long long)n * C + c]) * inp[(long long)n * C + c] * rstd[n];
	atomicAdd(dw + c, acc);
}
