package main

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/train"
)

// torchPython is Debian's python3 with python3-torch (make hf-deps), not the
// python3 first on PATH. Without torch the test skips, unless CI is set.
const torchPython = "/usr/bin/python3"

func needTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(torchPython, "-c", "import torch").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but %s cannot import torch (make hf-deps): %v\n%s", torchPython, err, out)
		}
		t.Skipf("%s cannot import torch (make hf-deps installs it)", torchPython)
	}
}

// exportTestHome trains the tiny model a few steps, gives its norm gains
// random values (so a misplaced norm shows), and checkpoints it under home.
func exportTestHome(t *testing.T) string {
	t.Helper()
	o, err := train.DefaultOptions("tiny")
	if err != nil {
		t.Fatal(err)
	}
	o.Batch, o.Seq, o.Seed = 4, 32, 11
	tr, err := train.NewTrainer(o, train.DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := tr.Step(); err != nil {
			t.Fatal(err)
		}
	}
	p := append([]float32{}, tr.Params()...)
	r := rand.New(rand.NewPCG(5, 6))
	for _, ti := range tr.Layout() {
		if len(ti.Shape) == 1 {
			for i := ti.Offset; i < ti.Offset+ti.Size(); i++ {
				p[i] = 0.5 + r.Float32()
			}
		}
	}
	if err := tr.SetParams(p); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if _, err := tr.SaveCheckpoint(filepath.Join(home, "checkpoints"), 0); err != nil {
		t.Fatal(err)
	}
	return home
}

// torchDiff runs testdata/hf_torch_check.py on the export at out and
// returns the largest |torch − ref| over all logits and the largest |ref|.
func torchDiff(t *testing.T, out string, tokens []int32, ref []float32, vocab int) (diff, scale float64) {
	t.Helper()
	dir := t.TempDir()
	rows := make([][]float32, len(tokens))
	for i := range rows {
		rows[i] = ref[i*vocab : (i+1)*vocab]
	}
	writeJSONFile(t, filepath.Join(dir, "tokens.json"), map[string]any{"tokens": tokens})
	writeJSONFile(t, filepath.Join(dir, "ref.json"), map[string]any{"logits": rows})
	cmd := exec.Command(torchPython, filepath.Join("..", "..", "testdata", "hf_torch_check.py"), out,
		filepath.Join(dir, "tokens.json"), "--ref", filepath.Join(dir, "ref.json"))
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("hf_torch_check.py: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct {
		MaxAbsDiff float64 `json:"max_abs_diff"`
		MaxAbsRef  float64 `json:"max_abs_ref"`
		Positions  int     `json:"positions"`
	}
	if err := json.Unmarshal(b, &res); err != nil || res.Positions != len(tokens) {
		t.Fatalf("hf_torch_check.py printed %s (%v)", b, err)
	}
	return res.MaxAbsDiff, res.MaxAbsRef
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// exportCmd runs the built binary's export command.
func exportCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(binPath, append([]string{"export"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("export %v: %v\n%s", args, err, out)
	}
}

// TestExportMatchesTorch exports a trained checkpoint with the real command
// and runs the export through testdata/hf_torch_check.py, a PyTorch forward
// written from LlamaForCausalLM's conventions that reads only config.json and
// model.safetensors: f32 logits must match ours to 1e-4; bf16 ones must match
// ours on the same bf16 weights to 1e-4 and ours on the f32 weights to bf16
// precision.
func TestExportMatchesTorch(t *testing.T) {
	needTorch(t)
	home := exportTestHome(t)
	m, err := train.LoadCheckpointModel(home)
	if err != nil {
		t.Fatal(err)
	}
	tokens := train.ByteTokenizer{}.Encode("12+345=357\n7+8=15\n406+99=505\n1+1=2\n63+") // 38 tokens
	ref, err := train.Logits(m.Config, m.Params, tokens)
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.Vocab
	f32, bf16 := filepath.Join(t.TempDir(), "f32"), filepath.Join(t.TempDir(), "bf16")
	exportCmd(t, "--hf", f32, "--checkpoint", home)
	exportCmd(t, "--hf", bf16, "--checkpoint", home, "--dtype", "bf16")

	d, scale := torchDiff(t, f32, tokens, ref, V)
	t.Logf("f32: max |torch − ours| = %.3g over %d×%d logits (max |logit| %.3g)", d, len(tokens), V, scale)
	if !(d < 1e-4) {
		t.Fatalf("f32 export: logits differ from PyTorch's by up to %.3g", d)
	}
	d, scale = torchDiff(t, bf16, tokens, ref, V)
	t.Logf("bf16 vs our f32 model: max diff %.3g, %.3g relative to max |logit|", d, d/scale)
	if !(d < 0.1*scale) {
		t.Fatalf("bf16 export: logits differ from the f32 model's by up to %.3g (max |logit| %.3g)", d, scale)
	}
	ours16, err := train.Logits(m.Config, readExportParams(t, bf16, m.Config), tokens)
	if err != nil {
		t.Fatal(err)
	}
	d, _ = torchDiff(t, bf16, tokens, ours16, V)
	t.Logf("bf16 vs our model on the same bf16 weights: max diff %.3g", d)
	if !(d < 1e-4) {
		t.Fatalf("bf16 export: logits differ from ours on the same weights by up to %.3g", d)
	}
}

// readExportParams reads an export's model.safetensors back into the flat
// parameter vector of c.
func readExportParams(t *testing.T, out string, c train.Config) []float32 {
	t.Helper()
	ts, _, err := train.ReadSafetensors(filepath.Join(out, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]float32{}
	for _, x := range ts {
		byName[x.Name] = x.Data
	}
	p := make([]float32, c.NumParams())
	for _, ti := range c.Layout() {
		if len(byName[ti.Name]) != ti.Size() {
			t.Fatalf("%s: %d values, want %d", ti.Name, len(byName[ti.Name]), ti.Size())
		}
		copy(p[ti.Offset:], byName[ti.Name])
	}
	return p
}

func TestExportCommandErrors(t *testing.T) {
	home := exportTestHome(t)
	out := filepath.Join(t.TempDir(), "hf")
	if err := runExport([]string{"--hf", out, "--checkpoint", home}); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	for _, c := range []struct {
		args []string
		is   error  // errors.Is target, or nil
		text string // in the message
	}{
		{[]string{"--checkpoint", home}, nil, "--hf OUT is required"},
		{[]string{"--hf", out + "2"}, nil, "--checkpoint DIR is required"},
		{[]string{"--hf", out + "2", "--checkpoint", home, "--dtype", "f16"}, nil, `--dtype "f16"`},
		{[]string{"--hf", out + "2", "--checkpoint", home, "extra"}, nil, "unexpected argument"},
		{[]string{"--hf", out + "2", "--checkpoint", empty}, train.ErrCheckpoint, "no checkpoint"},
		{[]string{"--hf", out + "2", "--checkpoint", filepath.Join(empty, "nope")}, train.ErrCheckpoint, "nope"},
		{[]string{"--hf", out, "--checkpoint", home}, train.ErrExists, "--force"},
		{[]string{"--hf", out + "2", "--checkpoint", home, "--tokenizer", filepath.Join(empty, "tok.json")}, train.ErrConfig, "tok.json"},
	} {
		err := runExport(c.args)
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("export %v: %v, want %v containing %q", c.args, err, c.is, c.text)
		}
	}
	if _, err := os.Stat(out + "2"); !os.IsNotExist(err) {
		t.Fatalf("a failed export left %s behind: %v", out+"2", err)
	}
	if err := runExport([]string{"--hf", out, "--checkpoint", home, "--force", "--dtype", "bf16"}); err != nil {
		t.Fatal(err)
	}
}
