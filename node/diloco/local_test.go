package diloco

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/train"
)

// trainOptions are small CPU training options for in-process runs.
func trainOptions(t testing.TB) train.Options {
	t.Helper()
	o, err := train.DefaultOptions("tiny")
	if err != nil {
		t.Fatal(err)
	}
	o.Model = train.Config{Name: "test", Vocab: 256, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 64,
		SeqLen: 32, RopeTheta: 10000, NormEps: 1e-5, ZLoss: 1e-4}
	o.Batch, o.Seq, o.GradAccum, o.EvalBatches = 4, 24, 1, 2
	o.LR, o.MinLR, o.WarmupSteps, o.TotalSteps, o.DecayFrac = 1e-2, 1e-3, 3, 40, 0.25
	o.Seed = 7
	return o
}

// A DiLoCo of one member with outer lr 1, no momentum and the plain mean is
// plain training, with AdamW as with Muon (whose state carries across
// phases): θ₀ − (θ₀ − θ) = θ up to one float32 rounding per outer step.
func TestLocalOfOneIsTraining(t *testing.T) {
	for _, opt := range []string{train.OptimizerAdamW, train.OptimizerMuon} {
		o := trainOptions(t)
		o.Optimizer, o.Worker = opt, 11
		const inner, outer = 5, 4
		tr, err := train.NewTrainer(o, train.DefaultSource())
		if err != nil {
			t.Fatal(err)
		}
		var want []float64
		for s := 1; s <= inner*outer; s++ {
			if _, err := tr.Step(); err != nil {
				t.Fatal(err)
			}
			if s%inner == 0 {
				ev, _ := tr.Eval()
				want = append(want, ev)
			}
		}
		cfg := LocalConfig{Options: o, Workers: []uint64{11}, Inner: inner, Outer: outer, OuterLR: 1}
		var got []float64
		if _, err := RunLocal(context.Background(), cfg, train.DefaultSource(), func(r Record) {
			got = append(got, r.EvalLoss)
			if want := int64(r.Step * inner * o.Batch * o.Seq); r.Tokens != want {
				t.Errorf("%s step %d: %d tokens, want %d", opt, r.Step, r.Tokens, want)
			}
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != outer {
			t.Fatalf("%s: %d records", opt, len(got))
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-4*want[i] {
				t.Errorf("%s outer step %d: eval %.6f, plain training %.6f", opt, i+1, got[i], want[i])
			}
		}
	}
}

// The outer step moves the global model by the weighted mean of the
// members' pseudo-gradients: with lr 1 and no momentum, after one outer
// step θ = θ₀ − mean(θ₀ − θᵢ) = mean(θᵢ).
func TestLocalAveragesMembers(t *testing.T) {
	o := trainOptions(t)
	workers := []uint64{3, 5, 9}
	var ends [][]float32
	for _, w := range workers {
		o.Worker = w
		tr, err := train.NewTrainer(o, train.DefaultSource())
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := tr.Step(); err != nil {
				t.Fatal(err)
			}
		}
		ends = append(ends, slices.Clone(tr.Params()))
	}
	cfg := LocalConfig{Options: o, Workers: workers, Inner: 3, Outer: 1, OuterLR: 1}
	got, err := RunLocal(context.Background(), cfg, train.DefaultSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, meanOf(ends...)); d > 1e-6 {
		t.Errorf("global model differs from the mean of the members' models by up to %g", d)
	}
	if same := countEqual(ends[0], ends[1]); same > len(ends[0])/2 {
		t.Errorf("members 3 and 5 ended with %d of %d parameters equal: the same data?", same, len(ends[0]))
	}
}

func countEqual(a, b []float32) int {
	n := 0
	for i := range a {
		if a[i] == b[i] {
			n++
		}
	}
	return n
}

// With one member and plain averaging, the overlapped schedule trains
// continuously: its rebase moves the member by θ₀ − E = 0 up to rounding,
// and global model t is the model after t phases — the blocking run's.
func TestLocalOverlapOneMember(t *testing.T) {
	var blocking, lagged []float64
	for lag, out := range []*[]float64{&blocking, &lagged} {
		engines := []train.Engine{newTestEngine(512, 7, 4, 0)}
		cfg := LocalConfig{Workers: []uint64{4}, Inner: 4, Outer: 4, OuterLR: 1, Lag: 2 * lag}
		if _, err := runLocal(context.Background(), cfg, engines, func(r Record) {
			*out = append(*out, r.EvalLoss)
			if r.Step != len(*out) {
				t.Errorf("lag %d: record %d has step %d", lag, len(*out), r.Step)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(lagged) != 4 {
		t.Fatalf("lagged run recorded %d steps, want 4", len(lagged))
	}
	for i := range blocking {
		if math.Abs(lagged[i]-blocking[i]) > 1e-4*blocking[i] {
			t.Errorf("step %d: lagged eval %.6f, blocking %.6f", i+1, lagged[i], blocking[i])
		}
	}
}

// TestLocalRejectsBadConfig: no members, no inner or outer steps, a lag
// beyond H, a bad outer optimizer, two averagings at once.
func TestLocalRejectsBadConfig(t *testing.T) {
	ring, sc := &collective.AllReduceConfig{}, &collective.ScatterConfig{}
	for _, c := range []LocalConfig{
		{Inner: 1, Outer: 1, OuterLR: 1},
		{Workers: []uint64{1}, Inner: 0, Outer: 1, OuterLR: 1},
		{Workers: []uint64{1}, Inner: 1, Outer: 0, OuterLR: 1},
		{Workers: []uint64{1}, Inner: 2, Outer: 1, OuterLR: 1, Lag: 3},
		{Workers: []uint64{1}, Inner: 1, Outer: 1, OuterLR: 0},
		{Workers: []uint64{1}, Inner: 1, Outer: 1, OuterLR: 1, OuterMomentum: 1},
		{Workers: []uint64{1}, Inner: 1, Outer: 1, OuterLR: 1, Averaging: Averaging{Ring: ring, Scatter: sc}},
	} {
		if _, err := RunLocal(context.Background(), c, train.DefaultSource(), nil); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// localEngines returns k test engines of the same model.
func localEngines(k int) []train.Engine {
	es := make([]train.Engine, k)
	for i := range es {
		es[i] = newTestEngine(testParams, 7, uint64(i+1), 0)
	}
	return es
}

// TestLocalRecords: every step's record comes once, in order, with the
// tokens of every member's phases so far, member 0's evaluation of the
// global model (the others evaluate nothing), and its hash.
func TestLocalRecords(t *testing.T) {
	engines := localEngines(3)
	cfg := LocalConfig{Workers: []uint64{1, 2, 3}, Inner: 2, Outer: 3, OuterLR: 0.7, OuterMomentum: 0.5,
		Averaging: Averaging{Ring: &collective.AllReduceConfig{Shards: 2, ChunkElems: 256}}}
	var recs []Record
	got, err := runLocal(context.Background(), cfg, engines, func(r Record) { recs = append(recs, r) })
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].Hash != train.Hash(got) {
		t.Fatalf("%d records, last %+v", len(recs), recs[len(recs)-1])
	}
	for i, r := range recs {
		if r.Step != i+1 || r.Tokens != int64((i+1)*3*2*16) || !(r.EvalLoss > 0) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if e := engines[0].(*testEngine).evals; e != 3 {
		t.Fatalf("member 0 evaluated %d times", e)
	}
	for i, e := range engines[1:] {
		if e.(*testEngine).evals != 0 {
			t.Fatalf("member %d evaluated", i+1)
		}
	}
}

// TestLocalDropsFailingMember: a member whose own contribution fails the
// attempt (its pseudo-gradient turned to NaN, which the int8 codec refuses)
// is dropped from the step, blocking and overlapped; the others average
// without it and it fetches their model and rejoins at the next step, so
// every step is made and every member ends with the same model.
func TestLocalDropsFailingMember(t *testing.T) {
	for _, lag := range []int{0, 1} {
		failing := func(members []int, srcs [][]float32, w []float32) ([][]float32, []float32) {
			sent := slices.Clone(srcs)
			for r, i := range members {
				if i == 2 {
					sent[r] = slices.Clone(srcs[r])
					sent[r][0] = float32(math.NaN())
				}
			}
			return sent, w
		}
		cfg := LocalConfig{Workers: []uint64{1, 2, 3}, Inner: 2, Outer: 3, OuterLR: 1, Lag: lag,
			Averaging: Averaging{Ring: &collective.AllReduceConfig{Shards: 2, ChunkElems: 256}, Alter: failing}}
		var recs []Record
		if _, err := runLocal(context.Background(), cfg, localEngines(3), func(r Record) { recs = append(recs, r) }); err != nil {
			t.Fatalf("lag %d: %v", lag, err)
		}
		if len(recs) != 3 {
			t.Fatalf("lag %d: %d records", lag, len(recs))
		}
		for i, r := range recs {
			if r.Tokens != int64((i+1)*2*2*16) { // two members' phases each step
				t.Fatalf("lag %d: record %d: %+v", lag, i, r)
			}
		}
	}
}

// TestAverageWeightedMean pins each averaging against the float64 weighted
// mean of the members' vectors, within int8 quantization error (fp32: within
// rounding), leaving the vectors intact.
func TestAverageWeightedMean(t *testing.T) {
	const k, n = 3, 4096
	srcs := make([][]float32, k)
	for i := range srcs {
		srcs[i] = testVec(uint64(50+i), n, 0.02)
	}
	orig := make([][]float32, k)
	for i := range srcs {
		orig[i] = slices.Clone(srcs[i])
	}
	weights := []float32{1, 2, 5}
	sc := collective.ScatterConfig{Shards: 2, Robust: collective.RobustConfig{MaxWeight: 5}}
	for _, c := range []struct {
		name  string
		a     Averaging
		limit float64
	}{
		{"mean", Averaging{}, 1e-6},
		{"ring fp32", Averaging{Ring: &collective.AllReduceConfig{Shards: 2, Codec: collective.CodecFP32}}, 1e-6},
		{"ring int8", Averaging{Ring: &collective.AllReduceConfig{Shards: 2}}, 0.02},
		{"ring int8 ef", Averaging{Ring: &collective.AllReduceConfig{Shards: 2, ErrorFeedback: true}}, 0.02},
		{"scatter", Averaging{Scatter: &sc}, 0.02},
	} {
		out := make([]float32, n)
		if err := Average(context.Background(), c.a, srcs, weights, out); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var num, den float64
		for j := range n {
			var want float64
			for i := range k {
				want += float64(weights[i]) * float64(orig[i][j])
			}
			want /= 8
			d := float64(out[j]) - want
			num += d * d
			den += want * want
		}
		if rel := math.Sqrt(num / den); rel > c.limit {
			t.Errorf("%s: relative error %.2g", c.name, rel)
		}
		for i := range srcs {
			if !slices.Equal(srcs[i], orig[i]) {
				t.Fatalf("%s: member %d's vector changed", c.name, i)
			}
		}
	}
}

// countingJudge convicts member 1 at the first reduction it judges and
// records the weights it is shown.
type countingJudge struct {
	weights [][]float32
}

func (j *countingJudge) Judge(step uint64, members []int, w []float32, results []collective.ScatterResult) []int {
	j.weights = append(j.weights, slices.Clone(w))
	if len(results) != len(members) {
		panic("results and members differ in length")
	}
	return []int{1}
}

// TestLocalJudgeExcludes: the judge sees every reduction of a scatter run,
// and a member it convicts takes part with weight 0 from the next on.
func TestLocalJudgeExcludes(t *testing.T) {
	j := &countingJudge{}
	sc := collective.ScatterConfig{Shards: 1}
	cfg := LocalConfig{Workers: []uint64{1, 2, 3}, Inner: 2, Outer: 3, OuterLR: 1, Averaging: Averaging{Scatter: &sc, Judge: j}}
	if _, err := runLocal(context.Background(), cfg, localEngines(3), nil); err != nil {
		t.Fatal(err)
	}
	want := [][]float32{{2, 2, 2}, {2, 0, 2}, {2, 0, 2}}
	if len(j.weights) != 3 || !slices.Equal(j.weights[0], want[0]) || !slices.Equal(j.weights[1], want[1]) || !slices.Equal(j.weights[2], want[2]) {
		t.Fatalf("weights judged %v, want %v", j.weights, want)
	}
}

// TestCloseInner: the simulated clock of an in-process run. Speeds 1, 1,
// 1, 1/3 and 1/10 at H = 10 under the close rule with ½: the step closes
// when two members are done (time 10) and the slow one finishes the inner
// step in flight; without the rule every phase is whole.
func TestCloseInner(t *testing.T) {
	for _, c := range []struct {
		cost     []int
		fraction float64
		inner    []int
		took     int64
	}{
		{[]int{1, 1, 1, 3}, 0.5, []int{10, 10, 10, 4}, 12},
		{[]int{1, 1, 1, 10}, 0.5, []int{10, 10, 10, 1}, 10},
		{[]int{1, 1, 1, 3}, 0, []int{10, 10, 10, 10}, 30},
		{[]int{3, 1, 1, 1}, 1, []int{10, 10, 10, 10}, 30},
		{[]int{2, 5}, 0.5, []int{10, 4}, 20},
		{nil, 0.5, []int{10, 10, 10, 10}, 10},
		{[]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 10}, 0.3, []int{10, 10, 10, 10, 10, 10, 10, 10, 10, 1}, 10},
	} {
		k := len(c.cost)
		if k == 0 {
			k = 4
		}
		inner, took := closeInner(LocalConfig{Workers: make([]uint64, k), Inner: 10, StepCost: c.cost, CloseFraction: c.fraction})
		if !slices.Equal(inner, c.inner) || took != c.took {
			t.Errorf("costs %v, fraction %v: inner steps %v in %d, want %v in %d", c.cost, c.fraction, inner, took, c.inner, c.took)
		}
	}
}

// TestLocalMixedSpeeds: an in-process run with a 3× slower member under
// the close rule: every ring weighs it by the 4 inner steps it finished,
// the clock advances 12 a step, and the run is deterministic.
func TestLocalMixedSpeeds(t *testing.T) {
	cfg := LocalConfig{Workers: []uint64{1, 2, 3, 4}, Inner: 10, Outer: 3, OuterLR: 0.7,
		StepCost: []int{1, 1, 1, 3}, CloseFraction: 0.5}
	run := func() ([]float32, []Record) {
		var recs []Record
		got, err := runLocal(context.Background(), cfg, localEngines(4), func(r Record) { recs = append(recs, r) })
		if err != nil {
			t.Fatal(err)
		}
		return got, recs
	}
	a, recs := run()
	for i, r := range recs {
		if r.Members != 4 || r.Clock != int64(12*(i+1)) || r.Tokens != int64((i+1)*34*16) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if b, _ := run(); !slices.Equal(a, b) {
		t.Fatal("two runs of the same configuration differ")
	}
	cfg.StepCost = []int{1, 1}
	if _, err := RunLocal(context.Background(), cfg, nil, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("step costs of 2 members in a run of 4: %v", err)
	}
}

// Nesterov momentum kept by each member on its own pseudo-gradients, with
// the plain mean, is the global outer step's: the mean of the members'
// Δ + μ·v is Δ̄ + μ·v̄, and v̄ follows v̄ ← μ·v̄ + Δ̄. Up to rounding, the
// global models are the same.
func TestLocalWorkerMomentumIsNesterov(t *testing.T) {
	o := trainOptions(t)
	global := LocalConfig{Options: o, Workers: []uint64{3, 5, 9}, Inner: 3, Outer: 4, OuterLR: 0.7, OuterMomentum: 0.6}
	worker := global
	worker.OuterMomentum, worker.WorkerMomentum = 0, 0.6
	plain := global
	plain.OuterMomentum = 0
	var models [3][]float32
	for i, cfg := range []LocalConfig{global, worker, plain} {
		p, err := RunLocal(context.Background(), cfg, train.DefaultSource(), nil)
		if err != nil {
			t.Fatal(err)
		}
		models[i] = p
	}
	moved := maxDiff(models[0], models[2])
	if d := maxDiff(models[0], models[1]); d > moved/1000 {
		t.Errorf("worker momentum ends %g from global Nesterov (momentum itself moves the model by %g)", d, moved)
	}
}
