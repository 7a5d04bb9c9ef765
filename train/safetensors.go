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
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// WriteSafetensors writes ts as a safetensors file (F32, little endian) with
// optional string metadata, then syncs it. Tensors are stored in the order
// given; names must be unique and not "__metadata__".
func WriteSafetensors(path string, ts []Tensor, meta map[string]string) error {
	hdr, err := stHeader(ts, meta)
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
	var b4 [4]byte
	for _, t := range ts {
		for _, v := range t.Data {
			binary.LittleEndian.PutUint32(b4[:], math.Float32bits(v))
			w.Write(b4[:])
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

// stHeader builds the JSON header, padded with spaces to a multiple of 8.
func stHeader(ts []Tensor, meta map[string]string) ([]byte, error) {
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
		h[t.Name] = stEntry{DType: "F32", Shape: shape, Offsets: [2]int64{off, off + 4*int64(n)}}
		off += 4 * int64(n)
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

// ReadSafetensors reads an F32 safetensors file: its tensors in file order
// and its metadata. Malformed or truncated files give an error wrapping
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
// only, shapes matching their byte ranges, ranges in bounds, contiguous and
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
	if e.DType != "F32" {
		return fmt.Errorf("%w: tensor %q has dtype %q, want F32", ErrCheckpoint, name, e.DType)
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
	if b < 0 || en < b || en > dataSize || en-b != 4*n {
		return fmt.Errorf("%w: tensor %q offsets %v for shape %v (data %d bytes)", ErrCheckpoint, name, e.Offsets, e.Shape, dataSize)
	}
	return nil
}

// readSTData reads the tensors' bytes in file order.
func readSTData(r io.Reader, es []namedEntry) ([]Tensor, error) {
	ts := make([]Tensor, 0, len(es))
	buf := make([]byte, 1<<16)
	for _, e := range es {
		n := int((e.Offsets[1] - e.Offsets[0]) / 4)
		t := Tensor{Name: e.name, Shape: append([]int{}, e.Shape...), Data: make([]float32, n)}
		for i := 0; i < n; {
			k := min(n-i, len(buf)/4)
			if _, err := io.ReadFull(r, buf[:4*k]); err != nil {
				return nil, fmt.Errorf("%w: tensor %q truncated: %v", ErrCheckpoint, e.name, err)
			}
			for j := 0; j < k; j++ {
				t.Data[i+j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:]))
			}
			i += k
		}
		ts = append(ts, t)
	}
	return ts, nil
}
