package train

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMatchesHFLlamaReference writes a model as safetensors and runs
// testdata/train_hf_llama_ref.py, an independent pure-Python forward pass
// written from Hugging Face LlamaForCausalLM's conventions with its own
// safetensors parser: same logits and loss means the layout, tensor names,
// (out, in) matrices, rotate_half RoPE and grouped kv heads are what HF
// expects. Skipped when python3 is not installed.
func TestMatchesHFLlamaReference(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil || testing.Short() {
		t.Skip("needs python3 (and not -short)")
	}
	r := rand.New(rand.NewPCG(51, 52))
	c, T := gradCfg, 6
	c.RopeTheta = 500000
	m, _ := newModel(c, 1, T)
	randParams(r, c, m.params)
	in, tg := randTokens(r, T, c.Vocab), randTokens(r, T, c.Vocab)
	ce, _ := m.forward(in, tg, 0)

	dir := t.TempDir()
	var ts []Tensor
	for _, ti := range c.Layout() {
		ts = append(ts, Tensor{Name: ti.Name, Shape: ti.Shape, Data: m.params[ti.Offset : ti.Offset+ti.Size()]})
	}
	if err := WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, "config.json"), c)
	writeJSON(t, filepath.Join(dir, "tokens.json"), map[string][]int32{"inputs": in, "targets": tg})
	out, err := exec.Command(py, filepath.Join("..", "testdata", "train_hf_llama_ref.py"), dir).Output()
	if err != nil {
		t.Fatalf("reference script: %v", err)
	}
	var ref struct {
		CE     float64     `json:"ce"`
		Logits [][]float64 `json:"logits"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	if math.Abs(ce-ref.CE) > 1e-5*math.Abs(ref.CE) {
		t.Fatalf("cross-entropy %.7f, HF reference %.7f", ce, ref.CE)
	}
	var maxDiff float64
	for n, row := range ref.Logits {
		for v, want := range row {
			maxDiff = math.Max(maxDiff, math.Abs(float64(m.logits(n)[v])-want))
		}
	}
	if maxDiff > 1e-4 {
		t.Fatalf("logits differ from the HF reference by up to %.3g", maxDiff)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
