package train

import (
	"context"
	"math"
	"testing"
)

// A DiLoCo of one worker with outer lr 1, no momentum and the plain mean is
// plain training: θ₀ − (θ₀ − θ) = θ up to one float32 rounding per outer step.
func TestDiLoCoOfOneIsTraining(t *testing.T) {
	o := testOptions(t)
	o.GradAccum = 1
	const inner, outer = 5, 4
	o.Worker = 11
	tr, err := NewTrainer(o, DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	var want []float64
	for s := 1; s <= inner*outer; s++ {
		if _, err := tr.Step(); err != nil {
			t.Fatal(err)
		}
		if s%inner == 0 {
			ev, err := tr.Eval()
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, ev)
		}
	}
	cfg := DiLoCoConfig{Options: o, Workers: []uint64{11}, Inner: inner, Outer: outer, OuterLR: 1}
	var got []float64
	if _, err := RunDiLoCo(context.Background(), cfg, DefaultSource(), func(r DiLoCoRecord) {
		got = append(got, r.EvalLoss)
		if want := int64(r.Step * inner * o.Batch * o.Seq); r.Tokens != want {
			t.Errorf("step %d: %d tokens, want %d", r.Step, r.Tokens, want)
		}
	}); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-4*want[i] {
			t.Errorf("outer step %d: eval %.6f, plain training %.6f", i+1, got[i], want[i])
		}
	}
}

// The outer step moves the global model by the weighted mean of the
// workers' pseudo-gradients: with lr 1 and no momentum, after one outer step
// θ = θ₀ − mean(θ₀ − θᵢ) = mean(θᵢ).
func TestDiLoCoAveragesWorkers(t *testing.T) {
	o := testOptions(t)
	o.GradAccum = 1
	workers := []uint64{3, 5, 9}
	var ends [][]float32
	for _, w := range workers {
		o.Worker = w
		tr, err := NewTrainer(o, DefaultSource())
		if err != nil {
			t.Fatal(err)
		}
		run(t, tr, 3)
		ends = append(ends, append([]float32(nil), tr.Params()...))
	}
	cfg := DiLoCoConfig{Options: o, Workers: workers, Inner: 3, Outer: 1, OuterLR: 1}
	got, err := RunDiLoCo(context.Background(), cfg, DefaultSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for j := range got {
		mean := (float64(ends[0][j]) + float64(ends[1][j]) + float64(ends[2][j])) / 3
		worst = max(worst, math.Abs(float64(got[j])-mean))
	}
	if worst > 1e-6 {
		t.Errorf("global model differs from the mean of the workers' models by up to %g", worst)
	}
	same := 0
	for j := range ends[0] {
		if ends[0][j] == ends[1][j] {
			same++
		}
	}
	if same > len(ends[0])/2 {
		t.Errorf("workers 3 and 5 ended with %d of %d parameters equal: the same data?", same, len(ends[0]))
	}
}

func TestMeanReducerWeights(t *testing.T) {
	out := make([]float32, 2)
	if err := MeanReducer(context.Background(), [][]float32{{1, 2}, {4, 8}}, []float32{1, 3}, out); err != nil {
		t.Fatal(err)
	}
	if want := []float32{3.25, 6.5}; out[0] != want[0] || out[1] != want[1] {
		t.Errorf("got %v, want %v", out, want)
	}
}

func TestRunDiLoCoRejectsBadConfig(t *testing.T) {
	o := testOptions(t)
	for _, c := range []DiLoCoConfig{
		{Options: o, Inner: 1, Outer: 1, OuterLR: 1},
		{Options: o, Workers: []uint64{1}, Inner: 0, Outer: 1, OuterLR: 1},
		{Options: o, Workers: []uint64{1}, Inner: 1, Outer: 1, OuterLR: 0},
		{Options: o, Workers: []uint64{1}, Inner: 1, Outer: 1, OuterLR: 1, OuterMomentum: 1},
	} {
		if _, err := RunDiLoCo(context.Background(), c, DefaultSource(), nil); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// With one worker and plain averaging, the overlapped schedule trains
// continuously: its rebase moves the worker by θ₀ − E = 0 up to rounding,
// and global model t is the model after t phases — the blocking run's.
func TestDiLoCoOverlapOneWorker(t *testing.T) {
	o := testOptions(t)
	o.GradAccum = 1
	var blocking, lagged []float64
	for lag, out := range []*[]float64{&blocking, &lagged} {
		cfg := DiLoCoConfig{Options: o, Workers: []uint64{4}, Inner: 4, Outer: 4, OuterLR: 1, OverlapSteps: 2 * lag}
		if _, err := RunDiLoCo(context.Background(), cfg, DefaultSource(), func(r DiLoCoRecord) {
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

// With one worker the predicted start is the worker's own end (its share of
// the average is all of it), so it trains as blocking does; the other
// starts are accepted, and an unknown one is refused.
func TestDiLoCoOverlapStart(t *testing.T) {
	o := testOptions(t)
	o.GradAccum = 1
	run := func(start OverlapStart, overlap int) ([]float64, error) {
		var out []float64
		cfg := DiLoCoConfig{Options: o, Workers: []uint64{4}, Inner: 4, Outer: 4, OuterLR: 1, OverlapSteps: overlap, OverlapStart: start}
		_, err := RunDiLoCo(context.Background(), cfg, DefaultSource(), func(r DiLoCoRecord) { out = append(out, r.EvalLoss) })
		return out, err
	}
	blocking, err := run(OverlapFromEnd, 0)
	if err != nil {
		t.Fatal(err)
	}
	predicted, err := run(OverlapFromPredicted, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range blocking {
		if math.Abs(predicted[i]-blocking[i]) > 1e-4*blocking[i] {
			t.Errorf("step %d: predicted start eval %.6f, blocking %.6f", i+1, predicted[i], blocking[i])
		}
	}
	for _, s := range []OverlapStart{OverlapFromPrev, OverlapFromExtrapolated, OverlapFromMidpoint, OverlapFromBeyond} {
		if got, err := run(s, 2); err != nil || len(got) != 4 {
			t.Errorf("start %d: %d records, %v", s, len(got), err)
		}
	}
	if _, err := run(OverlapFromBeyond+1, 1); err == nil {
		t.Error("unknown overlap start: no error")
	}
}
