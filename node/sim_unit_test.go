package node

import (
	"errors"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/train"
)

// simOptions are training options of a small model for the sim device.
func simOptions(seed, worker uint64) train.Options {
	return train.Options{
		Model: train.Config{Vocab: 64, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, SeqLen: 16},
		Batch: 2, Seq: 16, GradAccum: 3, Seed: seed, Worker: worker,
	}
}

func unitSim(t *testing.T, seed, worker uint64) *simEngine {
	t.Helper()
	e, err := newSimEngine(simOptions(seed, worker), time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func simSteps(t *testing.T, e *simEngine, n int) []train.StepStats {
	t.Helper()
	var out []train.StepStats
	for range n {
		st, err := e.Step()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

// TestSimEngineNeedsStep pins that the sim device refuses a step duration
// ≤ 0 with ErrBadConfig.
func TestSimEngineNeedsStep(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := newSimEngine(simOptions(1, 1), d); !errors.Is(err, ErrBadConfig) {
			t.Errorf("dur %v: err %v, want ErrBadConfig", d, err)
		}
	}
}

// TestSimEngineInit pins the initial model: the preset's size, a function of
// the run's seed only (every member starts alike), values in [-1, 1).
func TestSimEngineInit(t *testing.T) {
	opts := simOptions(5, 1)
	a, b, c := unitSim(t, 5, 1), unitSim(t, 5, 2), unitSim(t, 6, 1)
	if int64(len(a.Params())) != opts.Model.NumParams() {
		t.Fatalf("%d params, want %d", len(a.Params()), opts.Model.NumParams())
	}
	if !slices.Equal(a.Params(), b.Params()) {
		t.Fatal("two workers of one run start from different models")
	}
	if slices.Equal(a.Params(), c.Params()) {
		t.Fatal("two seeds start from the same model")
	}
	for i, v := range a.Params() {
		if !(v >= -1 && v < 1) {
			t.Fatalf("param %d = %v outside [-1, 1)", i, v)
		}
	}
	if a.StepCount() != 0 {
		t.Fatalf("StepCount %d before any step", a.StepCount())
	}
}

// TestSimNoise pins simNoise: deterministic, in [-1, 1), roughly centred,
// and different for different keys.
func TestSimNoise(t *testing.T) {
	var sum float64
	const n = 20000
	same := 0
	for i := range uint64(n) {
		v := simNoise(42, i)
		if v != simNoise(42, i) {
			t.Fatal("not deterministic")
		}
		if !(v >= -1 && v < 1) {
			t.Fatalf("simNoise(42, %d) = %v", i, v)
		}
		if v == simNoise(43, i) {
			same++
		}
		sum += float64(v)
	}
	if mean := sum / n; math.Abs(mean) > 0.02 {
		t.Fatalf("mean %v, want ≈ 0", mean)
	}
	if same > n/100 {
		t.Fatalf("keys 42 and 43 agree at %d of %d indices", same, n)
	}
}

// TestSimEngineDeterministic pins that inner steps are a function of (seed,
// worker): the same pair gives the same bits, another worker other bits.
func TestSimEngineDeterministic(t *testing.T) {
	a, b, other := unitSim(t, 9, 1), unitSim(t, 9, 1), unitSim(t, 9, 2)
	sa, sb := simSteps(t, a, 20), simSteps(t, b, 20)
	simSteps(t, other, 20)
	if !slices.Equal(a.Params(), b.Params()) {
		t.Fatal("same seed and worker, different parameters")
	}
	for i := range sa {
		if sa[i].Loss != sb[i].Loss {
			t.Fatalf("step %d: losses %v and %v", i, sa[i].Loss, sb[i].Loss)
		}
	}
	if slices.Equal(a.Params(), other.Params()) {
		t.Fatal("two workers computed the same pseudo-gradient")
	}
}

// TestSimEngineStepStats pins a step's stats: the step count, the tokens of
// a step (batch·seq·accum), the lr, and the loss being Eval's.
func TestSimEngineStepStats(t *testing.T) {
	e := unitSim(t, 3, 4)
	for i, st := range simSteps(t, e, 5) {
		eval, err := e.Eval()
		if err != nil {
			t.Fatal(err)
		}
		if st.Step != i+1 || st.Tokens != 2*16*3 || st.LR != float64(e.lr) || st.Compute <= 0 {
			t.Fatalf("step %d stats %+v", i+1, st)
		}
		if i == 4 && st.Loss != eval {
			t.Fatalf("loss %v, Eval %v", st.Loss, eval)
		}
	}
	if e.StepCount() != 5 {
		t.Fatalf("StepCount %d, want 5", e.StepCount())
	}
}

// TestSimEngineStepTouchesOneStride pins the cost model: a step changes one
// parameter in simStride, a different one each step.
func TestSimEngineStepTouchesOneStride(t *testing.T) {
	e := unitSim(t, 1, 1)
	for s := range simStride + 1 {
		before := slices.Clone(e.Params())
		simSteps(t, e, 1)
		for i, v := range e.Params() {
			if changed := v != before[i]; changed != (i%simStride == s%simStride) {
				t.Fatalf("step %d: param %d changed %v", s, i, changed)
			}
		}
	}
}

// TestSimEngineLossFalls pins that "training" pulls the model to its target:
// the held-out loss falls steadily, for every worker.
func TestSimEngineLossFalls(t *testing.T) {
	for _, w := range []uint64{1, 2, 3} {
		e := unitSim(t, 11, w)
		l0, _ := e.Eval()
		var last float64
		for round := range 4 {
			st := simSteps(t, e, 4*simStride)
			loss := st[len(st)-1].Loss
			if round > 0 && !(loss < last) {
				t.Fatalf("worker %d round %d: loss %v not below %v", w, round, loss, last)
			}
			last = loss
		}
		if !(last < 0.5*l0) {
			t.Fatalf("worker %d: loss %v → %v, want it halved", w, l0, last)
		}
	}
}

// TestSimEngineSetParams pins Params/SetParams: a round trip restores the
// model bit for bit, SetParams copies, and a wrong size is an error.
func TestSimEngineSetParams(t *testing.T) {
	e := unitSim(t, 2, 2)
	start := slices.Clone(e.Params())
	simSteps(t, e, 10)
	trained := slices.Clone(e.Params())
	if err := e.SetParams(start); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.Params(), start) {
		t.Fatal("SetParams did not restore the model")
	}
	start[0] = 99
	if e.Params()[0] == 99 {
		t.Fatal("SetParams kept the caller's slice")
	}
	if err := e.SetParams(trained); err != nil || !slices.Equal(e.Params(), trained) {
		t.Fatalf("round trip: %v", err)
	}
	for _, n := range []int{0, len(trained) - 1, len(trained) + 1} {
		if err := e.SetParams(make([]float32, n)); err == nil {
			t.Errorf("SetParams of %d params accepted (model has %d)", n, len(trained))
		}
	}
	if !slices.Equal(e.Params(), trained) {
		t.Fatal("a refused SetParams changed the model")
	}
}

// TestSimEngineSetParamsThenStep pins that the steps after SetParams depend
// only on the parameters and the step count: two workers put on one model
// at one step continue alike only if they are the same worker.
func TestSimEngineSetParamsThenStep(t *testing.T) {
	a, b := unitSim(t, 4, 1), unitSim(t, 4, 1)
	simSteps(t, a, 3)
	simSteps(t, b, 3)
	g := unitVec(7, len(a.Params()), 0.5)
	if err := a.SetParams(g); err != nil {
		t.Fatal(err)
	}
	if err := b.SetParams(g); err != nil {
		t.Fatal(err)
	}
	simSteps(t, a, 5)
	simSteps(t, b, 5)
	if !slices.Equal(a.Params(), b.Params()) {
		t.Fatal("same model, worker and step count, different result")
	}
}

// TestSimEngineSave pins Save: model.safetensors under dir holds the
// parameters and the step, and Close succeeds.
func TestSimEngineSave(t *testing.T) {
	e := unitSim(t, 8, 1)
	simSteps(t, e, 6)
	dir := filepath.Join(t.TempDir(), "engine")
	if err := e.Save(dir); err != nil {
		t.Fatal(err)
	}
	ts, meta, err := train.ReadSafetensors(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Name != "params" || !slices.Equal(ts[0].Data, e.Params()) {
		t.Fatalf("saved tensors %d, name %q", len(ts), ts[0].Name)
	}
	if meta["device"] != "sim" || meta["step"] != "6" {
		t.Fatalf("metadata %v", meta)
	}
	if err := e.Save(dir); err != nil { // over an existing one
		t.Fatalf("second save: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
