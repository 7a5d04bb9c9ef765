// Package train is the training core of intellect-node: a Llama-3-style model
// with hand-written forward and backward passes over caller-owned buffers,
// AdamW and Muon with a warmup-stable-decay schedule and gradient clipping,
// data sources (an embedded generated corpus, memory-mapped token shards,
// weighted mixtures) and safetensors checkpoints.
//
// The CPU Trainer implements Engine, the interface the DiLoCo loop
// (node/diloco) drives; other devices register their engines with
// RegisterEngine.
package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// ErrConfig is wrapped by every error about an invalid model or training configuration.
var ErrConfig = errors.New("train: invalid config")

// Config is a Llama-3-style model architecture.
type Config struct {
	Name      string  `json:"name"`       // preset name or free label
	Vocab     int     `json:"vocab"`      // vocabulary size, ≥ 2
	Dim       int     `json:"dim"`        // hidden size C, a multiple of Heads
	Layers    int     `json:"layers"`     // transformer blocks L, ≥ 1
	Heads     int     `json:"heads"`      // query heads; head size Dim/Heads must be even
	KVHeads   int     `json:"kv_heads"`   // key/value heads (grouped-query attention); divides Heads
	FFN       int     `json:"ffn"`        // SwiGLU inner size
	SeqLen    int     `json:"seq_len"`    // longest context the model is trained for
	RopeTheta float64 `json:"rope_theta"` // RoPE base; default 500000 (Llama 3)
	NormEps   float64 `json:"norm_eps"`   // RMSNorm epsilon; default 1e-5
	ZLoss     float64 `json:"z_loss"`     // max-z-loss coefficient; default 1e-4, 0 disables
}

// maxDim bounds every size field so that products stay far from overflow.
const maxDim = 1 << 20

// HeadDim returns the size of one attention head, Dim/Heads.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// Validate reports whether c describes a model this package can build.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab", c.Vocab}, {"dim", c.Dim}, {"layers", c.Layers}, {"heads", c.Heads},
		{"kv_heads", c.KVHeads}, {"ffn", c.FFN}, {"seq_len", c.SeqLen}} {
		if f.v < 1 || f.v > maxDim {
			return fmt.Errorf("%w: %s = %d, want 1..%d", ErrConfig, f.name, f.v, maxDim)
		}
	}
	switch {
	case c.Vocab < 2:
		return fmt.Errorf("%w: vocab = %d, want ≥ 2", ErrConfig, c.Vocab)
	case c.Dim%c.Heads != 0 || c.HeadDim()%2 != 0:
		return fmt.Errorf("%w: dim %d / heads %d must be an even integer", ErrConfig, c.Dim, c.Heads)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("%w: kv_heads %d must divide heads %d", ErrConfig, c.KVHeads, c.Heads)
	case !(c.RopeTheta > 1):
		return fmt.Errorf("%w: rope_theta = %v, want > 1", ErrConfig, c.RopeTheta)
	case !(c.NormEps > 0 && c.NormEps < 1):
		return fmt.Errorf("%w: norm_eps = %v, want in (0, 1)", ErrConfig, c.NormEps)
	case !(c.ZLoss >= 0 && c.ZLoss < 1):
		return fmt.Errorf("%w: z_loss = %v, want in [0, 1)", ErrConfig, c.ZLoss)
	}
	return nil
}

// NumParams returns the number of parameters (untied embedding and output head).
func (c Config) NumParams() int64 {
	C, V, F := int64(c.Dim), int64(c.Vocab), int64(c.FFN)
	q, kv := int64(c.Heads*c.HeadDim()), int64(c.KVHeads*c.HeadDim())
	perLayer := C + C*q + 2*C*kv + q*C + C + 3*C*F
	return V*C + int64(c.Layers)*perLayer + C + V*C
}

// matmulParams returns the parameters that take part in a matmul per token
// (everything but the embedding table and the norms): the "params" of the
// 6·params·tokens FLOP count.
func (c Config) matmulParams() int64 {
	C, F := int64(c.Dim), int64(c.FFN)
	q, kv := int64(c.Heads*c.HeadDim()), int64(c.KVHeads*c.HeadDim())
	return int64(c.Layers)*(2*C*q+2*C*kv+3*C*F) + int64(c.Vocab)*C
}

// StepFLOPs returns the model FLOPs of one forward+backward pass over batch
// rows of seq tokens: 6·(matmul params)·tokens plus causal attention
// (forward 2·hd·T·(T+1) per head and row, backward twice that).
func (c Config) StepFLOPs(batch, seq int) float64 {
	tokens := float64(batch * seq)
	attn := 6 * float64(c.Layers*batch*c.Heads*c.HeadDim()) * float64(seq) * float64(seq+1)
	return 6*float64(c.matmulParams())*tokens + attn
}

func withDefaults(c Config) Config {
	if c.RopeTheta == 0 {
		c.RopeTheta = 500000
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	return c
}

var presets = map[string]Config{
	// tiny: ≈ 0.95 M parameters, byte vocabulary; tests and the demo.
	"tiny": {Vocab: 256, Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, FFN: 448, SeqLen: 128},
	// small: ≈ 12.6 M parameters.
	"small": {Vocab: 4096, Dim: 384, Layers: 6, Heads: 6, KVHeads: 2, FFN: 1024, SeqLen: 512},
	// 150m: ≈ 151 M parameters.
	"150m": {Vocab: 32768, Dim: 768, Layers: 16, Heads: 12, KVHeads: 4, FFN: 2048, SeqLen: 1024},
	// 1b: ≈ 1.1 B parameters (Llama-3.2-1B body, 32 k vocabulary, untied head).
	"1b": {Vocab: 32768, Dim: 2048, Layers: 16, Heads: 32, KVHeads: 8, FFN: 8192, SeqLen: 2048},
	// intellect-1-10b: the INTELLECT-1 architecture, ≈ 10.2 B parameters; config only on CPU.
	"intellect-1-10b": {Vocab: 128256, Dim: 4096, Layers: 42, Heads: 32, KVHeads: 8, FFN: 14336, SeqLen: 8192},
}

// PresetNames returns the names Preset accepts, sorted by model size.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return presets[names[i]].NumParams() < presets[names[j]].NumParams() })
	return names
}

// Preset returns the named model configuration (see PresetNames).
func Preset(name string) (Config, error) {
	c, ok := presets[name]
	if !ok {
		return Config{}, fmt.Errorf("%w: unknown preset %q (have %v)", ErrConfig, name, PresetNames())
	}
	c.Name = name
	c.ZLoss = 1e-4
	return withDefaults(c), nil
}

// maxConfigFile bounds the size of a JSON config file.
const maxConfigFile = 1 << 20

// LoadConfig reads a model Config from a JSON file (snake_case keys; zero
// rope_theta and norm_eps take their defaults) and validates it.
func LoadConfig(path string) (Config, error) {
	b, err := readFileLimited(path, maxConfigFile)
	if err != nil {
		return Config{}, fmt.Errorf("train: load config: %w", err)
	}
	c, err := parseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// parseConfig decodes a JSON model config, fills defaults and validates it.
// A vocab of 0 (or none) means "the data's": FitVocab fills it in.
func parseConfig(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c = withDefaults(c)
	v := c
	if v.Vocab == 0 {
		v.Vocab = 2
	}
	if err := v.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// FitVocab gives a model the vocabulary of its training data: a preset's
// (fromPreset) or a config's vocab of 0 becomes the data's vocabulary rounded
// up to a multiple of 64, for token shards; the embedded corpus keeps the
// model's. A vocabulary smaller than the data's is an error.
func FitVocab(c Config, data Source, fromPreset bool) (Config, error) {
	if _, shards := data.(*ShardSource); shards && (fromPreset || c.Vocab == 0) {
		c.Vocab = (data.Vocab() + 63) / 64 * 64
	}
	if c.Vocab == 0 {
		return c, fmt.Errorf("%w: vocab 0 (\"the data's\") needs token shards as data, not %s", ErrConfig, data)
	}
	if data.Vocab() > c.Vocab {
		return c, fmt.Errorf("%w: data %s has vocabulary %d > model vocab %d", ErrConfig, data, data.Vocab(), c.Vocab)
	}
	return c, c.Validate()
}

// readFileLimited reads a whole file, refusing one larger than limit bytes.
func readFileLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes exceeds the limit of %d", path, st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
