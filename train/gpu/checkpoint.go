//go:build cuda || cudaemu

package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/intellect-node/intellect-node/kernels/cuda"
	"github.com/intellect-node/intellect-node/train"
)

// The checkpoint directory is the CPU trainer's format (train/checkpoint.go),
// so either engine resumes the other's checkpoints: model.safetensors (HF
// Llama names), optimizer.safetensors (flat exp_avg, exp_avg_sq), state.json.
const (
	modelFile     = "model.safetensors"
	optimizerFile = "optimizer.safetensors"
	stateFile     = "state.json"
	stateFormat   = "intellect-node/train-checkpoint/1"
	maxStateFile  = 1 << 20
)

// ErrCheckpoint is wrapped by errors about an unreadable or inconsistent checkpoint.
var ErrCheckpoint = errors.New("gpu: bad checkpoint")

// state mirrors train's state.json field for field.
type state struct {
	Format  string        `json:"format"`
	Options train.Options `json:"options"`
	Step    int           `json:"step"`
	Data    struct {
		Source string `json:"source"`
		Seed   uint64 `json:"seed"`
		Worker uint64 `json:"worker"`
		Step   int    `json:"step"`
	} `json:"data"`
	RNG struct {
		Kind string `json:"kind"`
		Seed uint64 `json:"seed"`
	} `json:"rng"`
	ModelHash string `json:"model_hash"`
}

// Save writes the engine's full state as a checkpoint directory at dir,
// atomically (temporary sibling, fsync, rename).
func (e *Engine) Save(dir string) error {
	if e.closed {
		return ErrClosed
	}
	params := e.Params()
	if params == nil {
		return fmt.Errorf("gpu: save: could not download parameters")
	}
	mom, vel := make([]float32, e.n), make([]float32, e.n)
	err := e.dev.Do(func() error {
		if err := cuda.Download(e.dev, mom, e.m); err != nil {
			return err
		}
		return cuda.Download(e.dev, vel, e.v)
	})
	if err != nil {
		return fmt.Errorf("gpu: save: %w", err)
	}
	dir = filepath.Clean(dir)
	return train.WriteDirAtomic(filepath.Dir(dir), filepath.Base(dir), func(tmp string) error {
		return e.writeFiles(tmp, params, mom, vel)
	}, 0)
}

func (e *Engine) writeFiles(dir string, params, mom, vel []float32) error {
	var model []train.Tensor
	for _, ti := range e.cfg.Layout() {
		model = append(model, train.Tensor{Name: ti.Name, Shape: ti.Shape, Data: params[ti.Offset : ti.Offset+ti.Size()]})
	}
	hash := train.Hash(params)
	meta := map[string]string{"format": "pt", "step": fmt.Sprint(e.step), "model_hash": hash}
	if err := train.WriteSafetensors(filepath.Join(dir, modelFile), model, meta); err != nil {
		return err
	}
	opt := []train.Tensor{{Name: "exp_avg", Shape: []int{e.n}, Data: mom}, {Name: "exp_avg_sq", Shape: []int{e.n}, Data: vel}}
	if err := train.WriteSafetensors(filepath.Join(dir, optimizerFile), opt, map[string]string{"step": fmt.Sprint(e.step)}); err != nil {
		return err
	}
	var st state
	st.Format, st.Options, st.Step, st.ModelHash = stateFormat, e.opts, e.step, hash
	st.Data.Source, st.Data.Seed, st.Data.Worker, st.Data.Step = e.data.String(), e.opts.Seed, e.opts.Worker, e.step
	st.RNG.Kind, st.RNG.Seed = "splitmix64-keyed", e.opts.Seed
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, stateFile), append(b, '\n'), 0o644)
}

// Resume rebuilds an engine from a checkpoint directory written by Save or by
// the CPU trainer: options, parameters (checked against the recorded hash),
// AdamW moments and step.
func Resume(dir string, data train.Source, dc Config) (*Engine, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	params, err := tensorsByName(filepath.Join(dir, modelFile), st.Options.Model)
	if err != nil {
		return nil, err
	}
	if h := train.Hash(params); h != st.ModelHash {
		return nil, fmt.Errorf("%w: %s: model hash %s, state.json says %s", ErrCheckpoint, dir, h, st.ModelHash)
	}
	opt, _, err := train.ReadSafetensors(filepath.Join(dir, optimizerFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	n := len(params)
	if len(opt) != 2 || opt[0].Name != "exp_avg" || opt[1].Name != "exp_avg_sq" || len(opt[0].Data) != n || len(opt[1].Data) != n {
		return nil, fmt.Errorf("%w: %s: optimizer tensors do not match %d parameters", ErrCheckpoint, dir, n)
	}
	e, err := New(st.Options, data, dc)
	if err != nil {
		return nil, err
	}
	if err = e.SetParams(params); err == nil {
		err = e.dev.Do(func() error {
			if err := cuda.Upload(e.dev, e.m, opt[0].Data); err != nil {
				return err
			}
			if err := cuda.Upload(e.dev, e.v, opt[1].Data); err != nil {
				return err
			}
			return e.dev.Sync()
		})
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	e.step = st.Step
	return e, nil
}

func readState(dir string) (state, error) {
	var st state
	f, err := os.Open(filepath.Join(dir, stateFile))
	if err != nil {
		return st, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	defer f.Close()
	dec := json.NewDecoder(&limitedReader{f: f, n: maxStateFile})
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("%w: %s: %v", ErrCheckpoint, stateFile, err)
	}
	if st.Format != stateFormat {
		return st, fmt.Errorf("%w: %s: format %q, want %q", ErrCheckpoint, stateFile, st.Format, stateFormat)
	}
	if err := st.Options.Validate(); err != nil {
		return st, fmt.Errorf("%w: %s: %v", ErrCheckpoint, stateFile, err)
	}
	return st, nil
}

// tensorsByName reads model.safetensors into a flat vector laid out as c.Layout().
func tensorsByName(path string, c train.Config) ([]float32, error) {
	ts, _, err := train.ReadSafetensors(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	byName := map[string]train.Tensor{}
	for _, t := range ts {
		byName[t.Name] = t
	}
	flat := make([]float32, c.NumParams())
	for _, ti := range c.Layout() {
		t, ok := byName[ti.Name]
		if !ok || len(t.Data) != ti.Size() {
			return nil, fmt.Errorf("%w: %s: tensor %s missing or of the wrong size", ErrCheckpoint, path, ti.Name)
		}
		copy(flat[ti.Offset:], t.Data)
	}
	return flat, nil
}

// limitedReader fails once more than n bytes were read.
type limitedReader struct {
	f interface{ Read([]byte) (int, error) }
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("larger than %d bytes", maxStateFile)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	k, err := l.f.Read(p)
	l.n -= int64(k)
	return k, err
}
