//go:build cudaemu && !cuda

package cuda

// The emulated device of `-tags cudaemu`: the same API as driver.go and
// cublas.go, with host memory standing in for device memory, the kernels of
// src/ run by name under the CPU emulation of emu/emu.h, and a plain GEMM
// with cuBLAS's column-major GemmEx semantics. It lets the GPU engine
// (train/gpu) run its real orchestration — buffers, offsets, launches, the
// row→column-major GEMM mapping — against the CPU trainer on a machine with
// no GPU (`go test -tags cudaemu ./train/gpu`). Slow; for tests only.

/*
#cgo CXXFLAGS: -std=c++20 -O2 -DIC_EMU
#cgo LDFLAGS: -lstdc++ -pthread
#include <stdint.h>
#include <stdlib.h>
int ic_emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
	unsigned smem, const unsigned long long* args, int nargs);
void ic_emu_gemm(int transa, int transb, int m, int n, int k, float alpha, unsigned long long A, int at, int lda,
	unsigned long long B, int bt, int ldb, float beta, unsigned long long C, int ct, int ldc);
unsigned long long ic_emu_alloc(unsigned long long bytes);
void ic_emu_free(unsigned long long p);
void ic_emu_h2d(unsigned long long dst, const void* src, unsigned long long n);
void ic_emu_d2h(void* dst, unsigned long long src, unsigned long long n);
void ic_emu_d2d(unsigned long long dst, unsigned long long src, unsigned long long n);
void ic_emu_zero(unsigned long long dst, unsigned long long n);
void ic_emu_fill(unsigned long long dst, unsigned long long n);
*/
import "C"

import (
	"fmt"
	"log/slog"
	"time"
	"unsafe"
)

// DevicePtr is an address in (emulated) device memory.
type DevicePtr uintptr

// defaultSmem is the shared memory a kernel may use without SetMaxDynamicShared.
const defaultSmem = 48 << 10

// Device is the emulated GPU. Do runs f directly.
type Device struct {
	Name         string
	Major, Minor int
	SMs          int
	TotalMem     int64
	Blas         *Blas

	live    map[DevicePtr]int64
	used    int64
	flag    DevicePtr
	maxSmem map[string]int
}

// Open returns the emulated device (compute capability 9.0).
func Open(ordinal int, blasPath string, log *slog.Logger) (*Device, error) {
	if ordinal != 0 {
		return nil, fmt.Errorf("%w: emulated device %d (only 0)", ErrDriver, ordinal)
	}
	return &Device{Name: "cuda emulator", Major: 9, SMs: 1, TotalMem: 1 << 34, Blas: &Blas{Version: 0},
		live: map[DevicePtr]int64{}, maxSmem: map[string]int{}}, nil
}

// Do runs f.
func (d *Device) Do(f func() error) error { return f() }

// Close frees every allocation.
func (d *Device) Close() error {
	for p := range d.live {
		d.Free(p)
	}
	return nil
}

// Alloc allocates bytes of emulated device memory.
func (d *Device) Alloc(bytes int64) (DevicePtr, error) {
	if bytes <= 0 {
		bytes = 256
	}
	p := DevicePtr(C.ic_emu_alloc(C.ulonglong(bytes)))
	if p == 0 {
		return 0, fmt.Errorf("%w: alloc %d bytes", ErrDriver, bytes)
	}
	C.ic_emu_fill(C.ulonglong(p), C.ulonglong(bytes)) // NaN bytes: reading memory nobody wrote shows
	d.live[p] = bytes
	d.used += bytes
	return p, nil
}

// Free releases an allocation.
func (d *Device) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	if _, ok := d.live[p]; !ok {
		return fmt.Errorf("%w: free of %#x, not allocated", ErrDriver, uintptr(p))
	}
	d.used -= d.live[p]
	delete(d.live, p)
	C.ic_emu_free(C.ulonglong(p))
	return nil
}

// MemUsed returns the bytes allocated.
func (d *Device) MemUsed() int64 { return d.used }

// Sync does nothing: the emulator is synchronous.
func (d *Device) Sync() error { return nil }

// Upload copies src to dst.
func Upload[T any](d *Device, dst DevicePtr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	n := int64(len(src)) * int64(unsafe.Sizeof(src[0]))
	C.ic_emu_h2d(C.ulonglong(dst), unsafe.Pointer(&src[0]), C.ulonglong(n))
	return nil
}

// Download copies from src into dst.
func Download[T any](d *Device, dst []T, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	n := int64(len(dst)) * int64(unsafe.Sizeof(dst[0]))
	C.ic_emu_d2h(unsafe.Pointer(&dst[0]), C.ulonglong(src), C.ulonglong(n))
	return nil
}

// CopyD copies bytes between device buffers.
func (d *Device) CopyD(dst, src DevicePtr, bytes int64) error {
	C.ic_emu_d2d(C.ulonglong(dst), C.ulonglong(src), C.ulonglong(bytes))
	return nil
}

// Zero clears bytes at p.
func (d *Device) Zero(p DevicePtr, bytes int64) error {
	C.ic_emu_zero(C.ulonglong(p), C.ulonglong(bytes))
	return nil
}

// HostF32 returns n float32 of ordinary Go memory.
func (d *Device) HostF32(n int) ([]float32, error) { return make([]float32, n), nil }

// FreeHost does nothing.
func (d *Device) FreeHost(s []float32) error { return nil }

// SetMaxDynamicShared records the limit, which Launch enforces as the driver does.
func (d *Device) SetMaxDynamicShared(name string, bytes int) error {
	if bytes > 227<<10 {
		return fmt.Errorf("%w: %s: %d bytes of shared memory exceeds the 227 KB of sm_90", ErrDriver, name, bytes)
	}
	d.maxSmem[name] = bytes
	return nil
}

// Launch runs kernel name under the emulator.
func (d *Device) Launch(name string, grid, block Dim3, smem int, a *Args) error {
	g, b := norm3(grid), norm3(block)
	limit := defaultSmem
	if m, ok := d.maxSmem[name]; ok {
		limit = m
	}
	if smem > limit {
		return fmt.Errorf("%w: launch %s with %d bytes of shared memory, limit %d (SetMaxDynamicShared)", ErrDriver, name, smem, limit)
	}
	if b.X*b.Y*b.Z > 1024 {
		return fmt.Errorf("%w: launch %s: block %v has more than 1024 threads", ErrDriver, name, b)
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var args [16]C.ulonglong
	for i := 0; i < a.n; i++ {
		args[i] = C.ulonglong(a.slots[i])
	}
	if C.ic_emu_launch(cname, C.uint(g.X), C.uint(g.Y), C.uint(g.Z), C.uint(b.X), C.uint(b.Y), C.uint(b.Z), C.uint(smem), &args[0], C.int(a.n)) != 0 {
		return fmt.Errorf("%w: no kernel %q", ErrUnsupported, name)
	}
	return nil
}

// Timer measures wall time.
type Timer struct{ t time.Time }

// NewTimer returns a timer.
func (d *Device) NewTimer() (*Timer, error) { return &Timer{}, nil }

// Start records the start time.
func (t *Timer) Start(d *Device) error { t.t = time.Now(); return nil }

// Stop returns the milliseconds since Start.
func (t *Timer) Stop(d *Device) (float64, error) {
	return float64(time.Since(t.t).Microseconds()) / 1e3, nil
}

// Close does nothing.
func (t *Timer) Close() {}

// Blas is the emulated cuBLAS.
type Blas struct{ Version int }

// Gemm is Blas.Gemm of cublas.go: row-major Sgemm semantics, mapped to the
// column-major call by GemmShape.Colmajor exactly as the real one.
func (b *Blas) Gemm(transA, transB bool, m, n, k int, alpha float32, A, B Mat, beta float32, Cm Mat) error {
	ta, tb, cm, cn, ck := GemmShape{transA, transB, m, n, k}.Colmajor()
	C.ic_emu_gemm(cflag(ta), cflag(tb), C.int(cm), C.int(cn), C.int(ck), C.float(alpha),
		C.ulonglong(B.P), C.int(B.T), C.int(B.LD), C.ulonglong(A.P), C.int(A.T), C.int(A.LD),
		C.float(beta), C.ulonglong(Cm.P), C.int(Cm.T), C.int(Cm.LD))
	return nil
}

// GemmBatched is Gemm over batch problems strideA/strideB/strideC elements apart.
func (b *Blas) GemmBatched(transA, transB bool, m, n, k int, alpha float32, A Mat, strideA int64, B Mat, strideB int64, beta float32, Cm Mat, strideC int64, batch int) error {
	for i := 0; i < batch; i++ {
		a, bb, c := A, B, Cm
		a.P += DevicePtr(strideA * int64(esize(A.T)) * int64(i))
		bb.P += DevicePtr(strideB * int64(esize(B.T)) * int64(i))
		c.P += DevicePtr(strideC * int64(esize(Cm.T)) * int64(i))
		if err := b.Gemm(transA, transB, m, n, k, alpha, a, bb, beta, c); err != nil {
			return err
		}
	}
	return nil
}

func esize(t DType) int {
	if t == BF16T {
		return 2
	}
	return 4
}

func cflag(t bool) C.int {
	if t {
		return 1
	}
	return 0
}
