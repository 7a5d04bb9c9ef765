package collective

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// fuzzContribs encodes 3 members' honest contributions to segment 1 of n
// values in chunks of ce, as an owner receives them.
func fuzzContribs(t testing.TB, n, ce int) [][]byte {
	const k = 3
	cfg := ScatterConfig{Shards: 1, ChunkElems: ce}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	xs, _ := pseudoGrads(rand.New(rand.NewPCG(1, uint64(n))), k, n*k)
	out := make([][]byte, k)
	for i := range k {
		sc := newScatter(i, k, nil, cfg)
		sc.ctx = t.Context()
		r := newScatterShard(sc, 0, Buffers{Src: xs[i], Dst: make([]float32, len(xs[i]))})
		if err := r.encode(); err != nil {
			t.Fatal(err)
		}
		out[i] = r.enc[r.segOff[1]:r.segOff[2]]
	}
	return out
}

// FuzzScatterDecode feeds an owner (RobustSegment) and a member receiving a
// result (decodeResult) bytes as a peer could send them: honest
// contributions and results XORed with the fuzzer's bytes at an offset,
// or cut. Errors are fine;
// panics, non-finite results, wrong blame or non-determinism are not.
func FuzzScatterDecode(f *testing.F) {
	f.Add(uint16(0), []byte{}, uint8(0), uint16(0))
	f.Add(uint16(12), []byte{0xff, 0xff, 0xff, 0x7f}, uint8(1), uint16(0))
	f.Add(uint16(1), []byte{1}, uint8(2), uint16(0))
	f.Add(uint16(0), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, uint8(0), uint16(7))
	contribs := fuzzContribs(f, 700, 256)
	honest, _, err := RobustSegment(ScatterConfig{Shards: 1, ChunkElems: 256}, []float32{10, 20, 30}, 1, 700, contribs)
	if err != nil {
		f.Fatal(err)
	}
	result := honest[:CodecInt8.msgSize(256)] // the first chunk of the owner's result
	f.Fuzz(func(t *testing.T, off uint16, mask []byte, member uint8, cut uint16) {
		i := int(member) % len(contribs)
		bad := mutate(contribs[i], int(off), mask, int(cut))
		in := append([][]byte(nil), contribs...)
		in[i] = bad
		cfg := ScatterConfig{Shards: 1, ChunkElems: 256}
		w := []float32{10, 20, 30}
		out, verdicts, err := RobustSegment(cfg, w, 1, 700, in)
		var pe *PeerError
		if err != nil {
			if !errors.As(err, &pe) || pe.Rank != i {
				t.Fatalf("error %v does not name member %d", err, i)
			}
		} else {
			checkFuzzResult(t, cfg, w, in, out, verdicts)
		}
		// The auditor's entry: the first chunk's messages, as an owner's
		// audit answer would carry them (the mutated one possibly cut).
		chunk0 := make([][]byte, len(in))
		for m, b := range in {
			chunk0[m] = b[:min(len(b), CodecInt8.msgSize(256))]
		}
		if aout, _, err := AuditChunk(cfg, w, 1, 0, chunk0); err == nil {
			if again, _, err := AuditChunk(cfg, w, 1, 0, chunk0); err != nil || !bytes.Equal(aout, again) {
				t.Fatalf("audit not deterministic: %v", err)
			}
		} else if !errors.As(err, &pe) {
			t.Fatalf("audit error %v names nobody", err)
		}
		rd := resultDecoder{pk: packer{p: codecParams{codec: CodecInt8}}}
		dst := make([]float32, 256)
		want := chunkHeader{codec: CodecInt8, phase: phaseDirectGather, step: 1, chunk: 0, n: 256}
		if rd.decode(dst, mutate(result, int(off), mask, int(cut)), want) == nil {
			for _, v := range dst {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("decoded %v", v)
				}
			}
		}
	})
}

// mutate returns msg XORed with mask at off (wrapping), cut to cut bytes
// when 0 < cut < len(msg).
func mutate(msg []byte, off int, mask []byte, cut int) []byte {
	out := append([]byte(nil), msg...)
	for j, b := range mask {
		if len(out) > 0 {
			out[(off+j)%len(out)] ^= b
		}
	}
	if cut > 0 && cut < len(out) {
		out = out[:cut]
	}
	return out
}

func checkFuzzResult(t *testing.T, cfg ScatterConfig, w []float32, in [][]byte, out []byte, verdicts [][]Verdict) {
	again, _, err := RobustSegment(cfg, w, 1, 700, in)
	if err != nil || !bytes.Equal(out, again) {
		t.Fatalf("not deterministic: %v", err)
	}
	if len(verdicts) != 3 {
		t.Fatalf("%d chunks of verdicts", len(verdicts))
	}
	for off := 0; off < len(out); {
		n := int(binary.BigEndian.Uint32(out[off+8:]))
		var tb [256]float32
		if err := readTable(&tb, out[off+chunkHeaderSize:]); err != nil {
			t.Fatalf("result table: %v", err)
		}
		off += CodecInt8.msgSize(n)
	}
}
