package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CheckpointModel is the model held by a checkpoint: its architecture and
// its parameters.
type CheckpointModel struct {
	Dir    string    // the step directory read
	Step   int       // optimizer step (trainer checkpoint) or outer step (node checkpoint)
	Config Config    // the model architecture
	Params []float32 // flat, in Config.Layout order
}

// Files of a node checkpoint (node/checkpoint.go writes them; the format string is
// node's nodeStateMagic): node.json, outer.safetensors holding θ₀ (the global
// model of the outer step), and the engine's own checkpoint under engine/.
const (
	nodeStateFile   = "node.json"
	nodeOuterFile   = "outer.safetensors"
	nodeEngineDir   = "engine"
	nodeStateFormat = "intellect-node/node/1"
	// checkpointsDir is where `train` and `start` keep step directories under --home.
	checkpointsDir = "checkpoints"
)

// LoadCheckpointModel reads the model of a checkpoint. path is one of
//   - a step directory of Trainer.Save or SaveCheckpoint (state.json,
//     model.safetensors; the parameters are checked against state.json's hash);
//   - a step directory of a node (node.json, outer.safetensors, engine/): the
//     global model θ₀, checked against node.json's hash, with the architecture
//     of engine/state.json;
//   - a directory of step-NNNNNNNN directories, or a --home directory holding
//     checkpoints/: the newest step is read.
//
// A missing, malformed or inconsistent checkpoint gives an error wrapping
// ErrCheckpoint.
func LoadCheckpointModel(path string) (*CheckpointModel, error) {
	dir, err := ResolveCheckpoint(path)
	if err != nil {
		return nil, err
	}
	if isFile(filepath.Join(dir, nodeStateFile)) {
		return loadNodeModel(dir)
	}
	return loadTrainerModel(dir)
}

// ResolveCheckpoint returns the step directory path names (see LoadCheckpointModel).
func ResolveCheckpoint(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrCheckpoint, path)
	}
	if isStepDir(path) {
		return path, nil
	}
	root := path
	if fi, err := os.Stat(filepath.Join(path, checkpointsDir)); err == nil && fi.IsDir() {
		root = filepath.Join(path, checkpointsDir)
	}
	dir, err := LatestCheckpoint(root)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if dir == "" {
		return "", fmt.Errorf("%w: %s holds no checkpoint (state.json, node.json or %s* directories)", ErrCheckpoint, path, CheckpointPrefix)
	}
	if !isStepDir(dir) {
		return "", fmt.Errorf("%w: %s has neither %s nor %s", ErrCheckpoint, dir, stateFile, nodeStateFile)
	}
	return dir, nil
}

func isStepDir(dir string) bool {
	return isFile(filepath.Join(dir, stateFile)) || isFile(filepath.Join(dir, nodeStateFile))
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// loadTrainerModel reads a trainer (or GPU engine) checkpoint directory.
func loadTrainerModel(dir string) (*CheckpointModel, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	c := st.Options.Model
	if n := c.NumParams(); n > maxCPUFloats {
		return nil, fmt.Errorf("%w: %s: %d parameters: too many for the CPU", ErrCheckpoint, dir, n)
	}
	params := make([]float32, c.NumParams())
	if err := readModelFile(filepath.Join(dir, modelFile), c.Layout(), params); err != nil {
		return nil, err
	}
	if h := Hash(params); h != st.ModelHash {
		return nil, fmt.Errorf("%w: %s: model hash %s, %s says %s", ErrCheckpoint, dir, h, stateFile, st.ModelHash)
	}
	return &CheckpointModel{Dir: dir, Step: st.Step, Config: c, Params: params}, nil
}

// nodeState is the part of a node's node.json read here.
type nodeState struct {
	Format string `json:"format"`
	Step   uint64 `json:"step"`
	Hash   string `json:"hash"`
}

// loadNodeModel reads θ₀ of a node checkpoint directory.
func loadNodeModel(dir string) (*CheckpointModel, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCheckpoint, dir, fmt.Sprintf(format, a...))
	}
	b, err := readFileLimited(filepath.Join(dir, nodeStateFile), maxConfigFile)
	if err != nil {
		return nil, bad("%v", err)
	}
	var ns nodeState
	if err := json.Unmarshal(b, &ns); err != nil || ns.Format != nodeStateFormat {
		return nil, bad("%s is not a node state (format %q, %v)", nodeStateFile, ns.Format, err)
	}
	st, err := readState(filepath.Join(dir, nodeEngineDir))
	if err != nil {
		return nil, bad("engine state: %v", err)
	}
	ts, _, err := ReadSafetensors(filepath.Join(dir, nodeOuterFile))
	if err != nil {
		return nil, bad("%v", err)
	}
	c := st.Options.Model
	for _, t := range ts {
		if t.Name != "theta0" {
			continue
		}
		if int64(len(t.Data)) != c.NumParams() {
			return nil, bad("theta0 has %d values, the model %d", len(t.Data), c.NumParams())
		}
		if h := Hash(t.Data); h != ns.Hash {
			return nil, bad("theta0 hash %s, %s says %s", h, nodeStateFile, ns.Hash)
		}
		return &CheckpointModel{Dir: dir, Step: int(ns.Step), Config: c, Params: t.Data}, nil
	}
	return nil, bad("%s has no theta0", nodeOuterFile)
}

// ExportOptions choose what Export writes.
type ExportOptions struct {
	// DType of model.safetensors: F32 (the default, exact) or BF16.
	DType DType
	// Tokenizer is "byte" (the default): a byte-level tokenizer.json mapping
	// each byte to the id of its value; or the path of a tokenizer.json to
	// copy, whose ids must fit the model's vocabulary.
	Tokenizer string
	// Force replaces an existing, non-empty output directory.
	Force bool
	// Progress, if set, is told the bytes of model.safetensors written so
	// far against their total, after each tensor.
	Progress func(done, total int64)
}

// ErrExists is wrapped by Export's error when the output exists and Force is not set.
var ErrExists = errors.New("train: export: output exists")

// Export writes m as a Hugging Face LlamaForCausalLM directory at out:
// config.json, generation_config.json, model.safetensors (HF names, (out, in)
// matrices, metadata format=pt), tokenizer.json and tokenizer_config.json.
// The directory appears complete or not at all (WriteDirAtomic). A non-empty
// out is refused with ErrExists unless o.Force.
func Export(m *CheckpointModel, out string, o ExportOptions) error {
	if o.DType == "" {
		o.DType = F32
	}
	if o.DType.size() == 0 {
		return fmt.Errorf("%w: export dtype %q, want F32 or BF16", ErrConfig, o.DType)
	}
	if err := m.Config.Validate(); err != nil {
		return err
	}
	if int64(len(m.Params)) != m.Config.NumParams() {
		return fmt.Errorf("%w: %d parameters, model has %d", ErrConfig, len(m.Params), m.Config.NumParams())
	}
	tok, err := loadHFTokenizer(o.Tokenizer, m.Config.Vocab)
	if err != nil {
		return err
	}
	out, err = filepath.Abs(out)
	if err != nil {
		return err
	}
	if err := checkExportOut(out, o.Force); err != nil {
		return err
	}
	return WriteDirAtomic(filepath.Dir(out), filepath.Base(out), func(tmp string) error {
		if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp's 0700 is for private state
			return err
		}
		return writeHF(tmp, m, o, tok)
	}, 0)
}

// checkExportOut refuses an existing out that is not an empty directory,
// unless force.
func checkExportOut(out string, force bool) error {
	st, err := os.Lstat(out)
	if errors.Is(err, os.ErrNotExist) || force {
		return nil
	}
	if err != nil {
		return fmt.Errorf("train: export: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory (--force replaces it)", ErrExists, out)
	}
	es, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("train: export: %w", err)
	}
	if len(es) > 0 {
		return fmt.Errorf("%w: %s is not empty (--force replaces it)", ErrExists, out)
	}
	return nil
}

// writeHF fills dir with the Hugging Face files of m.
func writeHF(dir string, m *CheckpointModel, o ExportOptions, tok *hfTokenizer) error {
	cfg := newHFConfig(m.Config, o.DType, tok)
	if err := writeJSONFile(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	gen := hfGenerationConfig{BOSTokenID: cfg.BOSTokenID, EOSTokenID: cfg.EOSTokenID,
		MaxLength: m.Config.SeqLen, TransformersVersion: hfTransformersVersion}
	if err := writeJSONFile(filepath.Join(dir, "generation_config.json"), gen); err != nil {
		return err
	}
	var ts []Tensor
	for _, ti := range m.Config.Layout() {
		ts = append(ts, Tensor{Name: ti.Name, Shape: ti.Shape, Data: m.Params[ti.Offset : ti.Offset+ti.Size()]})
	}
	if err := writeSafetensors(filepath.Join(dir, modelFile), ts, map[string]string{"format": "pt"}, o.DType, o.Progress); err != nil {
		return err
	}
	return tok.write(dir, m.Config.SeqLen)
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
