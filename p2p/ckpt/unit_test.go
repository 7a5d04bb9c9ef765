package ckpt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"testing"
)

// ckptFloats returns n deterministic float32 values, none of them zero.
func ckptFloats(n int, seed uint32) []float32 {
	xs := make([]float32, n)
	x := seed | 1
	for i := range xs {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		xs[i] = float32(x%20001)/1000 - 10.0005
	}
	return xs
}

func TestCkptSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nTheta, nV int
		state      []byte
	}{
		{"empty", 0, 0, nil},
		{"theta only", 5, 0, nil},
		{"all parts", 1000, 1000, []byte(`{"lr":0.7,"inner":100}`)},
		{"state only", 0, 0, []byte("{}")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			theta, v := ckptFloats(tc.nTheta, 1), ckptFloats(tc.nV, 2)
			s := EncodeSnapshot(42, theta, v, tc.state)
			var raw bytes.Buffer
			binary.Write(&raw, binary.LittleEndian, theta)
			sum := sha256.Sum256(raw.Bytes())
			if s.Hash != hex.EncodeToString(sum[:]) {
				t.Fatalf("hash %s is not sha256 of θ₀'s little-endian bytes", s.Hash)
			}
			if s.Step != 42 || s.ChunkSize != DefaultChunkSize {
				t.Fatalf("step %d chunk size %d", s.Step, s.ChunkSize)
			}
			gt, gv, gs, err := DecodeSnapshot(s.Data)
			if err != nil {
				t.Fatal(err)
			}
			if !ckptFloatsEqual(gt, theta) || !ckptFloatsEqual(gv, v) || !bytes.Equal(gs, tc.state) {
				t.Fatalf("round trip differs: θ %d/%d v %d/%d state %q", len(gt), len(theta), len(gv), len(v), gs)
			}
			if st, err := SnapshotStep(s.Data); err != nil || st != 42 {
				t.Fatalf("step %d err %v", st, err)
			}
		})
	}
}

// ckptFloatsEqual compares bit patterns (NaN-safe).
func ckptFloatsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestCkptDecodeSnapshotRejects(t *testing.T) {
	good := EncodeSnapshot(1, ckptFloats(4, 3), ckptFloats(2, 4), []byte("{}")).Data
	set := func(off int, v uint64) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint64(b[off:], v)
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"short", good[:ckptHeaderSize-1]},
		{"bad magic", append([]byte("XXXX"), good[4:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", append(append([]byte(nil), good...), 0)},
		{"theta too long", set(16, 5)},
		{"theta huge", set(16, math.MaxUint64/4+1)},
		{"v huge", set(24, math.MaxUint64)},
		{"state huge", set(32, math.MaxUint64)},
		{"sum overflows", set(24, math.MaxUint64/4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, _, err := DecodeSnapshot(tc.data); !errors.Is(err, ErrSnapshot) {
				t.Fatalf("want ErrSnapshot, got %v", err)
			}
		})
	}
}

func FuzzCkptDecodeSnapshot(f *testing.F) {
	f.Add(EncodeSnapshot(7, ckptFloats(3, 5), ckptFloats(3, 6), []byte(`{"a":1}`)).Data)
	f.Add(EncodeSnapshot(0, nil, nil, nil).Data)
	f.Add([]byte("ICK1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		theta, v, state, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		if ckptHeaderSize+4*len(theta)+4*len(v)+len(state) != len(data) {
			t.Fatalf("decoded parts do not add up to %d bytes", len(data))
		}
		again := EncodeSnapshot(binary.LittleEndian.Uint64(data[8:]), theta, v, state)
		if !bytes.Equal(again.Data, data) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// ckptTestManifest builds the manifest of a snapshot with chunk size cs.
func ckptTestManifest(t testing.TB, cs int) *ckptManifest {
	s := EncodeSnapshot(9, ckptFloats(3*cs/8, 7), ckptFloats(cs/8, 8), []byte("{}"))
	s.ChunkSize = cs
	m, err := ckptBuildManifest(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCkptManifestRoundTrip(t *testing.T) {
	m := ckptTestManifest(t, MinChunkSize)
	if len(m.chunks) != 3 { // 40 header + 2·cs bytes of floats + 2 → 3 chunks
		t.Fatalf("%d chunks for %d bytes", len(m.chunks), m.total)
	}
	got, err := ckptDecodeManifest(m.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.key() != m.key() || got.step != m.step || len(got.chunks) != len(m.chunks) || got.chunks[2] != m.chunks[2] {
		t.Fatalf("manifest round trip differs")
	}
	for _, st := range []uint8{ckptStatusMismatch, ckptStatusNone} {
		e := (&ckptManifest{status: st, step: 3}).encode()
		if got, err := ckptDecodeManifest(e); err != nil || got.status != st || got.step != 3 {
			t.Fatalf("status %d: %v", st, err)
		}
	}
}

func TestCkptDecodeManifestRejects(t *testing.T) {
	m := ckptTestManifest(t, MinChunkSize)
	good := m.encode()
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		p    []byte
	}{
		{"short", good[:ckptManifestFixed-1]},
		{"count beyond payload", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[85:], 4); return b })},
		{"count huge", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[85:], math.MaxUint32); return b })},
		{"truncated hashes", good[:len(good)-1]},
		{"chunk size small", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[41:], MinChunkSize-1); return b })},
		{"chunk size large", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[41:], MaxChunkSize+1); return b })},
		{"total too big for chunks", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[45:], uint64(m.total)+1<<20); return b })},
		{"total too small for chunks", mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[45:], 100); return b })},
		{"root mismatch", mod(func(b []byte) []byte { b[60] ^= 1; return b })},
		{"hash flipped", mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })},
		{"unknown status", mod(func(b []byte) []byte { b[0] = 9; return b })},
		{"mismatch with hashes", mod(func(b []byte) []byte { b[0] = ckptStatusMismatch; return b })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ckptDecodeManifest(tc.p); !errors.Is(err, ErrProtocol) {
				t.Fatalf("want ErrProtocol, got %v", err)
			}
		})
	}
}

func FuzzCkptDecodeManifest(f *testing.F) {
	f.Add(ckptTestManifest(f, MinChunkSize).encode())
	f.Add((&ckptManifest{status: ckptStatusMismatch, step: 1}).encode())
	f.Add(make([]byte, ckptManifestFixed))
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := ckptDecodeManifest(p)
		if err != nil {
			return
		}
		if m.status == ckptStatusOK {
			if ckptNumChunks(m.total, m.chunkSize) != len(m.chunks) || ckptRoot(m.chunks) != m.root {
				t.Fatalf("accepted an inconsistent manifest")
			}
			last, end := m.chunkRange(len(m.chunks) - 1)
			if last >= end || end != m.total {
				t.Fatalf("last chunk [%d,%d) of %d bytes", last, end, m.total)
			}
		}
		if !bytes.Equal(m.encode(), p) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzCkptDecodeRequests(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1})
	f.Add(ckptEncodeManifestReq(3, [32]byte{1}, [32]byte{2}))
	f.Add(ckptEncodeError(ckptErrBusy, "busy\x00\xff"))
	f.Fuzz(func(t *testing.T, p []byte) {
		if i, err := ckptDecodeChunkReq(p); err == nil && !bytes.Equal(ckptEncodeChunkReq(i), p) {
			t.Fatalf("chunk request re-encodes differently")
		}
		if st, h, run, err := ckptDecodeManifestReq(p); err == nil && !bytes.Equal(ckptEncodeManifestReq(st, h, run), p) {
			t.Fatalf("manifest request re-encodes differently")
		}
		if _, text, err := ckptDecodeError(p); err == nil {
			for _, c := range []byte(text) {
				if c < 0x20 || c > 0x7e {
					t.Fatalf("unsanitized byte %#x in error text", c)
				}
			}
		}
	})
}
