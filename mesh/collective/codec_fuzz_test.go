package collective

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// fuzzCodecCase is one compressed codec's honest messages, as a peer
// would send them: 3 members' contributions to one chunk and the owner's
// result.
type fuzzCodecCase struct {
	cfg      ScatterConfig
	contribs [][]byte
	result   []byte
}

func fuzzCodecCases(t testing.TB) []fuzzCodecCase {
	const k, n = 3, 700
	var cases []fuzzCodecCase
	rng := rand.New(rand.NewPCG(1, 2))
	xs, _ := pseudoGrads(rng, k, n)
	for _, cc := range append(collectiveCodecs, AllReduceConfig{Codec: CodecTopK, TopK: 3, TopKBlock: 100, TopKBits: 4}) {
		cfg := scatterCfg(cc, 1, 1024)
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		c := fuzzCodecCase{cfg: cfg}
		for i := range k {
			pk := packer{p: cfg.params()}
			msg, _ := encodeMsg(t, &pk, xs[i])
			c.contribs = append(c.contribs, msg)
		}
		out, _, err := AuditChunk(cfg, honestWeights(k), 0, 0, c.contribs)
		if err != nil {
			t.Fatal(err)
		}
		c.result = out
		cases = append(cases, c)
	}
	return cases
}

// FuzzCodecDecode feeds the compressed codecs' decoders what a peer could
// send: an honest contribution or result XORed with the fuzzer's bytes at
// an offset, or cut, to the owner (RobustSegment: errors must name the
// sender), to a ring member or a member receiving a result (parse, read,
// apply: errors are fine, non-finite values are not), and to
// chunkMsgLen and MessageNorm. Panics and non-determinism are failures.
func FuzzCodecDecode(f *testing.F) {
	f.Add(uint8(0), false, uint16(0), []byte{}, uint16(0))
	f.Add(uint8(2), false, uint16(25), []byte{0x40}, uint16(0))
	f.Add(uint8(2), true, uint16(13), []byte{1}, uint16(0))
	f.Add(uint8(4), false, uint16(40), []byte{0xff, 0x01}, uint16(0))
	f.Add(uint8(1), true, uint16(12), []byte{0, 0, 0xc0, 0x7f}, uint16(30))
	cases := fuzzCodecCases(f)
	f.Fuzz(func(t *testing.T, which uint8, result bool, off uint16, mask []byte, cut uint16) {
		c := cases[int(which)%len(cases)]
		member := int(off) % len(c.contribs)
		honest := c.contribs[member]
		if result {
			honest = c.result
		}
		bad := mutate(honest, int(off), mask, int(cut))
		fuzzLength(t, bad)
		fuzzMember(t, c.cfg.params(), bad, result)
		if result {
			return
		}
		in := append([][]byte(nil), c.contribs...)
		in[member] = bad
		out, v, err := RobustSegment(c.cfg, honestWeights(len(in)), 0, 700, in)
		var pe *PeerError
		switch {
		case err != nil && (!errors.As(err, &pe) || pe.Rank != member):
			t.Fatalf("error %v does not name member %d", err, member)
		case err == nil:
			again, v2, err := RobustSegment(c.cfg, honestWeights(len(in)), 0, 700, in)
			if err != nil || !bytes.Equal(out, again) || len(v) != len(v2) {
				t.Fatalf("not deterministic: %v", err)
			}
			fuzzMember(t, c.cfg.params(), out, true)
		}
	})
}

// fuzzLength: chunkMsgLen and MessageNorm never panic, and agree.
func fuzzLength(t *testing.T, msg []byte) {
	m, ok := chunkMsgLen(msg)
	_, nok := MessageNorm(msg)
	if nok != (ok && m == len(msg)) {
		t.Fatalf("chunkMsgLen %d, %v and MessageNorm's %v disagree on %d bytes", m, ok, nok, len(msg))
	}
}

// fuzzMember decodes msg as a ring member or a result's receiver does:
// what decodes is finite.
func fuzzMember(t *testing.T, p codecParams, msg []byte, result bool) {
	if len(msg) < chunkHeaderSize {
		return
	}
	phase := uint8(phaseDirectScatter)
	if result {
		phase = phaseDirectGather
	}
	want := chunkHeader{codec: p.codec, phase: phase, n: 700}
	payload, err := p.parse(msg, want, result)
	if err != nil {
		return
	}
	pk := packer{p: p}
	if err := pk.read(payload, 700, result, true); err != nil {
		return
	}
	dst := make([]float32, 700)
	pk.apply(dst, payload, 0.5, true)
	pk.apply(dst, payload, 1, false)
	for _, v := range dst {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("decoded %v", v)
		}
	}
}
