package train

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// ErrCheckpoint is wrapped by every error about a malformed, truncated or
// mismatching checkpoint or safetensors file.
var ErrCheckpoint = errors.New("train: bad checkpoint")

// Tensor is a named float32 tensor of a safetensors file.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32 // row-major, len = product of Shape
}

// Limits of the safetensors reader, checked before allocating.
const (
	maxSTHeader  = 100 << 20 // header JSON bytes
	maxSTTensors = 1 << 20   // tensors per file
	maxSTRank    = 8
)

type stEntry struct {
	DType   DType    `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// DType is the element type a safetensors file stores its tensors in.
type DType string

// The dtypes this package writes and reads; in memory tensors are float32.
const (
	F32  DType = "F32"  // IEEE binary32, exact
	BF16 DType = "BF16" // bfloat16: float32 rounded to nearest even to 8 significant bits
)

// size returns the bytes per element, or 0 for an unknown dtype.
func (d DType) size() int64 {
	switch d {
	case F32:
		return 4
	case BF16:
		return 2
	}
	return 0
}

// WriteSafetensors writes ts as a safetensors file (F32, little endian) with
// optional string metadata, then syncs it. Tensors are stored in the order
// given; names must be unique and not "__metadata__".
func WriteSafetensors(path string, ts []Tensor, meta map[string]string) error {
	return WriteSafetensorsAs(path, ts, meta, F32)
}

// WriteSafetensorsAs is WriteSafetensors storing the tensors as dt: F32, or
// BF16 rounded to nearest even (see ToBF16).
func WriteSafetensorsAs(path string, ts []Tensor, meta map[string]string, dt DType) error {
	return writeSafetensors(path, ts, meta, dt, nil)
}

// writeSafetensors is WriteSafetensorsAs telling progress, if not nil, the
// tensor bytes written so far against their total after each tensor.
func writeSafetensors(path string, ts []Tensor, meta map[string]string, dt DType, progress func(done, total int64)) error {
	hdr, err := stHeader(ts, meta, dt)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("train: write safetensors: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var n8 [8]byte
	binary.LittleEndian.PutUint64(n8[:], uint64(len(hdr)))
	w.Write(n8[:])
	w.Write(hdr)
	var done, total int64
	for _, t := range ts {
		total += int64(len(t.Data)) * dt.size()
	}
	for _, t := range ts {
		writeValues(w, t.Data, dt)
		if done += int64(len(t.Data)) * dt.size(); progress != nil {
			progress(done, total)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("train: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("train: sync %s: %w", path, err)
	}
	return f.Close()
}

// writeValues encodes data as dt, little endian; errors stick in w.
func writeValues(w *bufio.Writer, data []float32, dt DType) {
	var b [4]byte
	for _, v := range data {
		if dt == BF16 {
			binary.LittleEndian.PutUint16(b[:], ToBF16(v))
			w.Write(b[:2])
			continue
		}
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		w.Write(b[:])
	}
}

// ToBF16 returns the bfloat16 bits of f rounded to nearest, ties to even:
// the upper half of f's bits after adding 0x7fff plus the lowest kept bit.
// Values beyond the largest bfloat16 round to ±Inf; NaN stays NaN (quieted,
// sign kept) — adding to its bits could otherwise carry it into Inf.
func ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// FromBF16 returns the float32 of bfloat16 bits h (exact).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// stHeader builds the JSON header, padded with spaces to a multiple of 8.
func stHeader(ts []Tensor, meta map[string]string, dt DType) ([]byte, error) {
	es := dt.size()
	if es == 0 {
		return nil, fmt.Errorf("train: safetensors dtype %q: want F32 or BF16", dt)
	}
	h := map[string]any{}
	if len(meta) > 0 {
		h["__metadata__"] = meta
	}
	var off int64
	for _, t := range ts {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if n != len(t.Data) || t.Name == "__metadata__" {
			return nil, fmt.Errorf("train: tensor %q: shape %v does not match %d values", t.Name, t.Shape, len(t.Data))
		}
		if _, dup := h[t.Name]; dup {
			return nil, fmt.Errorf("train: tensor %q written twice", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		h[t.Name] = stEntry{DType: dt, Shape: shape, Offsets: [2]int64{off, off + es*int64(n)}}
		off += es * int64(n)
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	return b, nil
}

// ReadSafetensors reads an F32 or BF16 safetensors file: its tensors in file
// order (BF16 widened to float32, exactly) and its metadata. Malformed or truncated files give an error wrapping
// ErrCheckpoint.
func ReadSafetensors(path string) ([]Tensor, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("train: read safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	ts, meta, err := decodeSafetensors(bufio.NewReaderSize(f, 1<<20), st.Size())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, meta, nil
}

// ParseSafetensors decodes a safetensors image held in memory.
func ParseSafetensors(b []byte) ([]Tensor, map[string]string, error) {
	return decodeSafetensors(bytes.NewReader(b), int64(len(b)))
}

// decodeSafetensors reads a safetensors stream of exactly size bytes.
func decodeSafetensors(r io.Reader, size int64) ([]Tensor, map[string]string, error) {
	var n8 [8]byte
	if _, err := io.ReadFull(r, n8[:]); err != nil {
		return nil, nil, fmt.Errorf("%w: short header length: %v", ErrCheckpoint, err)
	}
	hlen := binary.LittleEndian.Uint64(n8[:])
	if hlen > maxSTHeader || int64(hlen) > size-8 {
		return nil, nil, fmt.Errorf("%w: header length %d (file %d bytes)", ErrCheckpoint, hlen, size)
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, nil, fmt.Errorf("%w: truncated header: %v", ErrCheckpoint, err)
	}
	entries, meta, err := parseSTHeader(hdr, size-8-int64(hlen))
	if err != nil {
		return nil, nil, err
	}
	ts, err := readSTData(r, entries)
	if err != nil {
		return nil, nil, err
	}
	return ts, meta, nil
}

type namedEntry struct {
	name string
	stEntry
}

// parseSTHeader decodes and checks the header against the data size: F32
// and BF16 only, shapes matching their byte ranges, ranges in bounds, contiguous and
// non-overlapping.
func parseSTHeader(hdr []byte, dataSize int64) ([]namedEntry, map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, nil, fmt.Errorf("%w: header JSON: %v", ErrCheckpoint, err)
	}
	if len(raw) > maxSTTensors {
		return nil, nil, fmt.Errorf("%w: %d tensors", ErrCheckpoint, len(raw))
	}
	var meta map[string]string
	var es []namedEntry
	for name, v := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(v, &meta); err != nil {
				return nil, nil, fmt.Errorf("%w: metadata: %v", ErrCheckpoint, err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, nil, fmt.Errorf("%w: tensor %q: %v", ErrCheckpoint, name, err)
		}
		if err := checkEntry(name, e, dataSize); err != nil {
			return nil, nil, err
		}
		es = append(es, namedEntry{name, e})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].Offsets[0] != es[j].Offsets[0] {
			return es[i].Offsets[0] < es[j].Offsets[0]
		}
		return es[i].Offsets[1] < es[j].Offsets[1] // empty tensors first
	})
	var end int64
	for _, e := range es {
		if e.Offsets[0] != end {
			return nil, nil, fmt.Errorf("%w: tensor %q starts at %d, want %d (gap or overlap)", ErrCheckpoint, e.name, e.Offsets[0], end)
		}
		end = e.Offsets[1]
	}
	if end != dataSize {
		return nil, nil, fmt.Errorf("%w: tensors cover %d of %d data bytes", ErrCheckpoint, end, dataSize)
	}
	return es, meta, nil
}

func checkEntry(name string, e stEntry, dataSize int64) error {
	es := e.DType.size()
	if es == 0 {
		return fmt.Errorf("%w: tensor %q has dtype %q, want F32 or BF16", ErrCheckpoint, name, e.DType)
	}
	if len(e.Shape) > maxSTRank {
		return fmt.Errorf("%w: tensor %q has rank %d", ErrCheckpoint, name, len(e.Shape))
	}
	n := int64(1)
	for _, d := range e.Shape {
		if d < 0 || (d > 0 && n > dataSize/int64(d)) {
			return fmt.Errorf("%w: tensor %q shape %v", ErrCheckpoint, name, e.Shape)
		}
		n *= int64(d)
	}
	b, en := e.Offsets[0], e.Offsets[1]
	if b < 0 || en < b || en > dataSize || en-b != es*n {
		return fmt.Errorf("%w: tensor %q offsets %v for shape %v (data %d bytes)", ErrCheckpoint, name, e.Offsets, e.Shape, dataSize)
	}
	return nil
}

// readSTData reads the tensors' bytes in file order.
func readSTData(r io.Reader, es []namedEntry) ([]Tensor, error) {
	ts := make([]Tensor, 0, len(es))
	buf := make([]byte, 1<<16)
	for _, e := range es {
		sz := int(e.DType.size())
		n := int((e.Offsets[1] - e.Offsets[0]) / int64(sz))
		t := Tensor{Name: e.name, Shape: append([]int{}, e.Shape...), Data: make([]float32, n)}
		for i := 0; i < n; {
			k := min(n-i, len(buf)/sz)
			if _, err := io.ReadFull(r, buf[:sz*k]); err != nil {
				return nil, fmt.Errorf("%w: tensor %q truncated: %v", ErrCheckpoint, e.name, err)
			}
			decodeValues(t.Data[i:i+k], buf, e.DType)
			i += k
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// decodeValues fills dst from the little-endian elements of type dt in buf.
func decodeValues(dst []float32, buf []byte, dt DType) {
	for j := range dst {
		if dt == BF16 {
			dst[j] = FromBF16(binary.LittleEndian.Uint16(buf[2*j:]))
		} else {
			dst[j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:]))
		}
	}
}
