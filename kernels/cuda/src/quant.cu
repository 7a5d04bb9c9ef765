// quant.cu — the all-reduce's int8 codec (mesh.CodecInt8, "sqrt" buckets) on the GPU.
//
// Per chunk of `chunk` values: mean μ and R = max|x−μ| (pass 1, double sums as
// the CPU encoder); code = uint8(int32(sign(d)·sqrt(min(|d|,1))·127.5 + 128)),
// d = (x−μ)·(1/R) in float32 without fused multiply-adds (pass 2, the same
// arithmetic as mesh's sqrtCode); the 256-entry table holds the mean of the
// values of each bucket, or the bucket centre μ + R·y·|y| (y = (b−127.5)/127.5)
// when empty. A degenerate chunk (R = 0) codes every value as 0 with a table of
// μ. Decoding is a table lookup, so every member decodes the same bytes to the
// same floats whichever device encoded them.
#include "common.cuh"

// quant_int8: grid (nchunks), block 256. codes (n) u8, tables (nchunks, 256) f32,
// bad (1) int set to 1 when a chunk holds a NaN or ±Inf.
KERNEL void quant_int8(uint8_t* codes, float* tables, int* bad, const float* x, long long n, int chunk) {
	__shared__ double bsum[256];
	__shared__ unsigned int bcnt[256];
	__shared__ double red[256];
	__shared__ float redmin[256], redmax[256];
	const long long c0 = (long long)blockIdx.x * chunk;
	const long long c1 = min(n, c0 + chunk);
	const int tid = threadIdx.x;
	double s = 0.0;
	float lo = INFINITY, hi = -INFINITY;
	for (long long i = c0 + tid; i < c1; i += blockDim.x) {
		const float v = x[i];
		s += (double)v;
		lo = fminf(lo, v);
		hi = fmaxf(hi, v);
	}
	red[tid] = s; redmin[tid] = lo; redmax[tid] = hi;
	bsum[tid] = 0.0; bcnt[tid] = 0;
	__syncthreads();
	for (int o = blockDim.x / 2; o > 0; o >>= 1) {
		if (tid < o) {
			red[tid] += red[tid + o];
			redmin[tid] = fminf(redmin[tid], redmin[tid + o]);
			redmax[tid] = fmaxf(redmax[tid], redmax[tid + o]);
		}
		__syncthreads();
	}
	const double cnt = (double)(c1 - c0);
	const double sum = red[0];
	const double mean = sum / cnt;
	float* table = tables + (long long)blockIdx.x * 256;
	if (isnan(sum) || isinf(sum)) {
		if (tid == 0) atomicExch(bad, 1);
		return;
	}
	const double r = fmax((double)redmax[0] - mean, mean - (double)redmin[0]);
	const float invR = (float)(1.0 / r);
	const float mu = (float)mean;
	const bool ok = r > 0 && invR > 0 && !isinf(invR) && !isinf(r);
	if (!ok) {
		for (long long i = c0 + tid; i < c1; i += blockDim.x) codes[i] = 0;
		table[tid] = (float)mean;
		return;
	}
	for (long long i = c0 + tid; i < c1; i += blockDim.x) {
		const float v = x[i];
		const float d = __fmul_rn(__fsub_rn(v, mu), invR);
		float y = __fsqrt_rn(fminf(fabsf(d), 1.f));
		if (d < 0) y = -y;
		const uint8_t code = (uint8_t)(int)__fadd_rn(__fmul_rn(y, 127.5f), 128.f);
		codes[i] = code;
		atomicAdd(&bsum[code], (double)v);
		atomicAdd(&bcnt[code], 1u);
	}
	__syncthreads();
	if (bcnt[tid] > 0) {
		table[tid] = (float)(bsum[tid] / (double)bcnt[tid]);
	} else {
		const double y = ((double)tid - 127.5) / 127.5;
		table[tid] = (float)((double)mu + r * y * fabs(y));
	}
}

// dequant_int8: dst[i] (+)= table[chunk(i)][codes[i]]; add = 0 sets, 1 adds.
KERNEL void dequant_int8(float* dst, const uint8_t* codes, const float* tables, long long n, int chunk, int add) {
	for (long long i = gtid(); i < n; i += gstride()) {
		const float v = tables[(i / chunk) * 256 + codes[i]];
		dst[i] = add ? dst[i] + v : v;
	}
}
