//go:build cuda || cudaemu

package cuda

import (
	"errors"
	"fmt"
)

// ErrNonFinite reports a NaN or ±Inf in a vector given to QuantizeInt8.
var ErrNonFinite = errors.New("cuda: non-finite value")

// QuantTableSize is the number of float32 entries of one chunk's table.
const QuantTableSize = 256

// QuantizeInt8 encodes the n float32 at x (device) chunk by chunk with the
// all-reduce's int8 codec (collective.CodecInt8: sqrt-spaced buckets around the
// chunk mean, each decoding to the mean of its values): one code byte per
// value into codes (n bytes) and a table of QuantTableSize float32 per chunk
// into tables (⌈n/chunk⌉ × 256). Codes follow mesh's bucket rule exactly, so
// the bytes on the wire mean the same whichever device encoded them. It waits
// for the result and returns ErrNonFinite if x held a NaN or ±Inf (inside Do).
func (d *Device) QuantizeInt8(codes, tables, x DevicePtr, n int64, chunk int) error {
	if n <= 0 || chunk <= 0 {
		return fmt.Errorf("%w: quantize %d values in chunks of %d", ErrUnsupported, n, chunk)
	}
	if d.flag == 0 {
		p, err := d.Alloc(4)
		if err != nil {
			return err
		}
		d.flag = p
	}
	if err := d.Zero(d.flag, 4); err != nil {
		return err
	}
	var a Args
	nch := (n + int64(chunk) - 1) / int64(chunk)
	if err := d.Launch("quant_int8", Dim3{X: int(nch)}, Dim3{X: 256}, 0,
		a.P(codes).P(tables).P(d.flag).P(x).L(n).I(chunk)); err != nil {
		return err
	}
	var bad [1]int32
	if err := Download(d, bad[:], d.flag); err != nil {
		return err
	}
	if bad[0] != 0 {
		return ErrNonFinite
	}
	return nil
}

// DequantizeInt8 decodes n values (codes and tables as QuantizeInt8 writes
// them) into dst, adding to it when add is true (inside Do, asynchronous).
func (d *Device) DequantizeInt8(dst, codes, tables DevicePtr, n int64, chunk int, add bool) error {
	if n <= 0 || chunk <= 0 {
		return fmt.Errorf("%w: dequantize %d values in chunks of %d", ErrUnsupported, n, chunk)
	}
	addI := 0
	if add {
		addI = 1
	}
	var a Args
	return d.Launch("dequant_int8", Dim3{X: Grid1D(n, 256, 4096)}, Dim3{X: 256}, 0,
		a.P(dst).P(codes).P(tables).L(n).I(chunk).I(addI))
}
