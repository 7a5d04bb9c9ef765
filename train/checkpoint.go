package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Checkpoint directory layout (one directory per step, see SaveCheckpoint):
//
//	model.safetensors      parameters, HF Llama names (Config.Layout)
//	optimizer.safetensors  AdamW moments "exp_avg" and "exp_avg_sq", flat
//	state.json             checkpointState
const (
	modelFile     = "model.safetensors"
	optimizerFile = "optimizer.safetensors"
	stateFile     = "state.json"
	stateFormat   = "intellect-node/train-checkpoint/1"
	// CheckpointPrefix starts the name of every step directory: step-00000123.
	CheckpointPrefix = "step-"
)

// checkpointState is state.json.
type checkpointState struct {
	Format    string    `json:"format"`
	Options   Options   `json:"options"`
	Step      int       `json:"step"`
	Data      dataState `json:"data"`
	RNG       rngState  `json:"rng"`
	ModelHash string    `json:"model_hash"` // Hash of the parameters
}

// dataState is the data position: the next micro-batch drawn is
// Key{Seed, Worker, Step, 0}.
type dataState struct {
	Source string `json:"source"`
	Seed   uint64 `json:"seed"`
	Worker uint64 `json:"worker"`
	Step   int    `json:"step"`
}

// rngState records the randomness: sampling and init are stateless functions
// of the seed (splitmix64 keyed by Key), so the seed is the whole state.
type rngState struct {
	Kind string `json:"kind"`
	Seed uint64 `json:"seed"`
}

// Save writes the trainer's full state as a checkpoint directory at dir,
// atomically (temporary sibling, fsync, rename); an existing dir is replaced.
func (t *Trainer) Save(dir string) error {
	dir = filepath.Clean(dir)
	return WriteDirAtomic(filepath.Dir(dir), filepath.Base(dir), t.writeFiles, 0)
}

// SaveCheckpoint writes root/step-NNNNNNNN for the current step and removes
// all but the newest keep step directories (keep ≤ 0 keeps all). It returns the
// directory written.
func (t *Trainer) SaveCheckpoint(root string, keep int) (string, error) {
	name := fmt.Sprintf("%s%08d", CheckpointPrefix, t.step)
	if err := WriteDirAtomic(root, name, t.writeFiles, keep); err != nil {
		return "", err
	}
	return filepath.Join(root, name), nil
}

func (t *Trainer) writeFiles(dir string) error {
	var model []Tensor
	for _, ti := range t.lay {
		model = append(model, Tensor{Name: ti.Name, Shape: ti.Shape, Data: t.m.params[ti.Offset : ti.Offset+ti.Size()]})
	}
	hash := Hash(t.m.params)
	meta := map[string]string{"format": "pt", "step": fmt.Sprint(t.step), "model_hash": hash}
	if err := WriteSafetensors(filepath.Join(dir, modelFile), model, meta); err != nil {
		return err
	}
	n := len(t.mom)
	opt := []Tensor{{Name: "exp_avg", Shape: []int{n}, Data: t.mom}, {Name: "exp_avg_sq", Shape: []int{n}, Data: t.vel}}
	if err := WriteSafetensors(filepath.Join(dir, optimizerFile), opt, map[string]string{"step": fmt.Sprint(t.step)}); err != nil {
		return err
	}
	st := checkpointState{
		Format: stateFormat, Options: t.opts, Step: t.step, ModelHash: hash,
		Data: dataState{Source: t.data.String(), Seed: t.opts.Seed, Worker: t.opts.Worker, Step: t.step},
		RNG:  rngState{Kind: "splitmix64-keyed", Seed: t.opts.Seed},
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, stateFile), append(b, '\n'), 0o644)
}

// ResumeTrainer rebuilds a trainer from a checkpoint directory written by Save
// or SaveCheckpoint: options, parameters (verified against the recorded hash),
// AdamW moments and step. A missing, truncated or inconsistent file gives an
// error wrapping ErrCheckpoint.
func ResumeTrainer(dir string, data Source) (*Trainer, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	t, err := newTrainer(st.Options, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCheckpoint, dir, err)
	}
	if err := t.loadModel(filepath.Join(dir, modelFile)); err != nil {
		return nil, err
	}
	if h := Hash(t.m.params); h != st.ModelHash {
		return nil, fmt.Errorf("%w: %s: model hash %s, state.json says %s", ErrCheckpoint, dir, h, st.ModelHash)
	}
	if err := t.loadOptimizer(filepath.Join(dir, optimizerFile)); err != nil {
		return nil, err
	}
	t.step = st.Step
	return t, nil
}

func readState(dir string) (checkpointState, error) {
	b, err := readFileLimited(filepath.Join(dir, stateFile), maxConfigFile)
	if err != nil {
		return checkpointState{}, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	return parseState(b)
}

// parseState decodes and checks state.json, including the options it carries.
func parseState(b []byte) (checkpointState, error) {
	var st checkpointState
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: %s: %v", ErrCheckpoint, stateFile, err)
	}
	if st.Format != stateFormat {
		return st, fmt.Errorf("%w: %s: format %q, want %q", ErrCheckpoint, stateFile, st.Format, stateFormat)
	}
	if st.Step < 0 || st.Data.Step != st.Step {
		return st, fmt.Errorf("%w: %s: step %d, data step %d", ErrCheckpoint, stateFile, st.Step, st.Data.Step)
	}
	if err := st.Options.Validate(); err != nil {
		return st, fmt.Errorf("%w: %s: %v", ErrCheckpoint, stateFile, err)
	}
	return st, nil
}

// loadModel reads model.safetensors into the parameters (readModelFile).
func (t *Trainer) loadModel(path string) error { return readModelFile(path, t.lay, t.m.params) }

// readModelFile reads a model.safetensors into dst, laid out as lay; every
// tensor of the layout must be present with its exact shape, and nothing else.
func readModelFile(path string, lay []TensorInfo, dst []float32) error {
	ts, _, err := ReadSafetensors(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	byName := map[string]Tensor{}
	for _, x := range ts {
		byName[x.Name] = x
	}
	if len(byName) != len(lay) {
		return fmt.Errorf("%w: %s has %d tensors, model has %d", ErrCheckpoint, path, len(byName), len(lay))
	}
	for _, ti := range lay {
		x, ok := byName[ti.Name]
		if !ok || fmt.Sprint(x.Shape) != fmt.Sprint(ti.Shape) {
			return fmt.Errorf("%w: %s: tensor %s missing or shape %v, want %v", ErrCheckpoint, path, ti.Name, x.Shape, ti.Shape)
		}
		copy(dst[ti.Offset:], x.Data)
	}
	return nil
}

func (t *Trainer) loadOptimizer(path string) error {
	ts, _, err := ReadSafetensors(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	got := map[string][]float32{}
	for _, x := range ts {
		got[x.Name] = x.Data
	}
	m, v := got["exp_avg"], got["exp_avg_sq"]
	if len(ts) != 2 || len(m) != len(t.mom) || len(v) != len(t.vel) {
		return fmt.Errorf("%w: %s: want exp_avg and exp_avg_sq of %d values", ErrCheckpoint, path, len(t.mom))
	}
	copy(t.mom, m)
	copy(t.vel, v)
	return nil
}

// LatestCheckpoint returns the newest step directory under root, or "" and no
// error when there is none.
func LatestCheckpoint(root string) (string, error) {
	dirs, err := stepDirs(root, CheckpointPrefix)
	if err != nil || len(dirs) == 0 {
		if os.IsNotExist(err) {
			err = nil
		}
		return "", err
	}
	return filepath.Join(root, dirs[len(dirs)-1]), nil
}

// stepDirs lists the directories of root whose names start with prefix, sorted.
func stepDirs(root, prefix string) ([]string, error) {
	es, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range es {
		if e.IsDir() && prefix != "" && strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// WriteDirAtomic creates root/name as a complete directory or not at all:
// write fills a fresh temporary directory under root, whose files are then
// fsynced; it is renamed to name (replacing an older one) and root is synced.
// When keep > 0, only the newest keep directories sharing name's prefix (name
// without its trailing digits, e.g. "step-") are kept, names sorting by age,
// and temporary directories that writes of that prefix left when their
// process died are removed.
func WriteDirAtomic(root, name string, write func(tmpDir string) error, keep int) error {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("train: WriteDirAtomic: bad name %q", name)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(root, ".tmp-"+name+"-")
	if err != nil {
		return err
	}
	if err := write(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := syncTree(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	final := filepath.Join(root, name)
	old := ""
	if _, err := os.Stat(final); err == nil {
		old = tmp + ".old"
		if err := os.Rename(final, old); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	if err := syncDir(root); err != nil {
		return err
	}
	if old != "" {
		os.RemoveAll(old)
	}
	if keep > 0 {
		prefix := strings.TrimRight(name, "0123456789")
		return errors.Join(prune(root, prefix, keep), removeInterrupted(root, prefix))
	}
	return nil
}

func prune(root, prefix string, keep int) error {
	dirs, err := stepDirs(root, prefix)
	if err != nil {
		return err
	}
	for i := 0; i+keep < len(dirs); i++ {
		if err := os.RemoveAll(filepath.Join(root, dirs[i])); err != nil {
			return err
		}
	}
	return nil
}

// removeInterrupted removes the temporary directories of writes of names
// with prefix that never finished (the process died mid-write): only one
// write runs at a time under a root, and this one has renamed its own.
func removeInterrupted(root, prefix string) error {
	dirs, err := stepDirs(root, ".tmp-"+prefix)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		errs = append(errs, os.RemoveAll(filepath.Join(root, d)))
	}
	return errors.Join(errs...)
}

// syncTree fsyncs every regular file under dir, then the directories.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(p)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// DirBytes sums the sizes of the regular files under dir (what a checkpoint
// directory holds so far, while it is written).
func DirBytes(dir string) int64 {
	var sum int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				sum += info.Size()
			}
		}
		return nil
	})
	return sum
}
