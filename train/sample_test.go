package train

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func newSampler(t *testing.T, o SampleOptions) *Sampler {
	t.Helper()
	s, err := NewSampler(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSampleOptionsValidate(t *testing.T) {
	for _, o := range []SampleOptions{
		{Temperature: -0.1, TopP: 1}, {Temperature: math.NaN(), TopP: 1}, {Temperature: math.Inf(1), TopP: 1},
		{Temperature: 1, TopP: 0}, {Temperature: 1, TopP: 1.01}, {Temperature: 1, TopP: math.NaN()},
	} {
		if _, err := NewSampler(o); !errors.Is(err, ErrSample) {
			t.Errorf("%+v: %v, want ErrSample", o, err)
		}
	}
}

// TestSampleFrequencies: at temperature T with top-p 1 the draws follow
// softmax(logits/T); with top-p they stay in the nucleus, renormalised;
// temperature 0 and a tiny top-p are the argmax.
func TestSampleFrequencies(t *testing.T) {
	logits := []float32{1, 3, 0.5, 2.5, -1, 3} // ties at 1 and 5: argmax 1
	for _, tc := range []struct {
		temp, topP float64
		want       []float64 // probabilities
	}{
		{1, 1, softmax64(logits, 1, nil)},
		{0.5, 1, softmax64(logits, 0.5, nil)},
		{1, 0.7, softmax64(logits, 1, []int{1, 5})},     // p(1) = p(5) ≈ 0.352: two reach 0.7
		{1, 0.75, softmax64(logits, 1, []int{1, 5, 3})}, // 0.70: the third is needed
		{1, 1e-9, onehot(len(logits), 1)},
		{0, 1, onehot(len(logits), 1)},
	} {
		s := newSampler(t, SampleOptions{Temperature: tc.temp, TopP: tc.topP, Seed: 5})
		const n = 40000
		count := make([]float64, len(logits))
		for range n {
			count[s.Sample(logits)]++
		}
		for i, p := range tc.want {
			sd := math.Sqrt(p*(1-p)/n) + 1e-12
			if f := count[i] / n; math.Abs(f-p) > 5*sd {
				t.Errorf("T=%v top-p=%v: token %d drawn %.4f of the time, want %.4f", tc.temp, tc.topP, i, f, p)
			}
		}
	}
}

// softmax64 is softmax(logits/T) restricted to keep (all when nil).
func softmax64(logits []float32, T float64, keep []int) []float64 {
	p := make([]float64, len(logits))
	var sum float64
	for i, l := range logits {
		if keep == nil || slices.Contains(keep, i) {
			p[i] = math.Exp(float64(l) / T)
			sum += p[i]
		}
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

func onehot(n, i int) []float64 {
	p := make([]float64, n)
	p[i] = 1
	return p
}

func randModel(t *testing.T, seed uint64) (*Model, []float32) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 9))
	params := make([]float32, inferCfg.NumParams())
	randParams(r, inferCfg, params)
	m, err := NewModel(inferCfg, params)
	if err != nil {
		t.Fatal(err)
	}
	return m, params
}

// TestSampleGenerateDeterministic: the same seed gives the same tokens, also
// across the slide at SeqLen; greedy decoding is the argmax of each step's
// logits; generation stops at eot.
func TestSampleGenerateDeterministic(t *testing.T) {
	m, _ := randModel(t, 11)
	prompt := []int32{3, 1, 4, 1, 5}
	gen := func(o SampleOptions, eot int32) []int32 {
		var emitted []int32
		out, err := m.Generate(prompt, 100, newSampler(t, o), eot, func(tok int32) error {
			emitted = append(emitted, tok)
			return nil
		})
		if err != nil || !slices.Equal(out, emitted) {
			t.Fatalf("Generate: %v, returned %v, emitted %v", err, out, emitted)
		}
		return out
	}
	o := SampleOptions{Temperature: 1, TopP: 0.9, Seed: 42}
	a, b := gen(o, NoEOT), gen(o, NoEOT)
	if len(a) != 100 || !slices.Equal(a, b) {
		t.Fatalf("same seed, different tokens:\n%v\n%v", a, b)
	}
	o.Seed = 43
	if slices.Equal(a, gen(o, NoEOT)) {
		t.Fatal("seeds 42 and 43 gave the same 100 tokens")
	}
	greedy := gen(SampleOptions{TopP: 1}, NoEOT)
	m.Reset()
	logits, _ := m.Forward(prompt)
	for i, tok := range greedy[:20] {
		if want := Argmax(logits); tok != want {
			t.Fatalf("greedy token %d is %d, argmax %d", i, tok, want)
		}
		logits, _ = m.Forward([]int32{tok})
	}
	o.Seed = 42
	if stop := gen(o, a[7]); len(stop) != slices.Index(a, a[7]) {
		t.Fatalf("eot %d at %d: generated %d tokens", a[7], slices.Index(a, a[7]), len(stop))
	}
}

// TestScoreMatchesTrainingLoss: on one window of SeqLen+1 tokens, Score is
// the training forward's mean cross-entropy; on 2.5 windows it is the sum of
// the windows' scores.
func TestScoreMatchesTrainingLoss(t *testing.T) {
	m, params := randModel(t, 12)
	r := rand.New(rand.NewPCG(13, 14))
	S := inferCfg.SeqLen
	tokens := randTokens(r, 5*S/2+1, inferCfg.Vocab)
	tm, _ := newModelLanes(inferCfg, 1, S, 1)
	copy(tm.params, params)
	ce, _ := tm.forward(tokens[:S], tokens[1:S+1], 0)
	nats, n, err := m.Score(tokens[:S+1])
	if err != nil || n != S {
		t.Fatalf("Score: %v, %d tokens, want %d", err, n, S)
	}
	t.Logf("Score %.7f, training forward %.7f", nats/float64(n), ce)
	if d := math.Abs(nats/float64(n) - ce); d > 1e-5*ce {
		t.Fatalf("mean loss %.7f, training forward %.7f", nats/float64(n), ce)
	}
	var sum float64
	for _, w := range [][]int32{tokens[:S+1], tokens[S : 2*S+1], tokens[2*S:]} {
		x, _, _ := m.Score(w)
		sum += x
	}
	all, n, _ := m.Score(tokens)
	if n != len(tokens)-1 || math.Abs(all-sum) > 1e-9*sum {
		t.Fatalf("Score of 2.5 windows: %.9f over %d tokens, windows sum to %.9f", all, n, sum)
	}
	if _, n, _ := m.Score(tokens[:1]); n != 0 {
		t.Fatalf("one token: %d predicted", n)
	}
}
