//go:build cuda

// cublas_shim.h — cuBLAS loaded at run time with dlopen(), so the binary does
// not depend on one CUDA major version. Only the handful of entry points the
// training step uses are looked up, by name; their C signatures are restated
// here with plain types (handles and streams are opaque pointers, enums ints)
// so that no cuBLAS header is needed to build.
#ifndef INTELLECT_CUBLAS_SHIM_H
#define INTELLECT_CUBLAS_SHIM_H

// Values of the cuBLAS / CUDA enums used (cublas_api.h, library_types.h;
// stable across CUDA 11–13).
enum {
	IC_OP_N = 0,
	IC_OP_T = 1,
	IC_R_32F = 0,      // cudaDataType CUDA_R_32F
	IC_R_16BF = 14,    // cudaDataType CUDA_R_16BF
	IC_COMPUTE_32F = 68,  // cublasComputeType_t CUBLAS_COMPUTE_32F
	IC_GEMM_DEFAULT = -1, // cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT
	IC_DEFAULT_MATH = 0,  // cublasMath_t CUBLAS_DEFAULT_MATH
};

// ic_cublas_open loads libcublas (and, first, its libcublasLt with
// RTLD_GLOBAL) from `path` (a file, or "" to try libcublas.so.13, .12, .11 on
// the loader's search path) and resolves the entry points. It returns 0 on
// success; otherwise writes a message into err. Idempotent.
int ic_cublas_open(const char* path, char* err, int errlen);

// ic_cublas_version returns cublasGetVersion_v2 of the loaded library, or -1.
int ic_cublas_version(void* handle);

int ic_cublas_create(void** handle);
int ic_cublas_destroy(void* handle);
int ic_cublas_set_stream(void* handle, void* stream);
// ic_cublas_set_workspace calls cublasSetWorkspace_v2 when the library has it
// (CUDA ≥ 12); returns 0 and does nothing otherwise.
int ic_cublas_set_workspace(void* handle, unsigned long long ws, unsigned long long bytes);

int ic_gemm_ex(void* handle, int transa, int transb, int m, int n, int k,
	const float* alpha, unsigned long long A, int atype, int lda, unsigned long long B, int btype, int ldb,
	const float* beta, unsigned long long C, int ctype, int ldc);

int ic_gemm_strided_batched_ex(void* handle, int transa, int transb, int m, int n, int k,
	const float* alpha, unsigned long long A, int atype, int lda, long long strideA,
	unsigned long long B, int btype, int ldb, long long strideB,
	const float* beta, unsigned long long C, int ctype, int ldc, long long strideC, int batch);

#endif
