package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// A node (package node) keeps its checkpoints under <home>/checkpoints as
// step directories holding the global model θ₀ of the outer step:
//
//	engine/            the CPU trainer's checkpoint (its state.json has the model config)
//	outer.safetensors  "theta0" (the global model, flat) and "outer_momentum"
//	node.json          {"format": "intellect-node/node/1", "hash": Hash(θ₀), ...}
//
// These names mirror node/sync.go, which cannot be imported from here.
const (
	checkpointsSubdir = "checkpoints"
	nodeStateFile     = "node.json"
	nodeOuterFile     = "outer.safetensors"
	nodeEngineSubdir  = "engine"
	nodeStateFormat   = "intellect-node/node/1"
)

// ResolveCheckpoint returns the step directory that dir names: dir itself
// when it is one (it holds state.json, written by Trainer.Save, or node.json,
// written by a node), else the newest step-NNNNNNNN directory under dir or
// under dir/checkpoints (the --home of `train` and of `start`).
func ResolveCheckpoint(dir string) (string, error) {
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	for _, f := range []string{stateFile, nodeStateFile} {
		if isFile(filepath.Join(dir, f)) {
			return dir, nil
		}
	}
	for _, root := range []string{dir, filepath.Join(dir, checkpointsSubdir)} {
		step, err := LatestCheckpoint(root)
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrCheckpoint, err)
		}
		if step != "" {
			return step, nil
		}
	}
	return "", fmt.Errorf("%w: %s holds no checkpoint (no %s or %s, no %s* directories, no %s/)",
		ErrCheckpoint, dir, stateFile, nodeStateFile, CheckpointPrefix, checkpointsSubdir)
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// LoadModel loads the model of a checkpoint for inference (see
// ResolveCheckpoint for what dir may be): from a trainer's step directory its
// parameters, from a node's the global model θ₀. The parameters are checked
// against the hash the checkpoint records; a missing, truncated or
// inconsistent file gives an error wrapping ErrCheckpoint.
func LoadModel(dir string) (*Model, error) {
	step, err := ResolveCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	if isFile(filepath.Join(step, nodeStateFile)) {
		return loadNodeModel(step)
	}
	return loadTrainerModel(step)
}

// loadTrainerModel loads model.safetensors of a trainer checkpoint.
func loadTrainerModel(dir string) (*Model, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	c := st.Options.Model
	params, err := allocParams(dir, c)
	if err != nil {
		return nil, err
	}
	if err := readModelFile(filepath.Join(dir, modelFile), c.Layout(), params); err != nil {
		return nil, err
	}
	if h := Hash(params); h != st.ModelHash {
		return nil, fmt.Errorf("%w: %s: model hash %s, state.json says %s", ErrCheckpoint, dir, h, st.ModelHash)
	}
	return NewModel(c, params)
}

// loadNodeModel loads θ₀ of a node checkpoint, with the config of its engine.
func loadNodeModel(dir string) (*Model, error) {
	st, err := readState(filepath.Join(dir, nodeEngineSubdir))
	if err != nil {
		return nil, err
	}
	b, err := readFileLimited(filepath.Join(dir, nodeStateFile), maxConfigFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	var ns struct{ Format, Hash string }
	if err := json.Unmarshal(b, &ns); err != nil || ns.Format != nodeStateFormat {
		return nil, fmt.Errorf("%w: %s: not a node state (format %q, %v)", ErrCheckpoint, nodeStateFile, ns.Format, err)
	}
	ts, _, err := ReadSafetensors(filepath.Join(dir, nodeOuterFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	c := st.Options.Model
	for _, t := range ts {
		if t.Name != "theta0" {
			continue
		}
		if int64(len(t.Data)) != c.NumParams() || Hash(t.Data) != ns.Hash {
			return nil, fmt.Errorf("%w: %s: theta0 (%d values) does not match the model (%d) or its hash", ErrCheckpoint, dir, len(t.Data), c.NumParams())
		}
		return NewModel(c, t.Data)
	}
	return nil, fmt.Errorf("%w: %s: no theta0 in %s", ErrCheckpoint, dir, nodeOuterFile)
}

// allocParams allocates the parameters of c, refusing a model too large for
// the CPU before allocating.
func allocParams(dir string, c Config) ([]float32, error) {
	if n := c.NumParams(); n > maxCPUFloats {
		return nil, fmt.Errorf("%w: %s: %d parameters: too many for the CPU", ErrCheckpoint, dir, n)
	}
	return make([]float32, c.NumParams()), nil
}
