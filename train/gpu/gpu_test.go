//go:build cuda || cudaemu

package gpu

// GPU checks of the engine against the CPU trainer, checkpoint interop, the
// PyTorch export and the step benchmark. They need a GPU: run them with
// `kernels/cuda/build.sh test` (see docs/cuda.md).

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/intellect-node/intellect-node/train"
)

// smallOpts is a preset shrunk so the CPU twin runs in seconds.
func smallOpts(t testing.TB, preset string, batch, seq int) train.Options {
	t.Helper()
	o, err := train.DefaultOptions(preset)
	if err != nil {
		t.Fatal(err)
	}
	o.Batch, o.Seq, o.EvalBatches, o.WarmupSteps, o.Seed = batch, seq, 2, 2, 7
	return o
}

func newPair(t *testing.T, o train.Options, attn string) (*train.Trainer, *Engine) {
	t.Helper()
	cpu, err := train.NewTrainer(o, train.DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := New(o, train.DefaultSource(), Config{Attention: attn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gpu.Close() })
	return cpu, gpu
}

// matchCase is one configuration of TestMatchesCPU (the lists are in
// cases_cuda_test.go and cases_emu_test.go: the emulator is slow).
type matchCase struct {
	preset     string
	batch, seq int
	attn       string
	steps      int
}

func rel(a, b float64) float64 { return math.Abs(a-b) / math.Max(math.Abs(b), 1e-12) }

// l2dist returns ‖a − b‖₂.
func l2dist(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s)
}

// TestMatchesCPU runs the GPU engine and the CPU trainer from the same
// initial bits on the same data and compares eval loss, step losses,
// gradient norms and the parameters after a few steps, within bf16
// tolerance. tiny has head size 32, small 64 (grouped-query in both); both
// attention implementations are run.
func TestMatchesCPU(t *testing.T) {
	for _, c := range matchCases {
		t.Run(c.preset+"/"+c.attn, func(t *testing.T) {
			matchCPU(t, smallOpts(t, c.preset, c.batch, c.seq), c)
		})
	}
}

// matchCPU is TestMatchesCPU's comparison for options o (c gives the
// attention and the steps); it returns both engines after the steps.
func matchCPU(t *testing.T, o train.Options, c matchCase) (*train.Trainer, *Engine) {
	t.Helper()
	cpu, gpu := newPair(t, o, c.attn)
	theta0 := append([]float32(nil), cpu.Params()...)
	if h, w := train.Hash(gpu.Params()), train.Hash(theta0); h != w {
		t.Fatalf("initial parameters differ: gpu %s cpu %s", h, w)
	}
	ec, _ := cpu.Eval()
	eg, err := gpu.Eval()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("eval: cpu %.6f gpu %.6f", ec, eg)
	if rel(eg, ec) > 5e-3 {
		t.Errorf("eval loss: gpu %.6f, cpu %.6f", eg, ec)
	}
	for s := 0; s < c.steps; s++ {
		sc, _ := cpu.Step()
		sg, err := gpu.Step()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d: loss cpu %.5f gpu %.5f, grad norm cpu %.5f gpu %.5f", s, sc.Loss, sg.Loss, sc.GradNorm, sg.GradNorm)
		if rel(sg.Loss, sc.Loss) > 1e-2 || rel(sg.GradNorm, sc.GradNorm) > 5e-2 || sg.LR != sc.LR || sg.Step != sc.Step {
			t.Errorf("step %d: gpu %+v, cpu %+v", s, sg, sc)
		}
	}
	moved := l2dist(cpu.Params(), theta0)
	apart := l2dist(gpu.Params(), cpu.Params())
	t.Logf("after %d steps: ‖θgpu−θcpu‖ / ‖θcpu−θ0‖ = %.4f", c.steps, apart/moved)
	if apart > 0.3*moved {
		t.Errorf("parameters diverged: ‖θgpu−θcpu‖ = %.4g vs ‖θcpu−θ0‖ = %.4g", apart, moved)
	}
	return cpu, gpu
}

// TestParamsRoundTrip checks the Params/SetParams contract: edits to the
// slice Params returned reach the device at the next Eval, and SetParams
// replaces the parameters.
func TestParamsRoundTrip(t *testing.T) {
	o := smallOpts(t, "tiny", 2, 32)
	g, err := New(o, train.DefaultSource(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	before, _ := g.Eval()
	p := g.Params()
	for i := range p[:o.Model.Vocab*o.Model.Dim] { // wipe the embedding table
		p[i] = 0
	}
	after, err := g.Eval()
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Errorf("eval %.6f unchanged after zeroing the embedding through Params", after)
	}
	if q := g.Params(); q[0] != 0 || q[o.Model.Vocab*o.Model.Dim-1] != 0 {
		t.Errorf("device did not keep the edited embedding")
	}
	fresh := make([]float32, len(p))
	train.InitParams(o.Model, o.Seed, fresh)
	if err := g.SetParams(fresh); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.Eval(); again != before {
		t.Errorf("eval after SetParams(init) = %.6f, want %.6f (same kernels, same inputs)", again, before)
	}
}

// stepAndSave makes an engine of o and dc (closed with the test), takes two
// steps and saves a checkpoint; it returns the engine and the directory.
func stepAndSave(t *testing.T, o train.Options, dc Config) (*Engine, string) {
	t.Helper()
	g, err := New(o, train.DefaultSource(), dc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	for range 2 {
		if _, err := g.Step(); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := g.Save(dir); err != nil {
		t.Fatal(err)
	}
	return g, dir
}

// TestCheckpointInterop saves a GPU checkpoint, resumes it on the GPU and on
// the CPU, and checks both see the same parameters and step.
func TestCheckpointInterop(t *testing.T) {
	o := smallOpts(t, "tiny", 2, 32)
	g, dir := stepAndSave(t, o, Config{})
	want := train.Hash(g.Params())
	cpu, err := train.ResumeTrainer(dir, train.DefaultSource())
	if err != nil {
		t.Fatalf("CPU resume of a GPU checkpoint: %v", err)
	}
	if h := train.Hash(cpu.Params()); h != want || cpu.StepCount() != 2 {
		t.Errorf("CPU resume: hash %s step %d, want %s 2", h, cpu.StepCount(), want)
	}
	g2, err := Resume(dir, train.DefaultSource(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if h := train.Hash(g2.Params()); h != want || g2.StepCount() != 2 {
		t.Errorf("GPU resume: hash %s step %d, want %s 2", h, g2.StepCount(), want)
	}
	s1, _ := g.Step()
	s2, _ := g2.Step()
	if rel(s1.Loss, s2.Loss) > 1e-3 {
		t.Errorf("step after resume: loss %.6f, uninterrupted %.6f", s2.Loss, s1.Loss)
	}
}

// TestExportForTorch writes what kernels/cuda/check_torch.py compares with
// transformers' LlamaForCausalLM: a HF model folder (config.json +
// model.safetensors) and check.json with a batch of tokens and the GPU's and
// the CPU's mean cross-entropy, plus logits.safetensors with the GPU logits.
// It runs only when $INTELLECT_TORCH_DIR names the output directory.
func TestExportForTorch(t *testing.T) {
	out := os.Getenv("INTELLECT_TORCH_DIR")
	if out == "" {
		t.Skip("set INTELLECT_TORCH_DIR to write the PyTorch comparison files")
	}
	for _, preset := range []string{"tiny", "small"} {
		o := smallOpts(t, preset, 2, 64)
		cpu, g := newPair(t, o, "")
		for i := 0; i < 3; i++ { // move away from the init so the check is not trivial
			if _, err := g.Step(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cpu.SetParams(g.Params()); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(out, preset)
		if err := exportHF(g, dir); err != nil {
			t.Fatal(err)
		}
		rows := make([]int32, o.Batch*(o.Seq+1))
		if err := train.DefaultSource().Eval(rows, o.Batch, o.Seq+1, 0); err != nil {
			t.Fatal(err)
		}
		logits := make([]float32, o.Batch*o.Seq*o.Model.Vocab)
		ce, err := g.Forward(rows, logits)
		if err != nil {
			t.Fatal(err)
		}
		cpuCE, err := cpuLoss(cpu, rows)
		if err != nil {
			t.Fatal(err)
		}
		lt := []train.Tensor{{Name: "logits", Shape: []int{o.Batch, o.Seq, o.Model.Vocab}, Data: logits}}
		if err := train.WriteSafetensors(filepath.Join(dir, "logits.safetensors"), lt, nil); err != nil {
			t.Fatal(err)
		}
		check := map[string]any{"batch": o.Batch, "seq": o.Seq, "rows": rows, "gpu_ce": ce, "cpu_ce": cpuCE}
		b, _ := json.MarshalIndent(check, "", " ")
		if err := os.WriteFile(filepath.Join(dir, "check.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: wrote %s (gpu ce %.6f, cpu ce %.6f)", preset, dir, ce, cpuCE)
	}
}

// cpuLoss is the CPU trainer's mean cross-entropy on rows, through a
// one-batch Source.
func cpuLoss(cpu *train.Trainer, rows []int32) (float64, error) {
	o := cpu.Options()
	o.EvalBatches = 1
	one, err := train.NewTrainer(o, fixedSource{rows: rows, vocab: o.Model.Vocab})
	if err != nil {
		return 0, err
	}
	if err := one.SetParams(cpu.Params()); err != nil {
		return 0, err
	}
	return one.Eval()
}

// fixedSource serves the same rows for every batch.
type fixedSource struct {
	rows  []int32
	vocab int
}

func (f fixedSource) Vocab() int     { return f.vocab }
func (f fixedSource) String() string { return "fixed" }
func (f fixedSource) Train(dst []int32, rows, width int, k train.Key) error {
	return f.Eval(dst, rows, width, 0)
}
func (f fixedSource) Eval(dst []int32, rows, width, i int) error {
	if len(dst) != len(f.rows) {
		return fmt.Errorf("fixed source: %d tokens asked, have %d", len(dst), len(f.rows))
	}
	copy(dst, f.rows)
	return nil
}

// exportHF writes config.json (transformers LlamaConfig) and model.safetensors.
func exportHF(e *Engine, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c := e.cfg
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"vocab_size": c.Vocab, "hidden_size": c.Dim, "intermediate_size": c.FFN,
		"num_hidden_layers": c.Layers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"head_dim": c.HeadDim(), "max_position_embeddings": c.SeqLen, "rms_norm_eps": c.NormEps,
		"rope_theta": c.RopeTheta, "hidden_act": "silu", "tie_word_embeddings": false,
		"attention_bias": false, "mlp_bias": false, "torch_dtype": "float32",
	}
	b, _ := json.MarshalIndent(cfg, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return err
	}
	p := e.Params()
	var ts []train.Tensor
	for _, ti := range c.Layout() {
		ts = append(ts, train.Tensor{Name: ti.Name, Shape: ti.Shape, Data: p[ti.Offset : ti.Offset+ti.Size()]})
	}
	return train.WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"})
}

// muonOpts are the options of the Muon tests: muonCase and muonLayers
// (cases_*_test.go), Muon as the inner optimizer.
func muonOpts(t testing.TB) train.Options {
	o := smallOpts(t, muonCase.preset, muonCase.batch, muonCase.seq)
	if muonLayers > 0 {
		o.Model.Layers = muonLayers
	}
	o.Optimizer = train.OptimizerMuon
	return o
}

// TestMuonMatchesCPU: with train.OptimizerMuon the GPU engine (Newton–Schulz
// on cuBLAS fp32 GEMMs, element-wise steps in muon_* kernels) follows the
// CPU trainer's Muon within TestMatchesCPU's tolerances. The hidden shapes
// include both sides of Newton–Schulz's transpose (in tiny, gate and up are
// 448 × 128, down 128 × 448, q and o square). It must also be Muon, not
// AdamW: the CPU trainer with AdamW from the same bits ends much farther away.
func TestMuonMatchesCPU(t *testing.T) {
	o := muonOpts(t)
	cpu, gpu := matchCPU(t, o, muonCase)
	o.Optimizer = train.OptimizerAdamW
	adam, err := train.NewTrainer(o, train.DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < muonCase.steps; s++ {
		if _, err := adam.Step(); err != nil {
			t.Fatal(err)
		}
	}
	tm, ta := l2dist(gpu.Params(), cpu.Params()), l2dist(gpu.Params(), adam.Params())
	t.Logf("‖θgpu−θcpu,muon‖ = %.4g, ‖θgpu−θcpu,adamw‖ = %.4g", tm, ta)
	if ta < 3*tm {
		t.Errorf("the GPU engine's muon is as close to the CPU's adamw (%.4g) as to its muon (%.4g)", ta, tm)
	}
}

// TestMuonCheckpoint: Muon's momentum lives in AdamW's first-moment slots on
// the device too, so Save writes it (exp_avg; the hidden matrices'
// exp_avg_sq stays zero), the CPU trainer resumes it as Muon, and a GPU
// engine resumed from it takes the uninterrupted engine's next step. The
// bound on that step is tight: with μ = 0.95 a lost momentum would turn
// the step's direction, putting the two engines about a step's length apart.
func TestMuonCheckpoint(t *testing.T) {
	o := muonOpts(t)
	g, dir := stepAndSave(t, o, Config{Attention: muonCase.attn})
	saved := append([]float32(nil), g.Params()...)
	opt, _, err := train.ReadSafetensors(filepath.Join(dir, optimizerFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range o.Model.Layout() {
		m, v := opt[0].Data[ti.Offset:ti.Offset+ti.Size()], opt[1].Data[ti.Offset:ti.Offset+ti.Size()]
		nm, nv := l2dist(m, make([]float32, len(m))), l2dist(v, make([]float32, len(v)))
		if nm == 0 || ti.IsHidden() != (nv == 0) {
			t.Errorf("%s (hidden %v): ‖exp_avg‖ = %g, ‖exp_avg_sq‖ = %g", ti.Name, ti.IsHidden(), nm, nv)
		}
	}
	cpu, err := train.ResumeTrainer(dir, train.DefaultSource())
	if err != nil {
		t.Fatalf("CPU resume of a GPU checkpoint: %v", err)
	}
	if h, w := train.Hash(cpu.Params()), train.Hash(saved); h != w || cpu.StepCount() != 2 || cpu.Options().Optimizer != train.OptimizerMuon {
		t.Errorf("CPU resume: hash %s step %d optimizer %q, want %s 2 %q", h, cpu.StepCount(), cpu.Options().Optimizer, w, train.OptimizerMuon)
	}
	g2, err := Resume(dir, train.DefaultSource(), Config{Attention: muonCase.attn})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if g2.Options().Optimizer != train.OptimizerMuon || g2.StepCount() != 2 {
		t.Fatalf("GPU resume: optimizer %q step %d", g2.Options().Optimizer, g2.StepCount())
	}
	s1, err := g.Step()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := g2.Step()
	if err != nil {
		t.Fatal(err)
	}
	moved := l2dist(g.Params(), saved)
	apart := l2dist(g2.Params(), g.Params())
	t.Logf("step after resume: loss %.6f, uninterrupted %.6f; ‖θresumed−θ‖ / ‖θ−θsaved‖ = %.3g", s2.Loss, s1.Loss, apart/moved)
	if rel(s1.Loss, s2.Loss) > 1e-3 || apart > 1e-3*moved {
		t.Errorf("step after resume: loss %.6f vs %.6f uninterrupted, ‖θresumed−θ‖ = %.4g vs a step of %.4g", s2.Loss, s1.Loss, apart, moved)
	}
}
