//go:build cuda

#include "cublas_shim.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*fn_create)(void**);
typedef int (*fn_destroy)(void*);
typedef int (*fn_set_stream)(void*, void*);
typedef int (*fn_set_workspace)(void*, void*, size_t);
typedef int (*fn_get_version)(void*, int*);
typedef int (*fn_gemm_ex)(void*, int, int, int, int, int, const void*, const void*, int, int,
	const void*, int, int, const void*, void*, int, int, int, int);
typedef int (*fn_gemm_sb_ex)(void*, int, int, int, int, int, const void*, const void*, int, int,
	long long, const void*, int, int, long long, const void*, void*, int, int, long long, int, int, int);

static struct {
	void* lib;
	fn_create create;
	fn_destroy destroy;
	fn_set_stream set_stream;
	fn_set_workspace set_workspace;
	fn_get_version get_version;
	fn_gemm_ex gemm_ex;
	fn_gemm_sb_ex gemm_sb_ex;
} ic;

// try_open dlopen()s one libcublas, preloading the libcublasLt beside it.
static void* try_open(const char* path) {
	char lt[4096];
	const char* base = strrchr(path, '/');
	base = base ? base + 1 : path;
	const char* at = strstr(base, "libcublas.");
	if (at && strlen(path) + 3 < sizeof lt) {
		size_t pre = (size_t)(at - path) + strlen("libcublas");
		memcpy(lt, path, pre);
		strcpy(lt + pre, "Lt");
		strcpy(lt + pre + 2, at + strlen("libcublas"));
		dlopen(lt, RTLD_NOW | RTLD_GLOBAL);  // best effort: libcublas's own DT_NEEDED may find it
	}
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

int ic_cublas_open(const char* path, char* err, int errlen) {
	if (ic.lib) return 0;
	static const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"};
	void* lib = NULL;
	if (path && *path) {
		lib = try_open(path);
		if (!lib) { snprintf(err, errlen, "dlopen %s: %s", path, dlerror()); return 1; }
	} else {
		for (int i = 0; i < 3 && !lib; i++) lib = try_open(names[i]);
		if (!lib) { snprintf(err, errlen, "dlopen libcublas.so.13/.12/.11: %s", dlerror()); return 1; }
	}
#define SYM(field, type, name)                                                      \
	ic.field = (type)dlsym(lib, name);                                              \
	if (!ic.field) { snprintf(err, errlen, "dlsym %s: %s", name, dlerror()); dlclose(lib); return 1; }
	SYM(create, fn_create, "cublasCreate_v2");
	SYM(destroy, fn_destroy, "cublasDestroy_v2");
	SYM(set_stream, fn_set_stream, "cublasSetStream_v2");
	SYM(get_version, fn_get_version, "cublasGetVersion_v2");
	SYM(gemm_ex, fn_gemm_ex, "cublasGemmEx");
	SYM(gemm_sb_ex, fn_gemm_sb_ex, "cublasGemmStridedBatchedEx");
#undef SYM
	ic.set_workspace = (fn_set_workspace)dlsym(lib, "cublasSetWorkspace_v2");  // optional
	ic.lib = lib;
	return 0;
}

int ic_cublas_version(void* h) {
	int v = -1;
	if (!ic.get_version || ic.get_version(h, &v) != 0) return -1;
	return v;
}

int ic_cublas_create(void** h) { return ic.create(h); }
int ic_cublas_destroy(void* h) { return ic.destroy(h); }
int ic_cublas_set_stream(void* h, void* s) { return ic.set_stream(h, s); }

int ic_cublas_set_workspace(void* h, unsigned long long ws, unsigned long long bytes) {
	if (!ic.set_workspace) return 0;
	return ic.set_workspace(h, (void*)ws, (size_t)bytes);
}

int ic_gemm_ex(void* h, int transa, int transb, int m, int n, int k,
		const float* alpha, unsigned long long A, int atype, int lda, unsigned long long B, int btype, int ldb,
		const float* beta, unsigned long long C, int ctype, int ldc) {
	return ic.gemm_ex(h, transa, transb, m, n, k, alpha, (const void*)A, atype, lda, (const void*)B, btype, ldb, beta, (void*)C, ctype,
		ldc, IC_COMPUTE_32F, IC_GEMM_DEFAULT);
}

int ic_gemm_strided_batched_ex(void* h, int transa, int transb, int m, int n, int k,
		const float* alpha, unsigned long long A, int atype, int lda, long long sA,
		unsigned long long B, int btype, int ldb, long long sB,
		const float* beta, unsigned long long C, int ctype, int ldc, long long sC, int batch) {
	return ic.gemm_sb_ex(h, transa, transb, m, n, k, alpha, (const void*)A, atype, lda, sA, (const void*)B, btype, ldb, sB, beta,
		(void*)C, ctype, ldc, sC, batch, IC_COMPUTE_32F, IC_GEMM_DEFAULT);
}
