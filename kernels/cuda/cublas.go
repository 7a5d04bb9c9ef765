//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "cublas_shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"

	"gorgonia.org/cu"
)

// EnvCublas names the environment variable that points at a libcublas
// (a full path to libcublas.so.N); unset, libcublas.so.13, .12 and .11 are
// tried in that order on the loader's search path.
const EnvCublas = "INTELLECT_CUBLAS"

// Blas is a cuBLAS handle bound to one Device and its stream.
type Blas struct {
	h       unsafe.Pointer
	Version int // cublasGetVersion, e.g. 120804 for 12.8.4
}

// openBlas loads cuBLAS (path "" = the default search, see EnvCublas) and
// creates a handle on stream s with a workspace ws of wsBytes. The device's
// context must be current.
func openBlas(path string, s cu.Stream, ws cu.DevicePtr, wsBytes int64) (*Blas, error) {
	if path == "" {
		path = os.Getenv(EnvCublas)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	if C.ic_cublas_open(cpath, &msg[0], C.int(len(msg))) != 0 {
		return nil, fmt.Errorf("%w: %s (set %s to a libcublas.so path)", ErrCublas, C.GoString(&msg[0]), EnvCublas)
	}
	b := &Blas{}
	if st := C.ic_cublas_create(&b.h); st != 0 {
		return nil, fmt.Errorf("%w: cublasCreate: status %d", ErrCublas, int(st))
	}
	b.Version = int(C.ic_cublas_version(b.h))
	if st := C.ic_cublas_set_stream(b.h, unsafe.Pointer(s.C())); st != 0 {
		return nil, fmt.Errorf("%w: cublasSetStream: status %d", ErrCublas, int(st))
	}
	if st := C.ic_cublas_set_workspace(b.h, C.ulonglong(ws), C.ulonglong(wsBytes)); st != 0 {
		return nil, fmt.Errorf("%w: cublasSetWorkspace: status %d", ErrCublas, int(st))
	}
	return b, nil
}

func (b *Blas) close() error {
	if b == nil || b.h == nil {
		return nil
	}
	st := C.ic_cublas_destroy(b.h)
	b.h = nil
	if st != 0 {
		return fmt.Errorf("%w: cublasDestroy: status %d", ErrCublas, int(st))
	}
	return nil
}

func op(t bool) C.int {
	if t {
		return C.IC_OP_T
	}
	return C.IC_OP_N
}

// Gemm computes C = alpha·op(A)·op(B) + beta·C with the row-major meaning of
// kernels.Sgemm (op(A) is m×k, op(B) is k×n, C is m×n), fp32 accumulation;
// A and B bf16 (or f32), C bf16 or f32. With beta = 0, C is not read.
func (b *Blas) Gemm(transA, transB bool, m, n, k int, alpha float32, A, B Mat, beta float32, Cm Mat) error {
	ta, tb, cm, cn, ck := GemmShape{transA, transB, m, n, k}.Colmajor()
	al, be := C.float(alpha), C.float(beta)
	st := C.ic_gemm_ex(b.h, op(ta), op(tb), C.int(cm), C.int(cn), C.int(ck), &al,
		C.ulonglong(B.P), C.int(B.T), C.int(B.LD),
		C.ulonglong(A.P), C.int(A.T), C.int(A.LD),
		&be, C.ulonglong(Cm.P), C.int(Cm.T), C.int(Cm.LD))
	if st != 0 {
		return fmt.Errorf("%w: GemmEx m=%d n=%d k=%d: status %d", ErrCublas, m, n, k, int(st))
	}
	return nil
}

// GemmBatched is Gemm over batch independent problems whose operands are
// strideA/strideB/strideC elements apart.
func (b *Blas) GemmBatched(transA, transB bool, m, n, k int, alpha float32, A Mat, strideA int64, B Mat, strideB int64, beta float32, Cm Mat, strideC int64, batch int) error {
	ta, tb, cm, cn, ck := GemmShape{transA, transB, m, n, k}.Colmajor()
	al, be := C.float(alpha), C.float(beta)
	st := C.ic_gemm_strided_batched_ex(b.h, op(ta), op(tb), C.int(cm), C.int(cn), C.int(ck), &al,
		C.ulonglong(B.P), C.int(B.T), C.int(B.LD), C.longlong(strideB),
		C.ulonglong(A.P), C.int(A.T), C.int(A.LD), C.longlong(strideA),
		&be, C.ulonglong(Cm.P), C.int(Cm.T), C.int(Cm.LD), C.longlong(strideC), C.int(batch))
	if st != 0 {
		return fmt.Errorf("%w: GemmStridedBatchedEx m=%d n=%d k=%d batch=%d: status %d", ErrCublas, m, n, k, batch, int(st))
	}
	return nil
}
