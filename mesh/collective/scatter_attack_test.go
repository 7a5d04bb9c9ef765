package collective

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// poisonMesh is an attacker's transport that rewrites the tables of its
// contributions on the wire (lanes < shards): what an attacker whose
// encoder refuses NaN and ±Inf would do.
type poisonMesh struct {
	*MemMesh
	shards int
	value  float32
	p      codecParams
}

func (p *poisonMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	off, entries := chunkHeaderSize, 256
	switch p.p.codec {
	case CodecQ4, CodecQ2, CodecQ1:
		entries = p.p.levels()
	case CodecTopK:
		off, entries = chunkHeaderSize+topkDescSize, p.p.levels()
	}
	if lane < p.shards && len(msg) > off+4*entries {
		msg = append([]byte(nil), msg...)
		for b := range entries {
			binary.LittleEndian.PutUint32(msg[off+4*b:], math.Float32bits(p.value))
		}
	}
	return p.MemMesh.Send(ctx, to, lane, msg)
}

// attackBound is the largest relative L2 error vs the honest members'
// weighted mean allowed under attack, measured (docs/robust.md): the honest
// pseudo-gradients differ from each other by as much as they agree, so a
// quarter of the members can move any estimator by about this much.
func attackBound(k, f int) float64 {
	if 4*f <= k {
		return 0.75
	}
	return 1.5
}

// TestScatterAttacks runs every attack of attacks() with f = 1 … ⌊(k−1)/2⌋
// attackers (members 0..f−1) among k = 4, 8, 16 through ScatterAllReduce:
// the members still agree bit for bit, the result stays within
// attackBound of the honest mean, the plain mean does not (for the attacks
// that move it), non-finite contributions are rejected, huge ones flagged,
// and no honest member is ever flagged. With int8, and with each
// compressed codec for k = 4 and 8 (int8 with k = 16 too without -short;
// the compressed codecs not under the race detector).
func TestScatterAttacks(t *testing.T) {
	const n = 1 << 13
	codecs := append([]AllReduceConfig{{Codec: CodecInt8}}, collectiveCodecs...)
	for _, cc := range codecs {
		for _, k := range []int{4, 8, 16} {
			if k == 16 && (testing.Short() || cc.Codec != CodecInt8) || raceEnabled && cc.Codec != CodecInt8 {
				continue // 84 of the 132 cases; the compressed codecs' numerics gain nothing from -race
			}
			for f := 1; f <= (k-1)/2; f++ {
				for _, a := range attacks() {
					t.Run(fmt.Sprintf("%s/k=%d/f=%d/%s", caseName(cc), k, f, a.name), func(t *testing.T) {
						scatterAttack(t, testCtx(t), cc, a, k, f, n) // a deadline per case: 132 under -race take > 20 s
					})
				}
			}
		}
	}
}

// codecSlack is what encoding the owners' results adds to attackBound: a
// little over the largest error measured on these inputs.
var codecSlack = map[Codec]float64{CodecInt8: 0, CodecQ4: 0.05, CodecQ2: 0.15, CodecQ1: 0.1, CodecTopK: 0.22}

func scatterAttack(t *testing.T, ctx context.Context, cc AllReduceConfig, a attack, k, f, n int) {
	c := newAttackCase(a, k, f, n, 7)
	cfg := scatterCfg(cc, 2, 1<<10)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var wrap func(int, *MemMesh) MeshTransport
	if a.name == "nan" || a.name == "inf" {
		wrap = wireAttacker(f, cfg, a.name)
		c.xs = cloneVecs(c.xs)
		for i := range f { // the encoder refuses non-finite values: poison the wire
			copy(c.xs[i], c.xs[f])
		}
	}
	sr := runScatter(t, ctx, c.xs, c.w, cfg, wrap)
	for i, err := range sr.errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		if !sameBits(sr.out[0], sr.out[i]) {
			t.Fatalf("member %d differs from member 0", i)
		}
	}
	honest, dec := c.honest, c.xs
	if cfg.Codec.compressed() { // what the owners see: the decoded contributions
		dec = make([][]float32, k)
		for i, x := range c.xs {
			dec[i] = decodedScatter(t, cfg, x, k)
		}
		w := append([]float32(nil), c.w...)
		for i := range f {
			w[i] = 0
		}
		honest = toF64(plainMean(dec, w))
	}
	e := relErrOK(sr.out[0], honest)
	plain := relErrOK(plainMean(dec, c.w), honest)
	if wrap != nil {
		plain = math.Inf(1)
	}
	bound := attackBound(len(c.xs), f) + codecSlack[cfg.Codec]
	t.Logf("rel err vs honest mean %.3f (bound %.2f), plain mean %.3g", e, bound, plain)
	if e > bound {
		t.Errorf("robust rel err %.3f > %.2f", e, bound)
	}
	if a.plainFails && plain <= bound {
		t.Errorf("the plain mean stays within the bound (%.3f): the attack proves nothing", plain)
	}
	checkVerdicts(t, sr.res, a.name, f)
}

func wireAttacker(f int, cfg ScatterConfig, name string) func(int, *MemMesh) MeshTransport {
	v := float32(math.NaN())
	if name == "inf" {
		v = float32(math.Inf(1))
	}
	return func(i int, m *MemMesh) MeshTransport {
		if i < f {
			return &poisonMesh{MemMesh: m, shards: cfg.Shards, value: v, p: cfg.params()}
		}
		return m
	}
}

// decodedScatter is what x's contribution decodes to, cut into shards,
// k segments and chunks as the scatter cuts it.
func decodedScatter(t testing.TB, cfg ScatterConfig, x []float32, k int) []float32 {
	pk := packer{p: cfg.params()}
	out := make([]float32, len(x))
	for s := range cfg.Shards {
		lo, hi := span(len(x), cfg.Shards, s)
		for j := range k {
			slo, shi := span(hi-lo, k, j)
			for c := lo + slo; c < lo+shi; c += cfg.ChunkElems {
				e := min(c+cfg.ChunkElems, lo+shi)
				msg, _ := encodeMsg(t, &pk, append([]float32(nil), x[c:e]...))
				if err := pk.read(msg[chunkHeaderSize:], e-c, false, true); err != nil {
					t.Fatal(err)
				}
				pk.apply(out[c:e], msg[chunkHeaderSize:], 1, false)
			}
		}
	}
	return out
}

// checkVerdicts: honest members (≥ f) are never flagged; honest owners
// reject in every chunk the attackers sending non-finite values and flag
// the huge ones hard (an attacker owner reports what it likes).
func checkVerdicts(t *testing.T, res []ScatterResult, attack string, f int) {
	t.Helper()
	want := map[string]Flag{"nan": FlagRejected, "inf": FlagRejected, "flip×−1000": FlagHard,
		"scale×1000": FlagHard, "noise×1000": FlagHard}
	for owner, r := range res {
		for _, seg := range r.Owned {
			for c, vs := range seg.Verdicts {
				for i, v := range vs {
					if i >= f && v.Flag != FlagNone {
						t.Errorf("owner %d shard %d chunk %d: honest member %d flagged %+v", owner, seg.Shard, c, i, v)
					}
					if w, ok := want[attack]; ok && i < f && owner >= f && v.Flag != w {
						t.Errorf("owner %d chunk %d: attacker %d: %+v, want flag %d", owner, c, i, v, w)
					}
				}
			}
		}
	}
}
