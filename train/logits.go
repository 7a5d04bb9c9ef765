package train

import "fmt"

// Logits runs the model with the given parameters (flat, in cfg.Layout
// order) on one sequence of tokens, len(tokens) ≤ cfg.SeqLen, and returns its
// logits, (len(tokens), cfg.Vocab) row-major: row t scores the token after
// tokens[:t+1]. It is the training forward pass (batch 1), for checks and
// inspection; it allocates a model each call.
func Logits(cfg Config, params []float32, tokens []int32) ([]float32, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if int64(len(params)) != cfg.NumParams() {
		return nil, fmt.Errorf("%w: %d parameters, model has %d", ErrConfig, len(params), cfg.NumParams())
	}
	for i, tok := range tokens {
		if tok < 0 || int(tok) >= cfg.Vocab {
			return nil, fmt.Errorf("%w: token %d at %d outside vocab %d", ErrConfig, tok, i, cfg.Vocab)
		}
	}
	T, V := len(tokens), cfg.Vocab
	m, err := newModelLanes(cfg, 1, T, 1)
	if err != nil {
		return nil, err
	}
	copy(m.params, params)
	m.forward(tokens, make([]int32, T), 0)
	out := make([]float32, T*V)
	for t := 0; t < T; t++ {
		copy(out[t*V:], m.logits(t))
	}
	return out, nil
}
