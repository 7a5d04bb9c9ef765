// xent.cu — fused softmax cross-entropy + max-z-loss, forward and backward.
#include "common.cuh"

// xent: for row n of logits (N, V) fp32 with target tgt: loss = lse − x[tgt] +
// z·max², ce = lse − x[tgt]; when dlogits is not null it is written (bf16) with
// scale·(softmax − onehot(tgt) + 2·z·max·onehot(argmax)), the same definition
// as kernels.XEntForwardBackward. ce may be null. grid (N), block 1024.
KERNEL void xent(bf16* dlogits, float* losses, float* ce, const float* logits, const int* targets, int N, int V, float z, float scale) {
	const long long n = blockIdx.x;
	const float* row = logits + n * V;
	float mv = -INFINITY;
	int mi = 0x7fffffff;
	for (int i = threadIdx.x; i < V; i += blockDim.x) {
		const float v = row[i];
		if (v > mv) { mv = v; mi = i; }  // per-thread indices increase: first max kept
	}
	float maxv;
	int arg;
	block_argmax(mv, mi, &maxv, &arg);
	float s = 0.f;
	for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(row[i] - maxv);
	s = block_sum(s);
	const int tgt = targets[n];
	const float c = maxv + logf(s) - row[tgt];
	if (threadIdx.x == 0) {
		losses[n] = c + z * maxv * maxv;
		if (ce) ce[n] = c;
	}
	if (!dlogits) return;
	const float inv = 1.f / s;
	for (int i = threadIdx.x; i < V; i += blockDim.x) {
		float d = scale * expf(row[i] - maxv) * inv;
		if (i == tgt) d -= scale;
		if (i == arg) d += scale * 2.f * z * maxv;
		dlogits[n * V + i] = __float2bfloat16_rn(d);
	}
}

// sum_f32: *out += Σ x[i] in double (a loss total). Zero *out first.
KERNEL void sum_f32(double* out, const float* x, int n) {
	float s = 0.f;
	for (long long i = gtid(); i < n; i += gstride()) s += x[i];
	s = block_sum(s);
	if (threadIdx.x == 0) atomicAdd(out, (double)s);
}
