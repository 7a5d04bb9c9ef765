package ckpt

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// A step update's Data (EncodeUpdate) is a container of its own, laid out
// like a snapshot's so that the transfer reads one header:
//
//	offset  size      field
//	0       4         magic "IUP1"
//	4       4         reserved, zero
//	8       8         outer step t the update applies to, uint64
//	16      8         nValues: values in Δ̄_t, uint64
//	24      8         nPacked: bytes of packed Δ̄_t, uint64
//	32      8         nState: bytes of state JSON, uint64
//	40      nPacked   Δ̄_t, packed (below)
//	...     nState    state JSON
//
// Δ̄_t is what the members' all-reduce produced: decoded from its codec's
// chunks, each of which holds at most 256 distinct values (int8 and
// lower-bit tables). Packed, it is a run of blocks, each a kind byte, a
// count m ≥ 1 of values (uint32 little-endian), and then either
//
//	kind 0: the m values, float32 little-endian (4 bytes a value);
//	kind 1: a palette size p−1 (1 byte), p float32 entries, and m bytes,
//	        each an index below p.
//
// The packer grows a block while its values fit one palette of 256, so a
// block covers about one codec chunk and Δ̄ takes about a byte a value
// (plus a 1 KiB table a chunk); values a palette would not make smaller
// go in raw blocks, consecutive ones merged. Lossless: every bit comes
// back.
const (
	updateMagic = "IUP1"
	packRaw     = 0
	packPalette = 1
)

// EncodeUpdate serializes the update of outer step t — the averaged
// pseudo-gradient avg, and the state JSON of step t+1 — into a container
// served on UpdateProtocolID, named by t and makes, the hash of the model
// G_{t+1} the update makes of G_t.
func EncodeUpdate(t uint64, makes string, avg []float32, state []byte) *Snapshot {
	packed := packUpdate(nil, avg)
	data := make([]byte, ckptHeaderSize, ckptHeaderSize+len(packed)+len(state))
	copy(data, updateMagic)
	binary.LittleEndian.PutUint64(data[8:], t)
	binary.LittleEndian.PutUint64(data[16:], uint64(len(avg)))
	binary.LittleEndian.PutUint64(data[24:], uint64(len(packed)))
	binary.LittleEndian.PutUint64(data[32:], uint64(len(state)))
	data = append(append(data, packed...), state...)
	return &Snapshot{Step: t, Hash: makes, Data: data, ChunkSize: DefaultChunkSize}
}

// DecodeUpdate parses an update container and returns copies of Δ̄ and
// the state JSON. Every length and index is checked before it is used.
func DecodeUpdate(data []byte) (avg []float32, state []byte, err error) {
	l, err := ckptParseHeader(data)
	if err != nil {
		return nil, nil, err
	}
	if !l.update {
		return nil, nil, fmt.Errorf("%w: magic %q, not an update", ErrSnapshot, data[:4])
	}
	avg, err = unpackUpdate(data[l.thetaOff:l.vOff], l.values)
	if err != nil {
		return nil, nil, err
	}
	return avg, append([]byte(nil), data[l.stateOff:]...), nil
}

// packUpdate appends the packed form of xs to dst.
func packUpdate(dst []byte, xs []float32) []byte {
	index := make(map[uint32]byte, 256)
	palette := make([]float32, 0, 256)
	rawAt := -1 // offset of the count of the raw block dst ends with
	for len(xs) > 0 {
		clear(index)
		palette = palette[:0]
		m := 0
		for ; m < len(xs); m++ {
			b := math.Float32bits(xs[m])
			if _, ok := index[b]; ok {
				continue
			}
			if len(palette) == 256 {
				break
			}
			index[b] = byte(len(palette))
			palette = append(palette, xs[m])
		}
		block := xs[:m]
		xs = xs[m:]
		// A palette block (5+1+4p+m bytes) must save the 5 bytes of the raw
		// block it may split in two: then packed Δ̄ is never over 4n+5.
		if 11+4*len(palette)+m > 4*m {
			if rawAt < 0 { // else the raw block before grows
				rawAt = len(dst) + 1
				dst = binary.LittleEndian.AppendUint32(append(dst, packRaw), 0)
			}
			binary.LittleEndian.PutUint32(dst[rawAt:], binary.LittleEndian.Uint32(dst[rawAt:])+uint32(m))
			for _, x := range block {
				dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
			}
			continue
		}
		rawAt = -1
		dst = binary.LittleEndian.AppendUint32(append(dst, packPalette), uint32(m))
		dst = append(dst, byte(len(palette)-1))
		for _, x := range palette {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
		}
		for _, x := range block {
			dst = append(dst, index[math.Float32bits(x)])
		}
	}
	return dst
}

// unpackUpdate decodes n values packed by packUpdate from b, all of it.
func unpackUpdate(b []byte, n int) ([]float32, error) {
	bad := func(format string, a ...any) ([]float32, error) {
		return nil, fmt.Errorf("%w: packed update: "+format, append([]any{ErrSnapshot}, a...)...)
	}
	// Every value takes at least a byte: n is bounded by len(b) before
	// anything is allocated.
	if n > len(b) {
		return bad("%d values in %d bytes", n, len(b))
	}
	xs := make([]float32, 0, n)
	var palette [256]float32
	for len(b) > 0 {
		if len(b) < 5 {
			return bad("block at value %d: %d bytes left", len(xs), len(b))
		}
		kind, m := b[0], int(binary.LittleEndian.Uint32(b[1:]))
		b = b[5:]
		if m < 1 || m > n-len(xs) {
			return bad("block at value %d: %d values, %d left", len(xs), m, n-len(xs))
		}
		switch {
		case kind == packRaw && len(b) >= 4*m:
			for i := range m {
				xs = append(xs, math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
			}
			b = b[4*m:]
		case kind == packPalette && len(b) >= 1:
			p := int(b[0]) + 1
			if len(b) < 1+4*p+m {
				return bad("block at value %d: %d bytes left, want %d", len(xs), len(b), 1+4*p+m)
			}
			for i := range p {
				palette[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[1+4*i:]))
			}
			for _, c := range b[1+4*p : 1+4*p+m] {
				if int(c) >= p {
					return bad("block at value %d: index %d of a palette of %d", len(xs), c, p)
				}
				xs = append(xs, palette[c])
			}
			b = b[1+4*p+m:]
		default:
			return bad("block at value %d: kind %d or its length wrong", len(xs), kind)
		}
	}
	if len(xs) != n {
		return bad("%d values, the header says %d", len(xs), n)
	}
	return slices.Clip(xs), nil
}
