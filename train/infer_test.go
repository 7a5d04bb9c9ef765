package train

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// inferCfg has Heads ≠ KVHeads (4 query heads share 2 kv heads) and a
// context long enough to cross a chunk boundary (inferChunk).
var inferCfg = Config{Name: "infer", Vocab: 37, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 40,
	SeqLen: 80, RopeTheta: 10000, NormEps: 1e-5, ZLoss: 0.01}

// trainingLogits runs the training forward (one row) on tokens and returns
// its model, whose logits(n) are those after tokens[n].
func trainingLogits(t *testing.T, c Config, params []float32, tokens []int32) *model {
	t.Helper()
	tm, err := newModelLanes(c, 1, len(tokens), 1)
	if err != nil {
		t.Fatal(err)
	}
	copy(tm.params, params)
	tm.forward(tokens, tokens, 0)
	return tm
}

// relDiff is max |a−b| / max |b| over the row.
func relDiff(a, b []float32) float64 {
	var d, s float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		s = math.Max(s, math.Abs(float64(b[i])))
	}
	return d / s
}

// TestInferIncrementalMatchesTraining: the logits of the cached path, fed one
// token at a time, and those of a prompt fed as chunks then one token at a
// time, equal the training forward's at every position.
func TestInferIncrementalMatchesTraining(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	c := inferCfg
	params := make([]float32, c.NumParams())
	randParams(r, c, params)
	tokens := randTokens(r, c.SeqLen, c.Vocab)
	tm := trainingLogits(t, c, params, tokens)
	m, err := NewModel(c, params)
	if err != nil {
		t.Fatal(err)
	}
	for _, prompt := range []int{1, 70} { // 70: a chunk of inferChunk, then 6 more
		m.Reset()
		var worst float64
		for n := prompt - 1; n < len(tokens); n++ {
			in := tokens[n : n+1]
			if n == prompt-1 {
				in = tokens[:prompt]
			}
			got, err := m.Forward(in)
			if err != nil {
				t.Fatal(err)
			}
			worst = math.Max(worst, relDiff(got, tm.logits(n)))
		}
		t.Logf("prompt %d: incremental vs training forward: max relative difference %.3g", prompt, worst)
		if worst > 1e-4 {
			t.Fatalf("prompt %d: logits differ by %.3g relative", prompt, worst)
		}
		if m.Len() != c.SeqLen {
			t.Fatalf("cache holds %d tokens, want %d", m.Len(), c.SeqLen)
		}
	}
}

// TestInferSlides: past the context window (SeqLen, or a shorter one set
// by SetContext) the model re-encodes the last window/2 tokens, so its
// logits are the training forward's on that truncated context.
func TestInferSlides(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := inferCfg
	params := make([]float32, c.NumParams())
	randParams(r, c, params)
	m, _ := NewModel(c, params)
	for _, W := range []int{c.SeqLen, 21} {
		if err := m.SetContext(W); err != nil {
			t.Fatal(err)
		}
		tokens := randTokens(r, W+5, c.Vocab)
		if _, err := m.Forward(tokens[:W]); err != nil {
			t.Fatal(err)
		}
		got, err := m.Forward(tokens[W:])
		if err != nil {
			t.Fatal(err)
		}
		kept := tokens[W-W/2:]
		if m.Len() != len(kept) {
			t.Fatalf("window %d: after sliding the cache holds %d tokens, want %d", W, m.Len(), len(kept))
		}
		tm := trainingLogits(t, c, params, kept)
		if d := relDiff(got, tm.logits(len(kept)-1)); d > 1e-4 {
			t.Fatalf("window %d: logits after sliding differ by %.3g relative", W, d)
		}
	}
	for _, W := range []int{0, c.SeqLen + 1} {
		if err := m.SetContext(W); !errors.Is(err, ErrConfig) {
			t.Fatalf("SetContext(%d): %v, want ErrConfig", W, err)
		}
	}
}

func TestInferRejects(t *testing.T) {
	c := inferCfg
	params := make([]float32, c.NumParams())
	if _, err := NewModel(c, params[1:]); !errors.Is(err, ErrConfig) {
		t.Fatalf("short params: %v", err)
	}
	m, err := NewModel(c, params)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range [][]int32{nil, {1, int32(c.Vocab)}, {-1}} {
		if _, err := m.Forward(in); !errors.Is(err, ErrToken) {
			t.Fatalf("Forward(%v): %v, want ErrToken", in, err)
		}
	}
	if m.Len() != 0 {
		t.Fatalf("rejected input entered the cache (%d tokens)", m.Len())
	}
}

// BenchmarkInferGenerate measures decoding one token at a time at positions
// 0..SeqLen−1 of freshly initialised presets (cost does not depend on the
// values), in tokens per second.
func BenchmarkInferGenerate(b *testing.B) {
	for _, name := range []string{"tiny", "small"} {
		b.Run("preset="+name, func(b *testing.B) {
			c, _ := Preset(name)
			params := make([]float32, c.NumParams())
			InitParams(c, 1, params)
			m, err := NewModel(c, params)
			if err != nil {
				b.Fatal(err)
			}
			tok := []int32{1}
			n := 0
			for b.Loop() {
				if m.Len() == c.SeqLen {
					m.Reset()
				}
				m.Forward(tok)
				n++
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
