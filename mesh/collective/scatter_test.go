package collective

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
)

// scatterRun is the outcome of one in-memory ScatterAllReduce.
type scatterRun struct {
	out  [][]float32
	res  []ScatterResult
	errs []error
}

// runScatter runs ScatterAllReduce on every member of an in-memory mesh,
// member i using transport wrap(i, t), src in[i] and weights w.
func runScatter(t testing.TB, ctx context.Context, in [][]float32, w []float32, cfg ScatterConfig,
	wrap func(i int, t *MemMesh) MeshTransport) scatterRun {
	t.Helper()
	k := len(in)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ts := NewMemMesh(k, 2*cfg.Shards)
	sr := scatterRun{out: make([][]float32, k), res: make([]ScatterResult, k), errs: make([]error, k)}
	var wg sync.WaitGroup
	for i := range k {
		sr.out[i] = make([]float32, len(in[i]))
		var tr MeshTransport = ts[i]
		if wrap != nil {
			tr = wrap(i, ts[i])
		}
		wg.Go(func() {
			sr.res[i], sr.errs[i] = ScatterAllReduce(ctx, tr, i, w, Buffers{Src: in[i], Dst: sr.out[i]}, cfg)
		})
	}
	wg.Wait()
	return sr
}

// TestScatterAllReduce covers k = 1..8 with awkward lengths, several
// shards and chunk sizes: every member ends with the same bits, close to
// the float64 weighted mean of honest pseudo-gradients.
func TestScatterAllReduce(t *testing.T) {
	ctx := testCtx(t)
	for _, k := range []int{1, 2, 3, 4, 5, 8} {
		for _, n := range []int{0, 1, k - 1, 1000, 4099} {
			for _, shards := range []int{1, 3} {
				rng := rand.New(rand.NewPCG(uint64(k), uint64(n)))
				xs, _ := pseudoGrads(rng, k, n)
				w := honestWeights(k)
				cfg := ScatterConfig{Shards: shards, ChunkElems: 256, Robust: RobustConfig{MaxWeight: testH}}
				sr := runScatter(t, ctx, xs, w, cfg, nil)
				for i, err := range sr.errs {
					if err != nil {
						t.Fatalf("k=%d n=%d member %d: %v", k, n, i, err)
					}
				}
				for i := 1; i < k; i++ {
					if !sameBits(sr.out[0], sr.out[i]) {
						t.Fatalf("k=%d n=%d: member %d differs from member 0", k, n, i)
					}
				}
				if n == 4099 && shards == 1 && k >= 3 { // chunks of ≥ 256 values
					if e := relErr(sr.out[0], refMean(xs, w)); e > 0.02 {
						t.Errorf("k=%d n=%d shards=%d: rel err %.4f vs the exact mean", k, n, shards, e)
					}
				}
			}
		}
	}
}
