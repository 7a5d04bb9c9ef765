//go:build cuda || cudaemu

package cuda

import (
	"errors"
	"math"
	"unsafe"
)

// Sentinel errors of the device layer.
var (
	// ErrDriver is wrapped by every CUDA driver failure.
	ErrDriver = errors.New("cuda: driver")
	// ErrCublas is wrapped by every cuBLAS failure.
	ErrCublas = errors.New("cuda: cublas")
)

// DType is a cuBLAS element type (cudaDataType).
type DType int

// Element types the matmuls use (values of CUDA_R_32F and CUDA_R_16BF).
const (
	F32   DType = 0
	BF16T DType = 14
)

// Mat is a row-major matrix operand in device memory: element type, base
// pointer and leading dimension (elements between rows).
type Mat struct {
	T  DType
	P  DevicePtr
	LD int
}

// Args holds kernel arguments, each in its own 8-byte slot: gorgonia's Launch
// reads 8 bytes per argument, and the driver then takes as many bytes as the
// kernel's parameter has, so 4-byte ints and floats sit in the low half of
// their slot (little-endian). Reuse one Args with Reset to avoid allocations.
type Args struct {
	slots [16]uint64
	ptrs  [16]unsafe.Pointer
	n     int
}

// Reset empties a.
func (a *Args) Reset() *Args { a.n = 0; return a }

func (a *Args) put(v uint64) *Args {
	if a.n == len(a.slots) {
		panic("cuda: more than 16 kernel arguments")
	}
	a.slots[a.n] = v
	a.n++
	return a
}

// P appends a device pointer.
func (a *Args) P(p DevicePtr) *Args { return a.put(uint64(p)) }

// I appends an int argument (C int, 32 bits).
func (a *Args) I(v int) *Args { return a.put(uint64(uint32(int32(v)))) }

// L appends a long long argument (64 bits).
func (a *Args) L(v int64) *Args { return a.put(uint64(v)) }

// F appends a float argument (32 bits).
func (a *Args) F(v float32) *Args { return a.put(uint64(math.Float32bits(v))) }

func (a *Args) params() []unsafe.Pointer {
	for i := 0; i < a.n; i++ {
		a.ptrs[i] = unsafe.Pointer(&a.slots[i])
	}
	return a.ptrs[:a.n]
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z int }

func norm3(d Dim3) Dim3 {
	return Dim3{max(d.X, 1), max(d.Y, 1), max(d.Z, 1)}
}
