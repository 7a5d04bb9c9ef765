package train

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// inferTrainer is a trainer of testOptions after two steps.
func inferTrainer(t *testing.T) *Trainer {
	t.Helper()
	tr, err := NewTrainer(testOptions(t), DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	run(t, tr, 2)
	return tr
}

func logitsOf(t *testing.T, m *Model, tokens []int32) []float32 {
	t.Helper()
	m.Reset()
	l, err := m.Forward(tokens)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(l)
}

// TestInferLoadCheckpoint: a step directory, the root holding step
// directories and a --home with checkpoints/ all load the newest model.
func TestInferLoadCheckpoint(t *testing.T) {
	tr := inferTrainer(t)
	home := t.TempDir()
	root := filepath.Join(home, "checkpoints")
	if _, err := tr.SaveCheckpoint(root, 0); err != nil {
		t.Fatal(err)
	}
	run(t, tr, 1)
	step, err := tr.SaveCheckpoint(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := NewModel(tr.Options().Model, tr.Params())
	prompt := ByteTokenizer{}.Encode("12+34=")
	for _, dir := range []string{step, root, home} {
		got, err := ResolveCheckpoint(dir)
		if err != nil || got != step {
			t.Fatalf("ResolveCheckpoint(%s) = %s, %v; want %s", dir, got, err, step)
		}
		m, err := LoadModel(dir)
		if err != nil {
			t.Fatal(err)
		}
		if m.Context() != tr.Options().Model.SeqLen {
			t.Fatalf("context %d, want seq_len %d", m.Context(), tr.Options().Model.SeqLen)
		}
		if !slices.Equal(logitsOf(t, m, prompt), logitsOf(t, want, prompt)) {
			t.Fatalf("%s: loaded model's logits differ from the trainer's", dir)
		}
	}
	flipByte(t, filepath.Join(step, modelFile), -3)
	if _, err := LoadModel(home); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("corrupt model: %v, want ErrCheckpoint", err)
	}
	for _, dir := range []string{filepath.Join(home, "nope"), t.TempDir()} {
		if _, err := LoadModel(dir); !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("%s: %v, want ErrCheckpoint", dir, err)
		}
	}
}

// TestInferLoadNodeCheckpoint: a node's step directory loads θ₀ (not the
// engine's own parameters), checked against node.json's hash.
func TestInferLoadNodeCheckpoint(t *testing.T) {
	tr := inferTrainer(t)
	dir := filepath.Join(t.TempDir(), "checkpoints", "step-00000004")
	if err := tr.Save(filepath.Join(dir, nodeEngineDir)); err != nil {
		t.Fatal(err)
	}
	theta0 := slices.Clone(tr.Params())
	theta0[5] += 0.5
	ts := []Tensor{{Name: "theta0", Shape: []int{len(theta0)}, Data: theta0},
		{Name: "outer_momentum", Shape: []int{len(theta0)}, Data: make([]float32, len(theta0))}}
	if err := WriteSafetensors(filepath.Join(dir, nodeOuterFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	writeNodeState := func(hash string) {
		b, _ := json.Marshal(map[string]any{"format": nodeStateFormat, "run": "r", "step": 4, "hash": hash})
		if err := os.WriteFile(filepath.Join(dir, nodeStateFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeNodeState(Hash(theta0))
	m, err := LoadModel(filepath.Dir(filepath.Dir(dir))) // the node's --home
	if err != nil {
		t.Fatal(err)
	}
	want, _ := NewModel(tr.Options().Model, theta0)
	prompt := ByteTokenizer{}.Encode("7+8=")
	if !slices.Equal(logitsOf(t, m, prompt), logitsOf(t, want, prompt)) {
		t.Fatal("node checkpoint: logits are not θ₀'s")
	}
	writeNodeState(Hash(tr.Params()))
	if _, err := LoadModel(dir); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("θ₀ with the wrong hash: %v, want ErrCheckpoint", err)
	}
}
