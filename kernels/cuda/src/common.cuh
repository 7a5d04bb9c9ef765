// common.cuh — types and block/warp reductions shared by every kernel.
#pragma once
#ifdef IC_EMU
#include "../emu/emu.h"  // CPU emulation for tests (kernels/cuda/emu_test.go)
#else
#include <cuda_bf16.h>
#include <stdint.h>
// IC_DYNAMIC_SMEM declares the block's dynamic shared memory.
#define IC_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

typedef __nv_bfloat16 bf16;

#define KERNEL extern "C" __global__

static __device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum returns the sum of v over the whole block to every thread.
// blockDim.x must be a multiple of 32 (≤ 1024). Safe to call repeatedly.
static __device__ float block_sum(float v) {
	__shared__ float s[32];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0) s[w] = v;
	__syncthreads();
	v = lane < nw ? s[lane] : 0.f;
	return warp_sum(v);
}

// block_sum_d is block_sum in double: a fixed reduction tree, so the result
// depends only on the inputs and the block size.
static __device__ double block_sum_d(double v) {
	__shared__ double s[32];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if (lane == 0) s[w] = v;
	__syncthreads();
	v = lane < nw ? s[lane] : 0.0;
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// block_argmax returns the largest v over the block and, among equal maxima,
// the smallest index (as the CPU loop `if v > max` does). Same rules as block_sum.
static __device__ void block_argmax(float v, int i, float* vout, int* iout) {
	__shared__ float sv[32];
	__shared__ int si[32];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, v, o);
		int oi = __shfl_xor_sync(0xffffffffu, i, o);
		if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
	}
	__syncthreads();
	if (lane == 0) { sv[w] = v; si[w] = i; }
	__syncthreads();
	v = lane < nw ? sv[lane] : -INFINITY;
	i = lane < nw ? si[lane] : 0x7fffffff;
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, v, o);
		int oi = __shfl_xor_sync(0xffffffffu, i, o);
		if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
	}
	*vout = v;
	*iout = i;
}

static __device__ __forceinline__ long long gtid() {
	return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ __forceinline__ long long gstride() {
	return (long long)gridDim.x * blockDim.x;
}
