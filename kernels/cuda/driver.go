//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>

// Gaps in gorgonia.org/cu v0.9.6, filled here: pinned host memory and
// cuFuncSetAttribute (needed for more than 48 KB of dynamic shared memory).
static int ic_mem_alloc_host(void** p, unsigned long long bytes) { return (int)cuMemAllocHost(p, (size_t)bytes); }
static int ic_mem_free_host(void* p) { return (int)cuMemFreeHost(p); }
static int ic_func_max_dyn_smem(void* fn, int bytes) {
	return (int)cuFuncSetAttribute((CUfunction)fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}
*/
import "C"

import (
	"fmt"
	"log/slog"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
)

// DevicePtr is an address in device memory.
type DevicePtr = cu.DevicePtr

// blasWorkspace is the cuBLAS workspace size (cuBLAS ≥ 12 on Hopper wants 32 MiB).
const blasWorkspace = 32 << 20

// Device is one GPU with its primary context, one stream, the loaded kernel
// module and a cuBLAS handle on that stream. Its methods that talk to the
// driver must run inside Do (which pins the goroutine to an OS thread with the
// context current); Do may be called from any goroutine but not concurrently.
type Device struct {
	Name         string
	Major, Minor int   // compute capability
	SMs          int   // multiprocessors
	TotalMem     int64 // bytes
	Stream       cu.Stream
	Blas         *Blas

	dev  cu.Device
	ctx  cu.CUContext
	mod  cu.Module
	fns  map[string]cu.Function
	ws   cu.DevicePtr
	log  *slog.Logger
	live map[cu.DevicePtr]int64 // allocations, for Close and MemUsed
	used int64
	flag cu.DevicePtr // 4-byte scratch of QuantizeInt8
}

// Open retains the primary context of GPU ordinal, loads the embedded PTX for
// its architecture, resolves every kernel of Kernels and opens cuBLAS
// (blasPath "" = $INTELLECT_CUBLAS or the default search).
func Open(ordinal int, blasPath string, log *slog.Logger) (*Device, error) {
	if log == nil {
		log = slog.Default()
	}
	d := &Device{fns: map[string]cu.Function{}, live: map[cu.DevicePtr]int64{}, log: log.With("system", "cuda")}
	err := d.Do(func() error { return d.open(ordinal, blasPath) })
	if err != nil {
		d.Close()
		return nil, err
	}
	d.log.Info("device open", "name", d.Name, "cc", fmt.Sprintf("%d.%d", d.Major, d.Minor),
		"sms", d.SMs, "mem_gib", float64(d.TotalMem)/(1<<30), "cublas", d.Blas.Version)
	return d, nil
}

func (d *Device) open(ordinal int, blasPath string) error {
	var err error
	if d.dev, err = cu.GetDevice(ordinal); err != nil {
		return fmt.Errorf("%w: device %d: %v", ErrDriver, ordinal, err)
	}
	if d.ctx, err = d.dev.RetainPrimaryCtx(); err != nil {
		return fmt.Errorf("%w: retain primary context: %v", ErrDriver, err)
	}
	if err = cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("%w: set context: %v", ErrDriver, err)
	}
	if err = d.attributes(); err != nil {
		return err
	}
	ptx, err := PTX(d.Major, d.Minor)
	if err != nil {
		return err
	}
	if d.mod, err = cu.LoadData(ptx); err != nil {
		return fmt.Errorf("%w: load PTX module: %v", ErrDriver, err)
	}
	for _, name := range Kernels {
		fn, err := d.mod.Function(name)
		if err != nil {
			return fmt.Errorf("%w: kernel %s: %v", ErrDriver, name, err)
		}
		d.fns[name] = fn
	}
	if d.Stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return fmt.Errorf("%w: stream: %v", ErrDriver, err)
	}
	if d.ws, err = d.Alloc(blasWorkspace); err != nil {
		return err
	}
	d.Blas, err = openBlas(blasPath, d.Stream, d.ws, blasWorkspace)
	return err
}

func (d *Device) attributes() error {
	var err error
	if d.Name, err = d.dev.Name(); err != nil {
		return fmt.Errorf("%w: device name: %v", ErrDriver, err)
	}
	attr := func(a cu.DeviceAttribute) int {
		v, e := d.dev.Attribute(a)
		if e != nil && err == nil {
			err = fmt.Errorf("%w: device attribute %d: %v", ErrDriver, a, e)
		}
		return v
	}
	d.Major, d.Minor = attr(cu.ComputeCapabilityMajor), attr(cu.ComputeCapabilityMinor)
	d.SMs = attr(cu.MultiprocessorCount)
	if err != nil {
		return err
	}
	if d.TotalMem, err = d.dev.TotalMem(); err != nil {
		return fmt.Errorf("%w: total memory: %v", ErrDriver, err)
	}
	return nil
}

// Do runs f on a locked OS thread with the device's context current.
func (d *Device) Do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("%w: set context: %v", ErrDriver, err)
	}
	return f()
}

// Close frees everything the device allocated and releases its context.
func (d *Device) Close() error {
	return d.Do(func() error {
		var first error
		keep := func(err error) {
			if err != nil && first == nil {
				first = err
			}
		}
		keep(d.Blas.close())
		for p := range d.live {
			keep(d.Free(p))
		}
		if d.Stream != (cu.Stream{}) {
			keep(d.Stream.Destroy())
		}
		if d.mod != (cu.Module{}) {
			keep(d.mod.Unload())
		}
		if d.ctx != (cu.CUContext{}) {
			keep(d.dev.ReleasePrimaryCtx())
			d.ctx = cu.CUContext{}
		}
		return first
	})
}

// Alloc allocates bytes of device memory (inside Do).
func (d *Device) Alloc(bytes int64) (cu.DevicePtr, error) {
	if bytes <= 0 {
		bytes = 256
	}
	p, err := cu.MemAlloc(bytes)
	if err != nil {
		free, total, _ := cu.MemInfo()
		return 0, fmt.Errorf("%w: alloc %d MiB (free %d of %d MiB): %v", ErrDriver, bytes>>20, free>>20, total>>20, err)
	}
	d.live[p] = bytes
	d.used += bytes
	return p, nil
}

// Free releases an allocation made by Alloc (inside Do).
func (d *Device) Free(p cu.DevicePtr) error {
	if p == 0 {
		return nil
	}
	d.used -= d.live[p]
	delete(d.live, p)
	if err := cu.MemFree(p); err != nil {
		return fmt.Errorf("%w: free: %v", ErrDriver, err)
	}
	return nil
}

// MemUsed returns the bytes currently allocated through Alloc.
func (d *Device) MemUsed() int64 { return d.used }

// Sync waits until the stream is idle (inside Do).
func (d *Device) Sync() error {
	if err := d.Stream.Synchronize(); err != nil {
		return fmt.Errorf("%w: synchronize: %v", ErrDriver, err)
	}
	return nil
}

// Upload copies len(src) elements from host memory to dst, ordered on the
// stream (inside Do). src must stay untouched until the next Sync.
func Upload[T any](d *Device, dst cu.DevicePtr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	n := int64(len(src)) * int64(unsafe.Sizeof(src[0]))
	if err := cu.MemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), n, d.Stream); err != nil {
		return fmt.Errorf("%w: copy %d bytes to device: %v", ErrDriver, n, err)
	}
	return nil
}

// Download copies len(dst) elements from src to host memory and waits for it
// (inside Do).
func Download[T any](d *Device, dst []T, src cu.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	n := int64(len(dst)) * int64(unsafe.Sizeof(dst[0]))
	if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src, n, d.Stream); err != nil {
		return fmt.Errorf("%w: copy %d bytes from device: %v", ErrDriver, n, err)
	}
	return d.Sync()
}

// CopyD copies bytes between device buffers on the stream (inside Do).
func (d *Device) CopyD(dst, src cu.DevicePtr, bytes int64) error {
	if err := cu.MemcpyDtoDAsync(dst, src, bytes, d.Stream); err != nil {
		return fmt.Errorf("%w: device copy %d bytes: %v", ErrDriver, bytes, err)
	}
	return nil
}

// Zero clears bytes (a multiple of 4) at p on the stream (inside Do).
func (d *Device) Zero(p cu.DevicePtr, bytes int64) error {
	if err := cu.MemsetD32Async(p, 0, bytes/4, d.Stream); err != nil {
		return fmt.Errorf("%w: memset %d bytes: %v", ErrDriver, bytes, err)
	}
	return nil
}

// HostF32 allocates n float32 of pinned (page-locked) host memory, which the
// driver copies at full PCIe/NVLink speed, and returns it as a slice; free it
// with FreeHost (inside Do).
func (d *Device) HostF32(n int) ([]float32, error) {
	var p unsafe.Pointer
	if st := C.ic_mem_alloc_host(&p, C.ulonglong(4*max(n, 1))); st != 0 {
		return nil, fmt.Errorf("%w: cuMemAllocHost %d MiB: error %d", ErrDriver, (4*n)>>20, int(st))
	}
	return unsafe.Slice((*float32)(p), n), nil
}

// FreeHost frees memory from HostF32 (inside Do).
func (d *Device) FreeHost(s []float32) error {
	if cap(s) == 0 {
		return nil
	}
	if st := C.ic_mem_free_host(unsafe.Pointer(unsafe.SliceData(s[:1]))); st != 0 {
		return fmt.Errorf("%w: cuMemFreeHost: error %d", ErrDriver, int(st))
	}
	return nil
}

// SetMaxDynamicShared lets kernel name use up to bytes of dynamic shared
// memory (above the default 48 KB), inside Do.
func (d *Device) SetMaxDynamicShared(name string, bytes int) error {
	fn, ok := d.fns[name]
	if !ok {
		return fmt.Errorf("%w: no kernel %q", ErrUnsupported, name)
	}
	if st := C.ic_func_max_dyn_smem(*(*unsafe.Pointer)(unsafe.Pointer(&fn)), C.int(bytes)); st != 0 {
		return fmt.Errorf("%w: cuFuncSetAttribute(%s, %d): error %d", ErrDriver, name, bytes, int(st))
	}
	return nil
}

// Launch runs kernel name with the given grid, block, dynamic shared memory
// and arguments on the device's stream (inside Do). Launch errors are
// reported here; faults inside the kernel surface at the next Sync.
func (d *Device) Launch(name string, grid, block Dim3, smem int, a *Args) error {
	fn, ok := d.fns[name]
	if !ok {
		return fmt.Errorf("%w: no kernel %q", ErrUnsupported, name)
	}
	g, b := norm3(grid), norm3(block)
	if err := fn.Launch(g.X, g.Y, g.Z, b.X, b.Y, b.Z, smem, d.Stream, a.params()); err != nil {
		return fmt.Errorf("%w: launch %s grid %v block %v: %v", ErrDriver, name, g, b, err)
	}
	return nil
}

// Timer measures stream time between Start and Stop with CUDA events.
type Timer struct{ start, stop cu.Event }

// NewTimer creates the two events (inside Do).
func (d *Device) NewTimer() (*Timer, error) {
	s, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return nil, fmt.Errorf("%w: event: %v", ErrDriver, err)
	}
	e, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return nil, fmt.Errorf("%w: event: %v", ErrDriver, err)
	}
	return &Timer{s, e}, nil
}

// Start records the start event on d's stream.
func (t *Timer) Start(d *Device) error { return t.start.Record(d.Stream) }

// Stop records the stop event, waits for it and returns the milliseconds between.
func (t *Timer) Stop(d *Device) (float64, error) {
	if err := t.stop.Record(d.Stream); err != nil {
		return 0, err
	}
	if err := t.stop.Synchronize(); err != nil {
		return 0, err
	}
	return t.start.Elapsed(t.stop)
}

// Close destroys the events.
func (t *Timer) Close() {
	cu.DestroyEvent(&t.start)
	cu.DestroyEvent(&t.stop)
}
