package train

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// ErrSample is wrapped by errors about sampling options.
var ErrSample = errors.New("train: bad sampling options")

// SampleOptions choose how Sampler picks the next token.
type SampleOptions struct {
	// Temperature divides the logits before the softmax; 0 is greedy
	// decoding (the argmax, the lowest id on ties). ≥ 0.
	Temperature float64
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP (nucleus sampling), in (0, 1]; 1 keeps every token.
	TopP float64
	// Seed seeds the PCG generator: the same seed, model and prompt give
	// the same tokens.
	Seed uint64
}

// Validate reports whether o is usable.
func (o SampleOptions) Validate() error {
	if !(o.Temperature >= 0) || math.IsInf(o.Temperature, 0) {
		return fmt.Errorf("%w: temperature %v, want ≥ 0", ErrSample, o.Temperature)
	}
	if !(o.TopP > 0 && o.TopP <= 1) {
		return fmt.Errorf("%w: top-p %v, want in (0, 1]", ErrSample, o.TopP)
	}
	return nil
}

// Sampler draws token ids from logits. It is not safe for concurrent use.
type Sampler struct {
	o    SampleOptions
	rng  *rand.Rand
	prob []float64 // (V) unnormalised probabilities
	ids  []int32   // (V) ids by decreasing probability, for top-p
}

// NewSampler returns a Sampler for o.
func NewSampler(o SampleOptions) (*Sampler, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))}, nil
}

// Sample returns the next token id for logits (V).
func (s *Sampler) Sample(logits []float32) int32 {
	if s.o.Temperature == 0 {
		return Argmax(logits)
	}
	maxv := float64(logits[Argmax(logits)])
	s.prob = slices.Grow(s.prob[:0], len(logits))[:len(logits)]
	var sum float64
	for i, l := range logits {
		s.prob[i] = math.Exp((float64(l) - maxv) / s.o.Temperature)
		sum += s.prob[i]
	}
	if s.o.TopP == 1 {
		return s.draw(s.rng.Float64()*sum, nil)
	}
	return s.nucleus(sum)
}

// nucleus samples among the most likely tokens whose mass reaches TopP·sum.
func (s *Sampler) nucleus(sum float64) int32 {
	s.ids = s.ids[:0]
	for i := range s.prob {
		s.ids = append(s.ids, int32(i))
	}
	slices.SortStableFunc(s.ids, func(a, b int32) int {
		return -cmpFloat(s.prob[a], s.prob[b]) // decreasing, lower id first on ties
	})
	var kept float64
	k := 0
	for k < len(s.ids) && (k == 0 || kept < s.o.TopP*sum) {
		kept += s.prob[s.ids[k]]
		k++
	}
	return s.draw(s.rng.Float64()*kept, s.ids[:k])
}

// draw returns the token at which the running sum of probabilities passes u,
// walking ids in order (all tokens by id when ids is nil).
func (s *Sampler) draw(u float64, ids []int32) int32 {
	if ids == nil {
		for i, p := range s.prob {
			if u -= p; u < 0 {
				return int32(i)
			}
		}
		return int32(len(s.prob) - 1) // rounding left u ≥ 0
	}
	for _, id := range ids {
		if u -= s.prob[id]; u < 0 {
			return id
		}
	}
	return ids[len(ids)-1]
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Argmax returns the index of the largest logit, the lowest on ties.
func Argmax(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// NoEOT is the eot of Generate that never stops generation.
const NoEOT int32 = -1

// Generate empties the cache, feeds prompt and then samples up to maxTokens
// tokens with s, calling emit with each as soon as it is drawn (emit may stop
// generation by returning an error, which Generate returns). It stops before
// maxTokens when it draws eot (unless eot is NoEOT); eot is neither emitted
// nor returned. The context slides past Context() tokens (see Model).
func (m *Model) Generate(prompt []int32, maxTokens int, s *Sampler, eot int32, emit func(int32) error) ([]int32, error) {
	if maxTokens < 0 {
		return nil, fmt.Errorf("%w: max tokens %d", ErrSample, maxTokens)
	}
	m.Reset()
	logits, err := m.Forward(prompt)
	if err != nil {
		return nil, err
	}
	var out []int32
	for len(out) < maxTokens {
		tok := s.Sample(logits)
		if tok == eot && eot != NoEOT {
			break
		}
		out = append(out, tok)
		if emit != nil {
			if err := emit(tok); err != nil {
				return out, err
			}
		}
		if len(out) < maxTokens {
			if logits, err = m.Forward([]int32{tok}); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// Score returns the summed next-token cross-entropy (nats) of tokens under
// the model and the number of tokens predicted, len(tokens)−1 (0 for fewer
// than two tokens). With W = Context(), tokens go in non-overlapping windows
// of W+1 tokens, each sharing its last token with the next window's first:
// window k feeds tokens[k·W : (k+1)·W] from an empty cache and predicts each
// following token, so every token but the first is predicted exactly once,
// from the context since its window's start (1..W tokens). The cache is left
// holding the last window.
func (m *Model) Score(tokens []int32) (nats float64, n int, err error) {
	if err := m.checkTokens(tokens); err != nil {
		return 0, 0, err
	}
	S := m.window
	for start := 0; start+1 < len(tokens); start += S {
		w := tokens[start:min(start+S+1, len(tokens))]
		m.Reset()
		m.feed(w[:len(w)-1], true, func(i int, logits []float32) {
			nats += crossEntropy(logits, w[i+1])
		})
		n += len(w) - 1
	}
	return nats, n, nil
}

// crossEntropy returns −log softmax(logits)[target], in float64.
func crossEntropy(logits []float32, target int32) float64 {
	maxv := float64(logits[Argmax(logits)])
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - maxv)
	}
	return maxv + math.Log(sum) - float64(logits[target])
}
