package ckpt

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
)

// A checkpoint snapshot's Data is one little-endian container:
//
//	offset  size        field
//	0       4           magic "ICK1" (the 1 is the format version)
//	4       4           reserved, zero
//	8       8           outer step, uint64
//	16      8           nTheta: number of float32 in θ₀, uint64
//	24      8           nV: number of float32 in v (outer momentum), uint64
//	32      8           nState: bytes of state JSON, uint64
//	40      4·nTheta    θ₀, float32 little-endian
//	...     4·nV        v, float32 little-endian
//	...     nState      state JSON
//
// The length of Data is exactly the sum of these parts. The θ₀ bytes are
// contiguous, so the model hash the mesh gossips (hex SHA-256 of θ₀'s float32
// little-endian bytes, train.Hash) is the SHA-256 of one sub-slice of Data.
const (
	ckptMagic      = "ICK1"
	ckptHeaderSize = 40
)

// DefaultChunkSize is the chunk size of a snapshot whose ChunkSize is 0: 1 MiB.
const DefaultChunkSize = 1 << 20

// ErrSnapshot is returned (wrapped) when snapshot data is malformed.
var ErrSnapshot = errors.New("p2p: malformed checkpoint snapshot")

// Snapshot is an immutable serialized model state of one outer step: the node
// builds it with EncodeSnapshot after each outer step and hands it to the
// checkpoint server, which serves it from memory. Nobody may modify Data
// after the snapshot has been handed out.
type Snapshot struct {
	// Step is the outer step the state belongs to.
	Step uint64
	// Hash is the model hash the mesh gossips for Step: hex SHA-256 of θ₀'s
	// float32 little-endian bytes (64 lowercase hex digits).
	Hash string
	// Data is the container described above (EncodeSnapshot).
	Data []byte
	// ChunkSize is the transfer unit in bytes; 0 means DefaultChunkSize.
	// It must lie in [MinChunkSize, MaxChunkSize].
	ChunkSize int
}

// EncodeSnapshot serializes θ₀, the outer momentum v and a small state JSON of
// one outer step into a Snapshot with the default chunk size. Hash is computed
// from theta0 and equals train.Hash(θ₀).
func EncodeSnapshot(step uint64, theta0, v []float32, state []byte) *Snapshot {
	data := make([]byte, ckptHeaderSize+4*len(theta0)+4*len(v)+len(state))
	copy(data, ckptMagic)
	binary.LittleEndian.PutUint64(data[8:], step)
	binary.LittleEndian.PutUint64(data[16:], uint64(len(theta0)))
	binary.LittleEndian.PutUint64(data[24:], uint64(len(v)))
	binary.LittleEndian.PutUint64(data[32:], uint64(len(state)))
	off := ckptPutFloats(data[ckptHeaderSize:], theta0)
	off += ckptPutFloats(data[ckptHeaderSize+off:], v)
	copy(data[ckptHeaderSize+off:], state)
	sum := sha256.Sum256(data[ckptHeaderSize : ckptHeaderSize+4*len(theta0)])
	return &Snapshot{Step: step, Hash: hex.EncodeToString(sum[:]), Data: data, ChunkSize: DefaultChunkSize}
}

// DecodeSnapshot parses a snapshot container (Snapshot.Data) and returns
// copies of θ₀, v and the state JSON. Every length is checked against the
// size of data before anything is allocated.
func DecodeSnapshot(data []byte) (theta0, v []float32, state []byte, err error) {
	l, err := ckptParseHeader(data)
	if err != nil {
		return nil, nil, nil, err
	}
	if l.update {
		return nil, nil, nil, fmt.Errorf("%w: magic %q, not a snapshot", ErrSnapshot, data[:4])
	}
	theta0 = ckptGetFloats(data[l.thetaOff:l.vOff])
	v = ckptGetFloats(data[l.vOff:l.stateOff])
	state = append([]byte(nil), data[l.stateOff:]...)
	return theta0, v, state, nil
}

// SnapshotStep returns the outer step recorded in a snapshot container.
func SnapshotStep(data []byte) (uint64, error) {
	if _, err := ckptParseHeader(data); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(data[8:]), nil
}

// ckptLayout holds the byte offsets of the parts of a container.
type ckptLayout struct {
	thetaOff, vOff, stateOff int
	update                   bool // a step update (magic IUP1): its θ₀ region is values packed
	values                   int  // an update's values
}

// ckptParseHeader checks the header of a container against len(data) and
// returns the offsets of its parts. The lengths must add up to len(data).
func ckptParseHeader(data []byte) (ckptLayout, error) {
	if len(data) < ckptHeaderSize {
		return ckptLayout{}, fmt.Errorf("%w: %d bytes, header needs %d", ErrSnapshot, len(data), ckptHeaderSize)
	}
	if magic := string(data[:4]); magic != ckptMagic && magic != updateMagic || binary.LittleEndian.Uint32(data[4:]) != 0 {
		return ckptLayout{}, fmt.Errorf("%w: bad magic %q", ErrSnapshot, data[:4])
	}
	nTheta := binary.LittleEndian.Uint64(data[16:])
	nV := binary.LittleEndian.Uint64(data[24:])
	nState := binary.LittleEndian.Uint64(data[32:])
	rest := uint64(len(data) - ckptHeaderSize)
	if string(data[:4]) == updateMagic { // nTheta values packed in nV bytes
		if nV > rest || nState != rest-nV || nTheta > nV {
			return ckptLayout{}, fmt.Errorf("%w: update lengths: %d values packed in %d bytes, state %d, in %d bytes",
				ErrSnapshot, nTheta, nV, nState, rest)
		}
		off := ckptHeaderSize + int(nV)
		return ckptLayout{thetaOff: ckptHeaderSize, vOff: off, stateOff: off, update: true, values: int(nTheta)}, nil
	}
	// Each term is compared with rest before it is multiplied or added, so
	// nothing overflows.
	if nTheta > rest/4 || nV > rest/4 || nState > rest ||
		4*nTheta > rest-nState || 4*nV > rest-nState-4*nTheta || 4*nTheta+4*nV+nState != rest {
		return ckptLayout{}, fmt.Errorf("%w: lengths θ₀ %d, v %d, state %d do not fill %d bytes",
			ErrSnapshot, nTheta, nV, nState, rest)
	}
	l := ckptLayout{thetaOff: ckptHeaderSize}
	l.vOff = l.thetaOff + int(4*nTheta)
	l.stateOff = l.vOff + int(4*nV)
	return l, nil
}

// ckptPutFloats writes xs as float32 little-endian into dst and returns the
// number of bytes written.
func ckptPutFloats(dst []byte, xs []float32) int {
	for i, x := range xs {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
	}
	return 4 * len(xs)
}

// ckptGetFloats decodes float32 little-endian bytes; len(b) is a multiple of 4.
func ckptGetFloats(b []byte) []float32 {
	xs := make([]float32, len(b)/4)
	for i := range xs {
		xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return xs
}
