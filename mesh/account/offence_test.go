package account

import (
	"math"
	"slices"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

func TestNoteRunCountsConsecutiveSteps(t *testing.T) {
	m := map[mesh.PeerID][]uint64{}
	for _, c := range []struct {
		step    uint64
		flagged bool
		want    []uint64
	}{
		{1, true, []uint64{1}}, {2, true, []uint64{1, 2}}, {3, false, nil},
		{4, true, []uint64{4}}, {6, true, []uint64{6}}, // a gap restarts the run
		{7, true, []uint64{6, 7}}, {8, true, []uint64{6, 7, 8}},
	} {
		if got := noteRun(m, "a", c.step, c.flagged); !slices.Equal(got, c.want) {
			t.Fatalf("step %d flagged %v: run %v, want %v", c.step, c.flagged, got, c.want)
		}
	}
	if got := noteRun(m, "b", 8, false); got != nil || len(m) != 1 {
		t.Fatalf("an unflagged member has run %v (%d kept)", got, len(m))
	}
}

func TestNoteWindowKeepsTheLastSteps(t *testing.T) {
	m := map[mesh.PeerID][]uint64{}
	for _, c := range []struct {
		step     uint64
		offended bool
		want     []uint64
	}{
		{1, true, []uint64{1}}, {2, false, []uint64{1}}, {3, true, []uint64{1, 3}},
		{8, false, []uint64{1, 3}}, {9, true, []uint64{3, 9}}, // step 1 left the window of 8
		{11, false, []uint64{9}}, {20, false, nil},
		{21, true, []uint64{21}}, {21, true, []uint64{21}}, // a step noted twice counts once
	} {
		if got := noteWindow(m, "a", c.step, c.offended); !slices.Equal(got, c.want) {
			t.Fatalf("step %d offended %v: window %v, want %v", c.step, c.offended, got, c.want)
		}
	}
}

func TestSumVerdicts(t *testing.T) {
	owned := []collective.SegmentReport{
		{Verdicts: [][]collective.Verdict{{{Norm: 1, Dot: 0.5}, {Norm: 2, Dot: -1, Flag: collective.FlagHard}, {Norm: float32(math.Inf(1)), Flag: collective.FlagRejected}}},
			MedianNorms: []float32{1}},
		{Verdicts: [][]collective.Verdict{{{Norm: 3, Dot: 2}, {Norm: 2, Dot: -1, Flag: collective.FlagHard}, {Norm: 1, Dot: 1}, {Flag: collective.FlagHard}}}, // a 4th entry: ignored
			MedianNorms: []float32{2}},
	}
	got := sumVerdicts(3, owned)
	want := []Sums{
		{NormSq: 10, Dot: 2.5, MedianNormSq: 5},
		{Hard: 2, NormSq: 8, Dot: -2, MedianNormSq: 5},
		{Rejected: 1, NormSq: 1, Dot: 1, MedianNormSq: 4},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("sums %+v, want %+v", got, want)
	}
	if c := got[0].Cos(); math.Abs(c-2.5/math.Sqrt(50)) > 1e-15 || !got[1].Opposed() || got[2].Opposed() || got[0].Opposed() {
		t.Fatalf("cos %v, opposed %v %v %v", c, got[0].Opposed(), got[1].Opposed(), got[2].Opposed())
	}
	if got[0].Flagged() || !got[1].Flagged() || !got[2].Flagged() {
		t.Fatalf("flagged %v %v %v", got[0].Flagged(), got[1].Flagged(), got[2].Flagged())
	}
	// Rounding below 0, a zero median, a zero contribution: not opposed.
	for _, s := range []Sums{{NormSq: 1, Dot: -1e-12, MedianNormSq: 1}, {NormSq: 1, Dot: -1e-20}, {Dot: -1e-20, MedianNormSq: 1}} {
		if s.Opposed() {
			t.Fatalf("%+v opposed (cos %v)", s, s.Cos())
		}
	}
}

// TestOffences: the rule convicts a weight over H at once, contributions
// flagged 3 steps in a row, and one opposing the others in 3 of the last
// 8 steps, even when it alternates; never an honest member, nor anyone
// but the heavy one while the owner owns nothing.
func TestOffences(t *testing.T) {
	members := []mesh.PeerID{"self", "honest", "flagged", "opposer", "alternating", "heavy"}
	weights := []float32{5, 5, 5, 5, 5, 6}
	seg := func(step uint64) []collective.SegmentReport {
		v := make([]collective.Verdict, len(members))
		for i := range v {
			v[i] = collective.Verdict{Norm: 1, Dot: 0.6}
		}
		v[2].Flag = collective.FlagHard
		v[3].Dot = -0.2
		if step%2 == 0 {
			v[4].Dot = -0.9
		}
		return []collective.SegmentReport{{Segment: 0, Verdicts: [][]collective.Verdict{v}, MedianNorms: []float32{1}}}
	}
	robust := collective.RobustConfig{MaxWeight: 5}
	if err := robust.Validate(); err != nil {
		t.Fatal(err)
	}
	var o Offences
	convicted := map[string]uint64{}
	reasons := map[string]Reason{}
	for step := uint64(1); step <= 8; step++ {
		owned := seg(step)
		if step == 4 {
			owned = nil // a client this step: judges nobody but the weight
		}
		_, convs := o.Note(Verdicts{Step: step, Members: members, Self: 0, Weights: weights, Owned: owned, Robust: robust})
		for _, c := range convs {
			name := string(members[c.Rank])
			if _, ok := convicted[name]; !ok {
				convicted[name], reasons[name] = step, c.Reason
				t.Logf("step %d: %s %s", step, name, c.Evidence)
			}
		}
	}
	want := map[string]uint64{"heavy": 1, "flagged": 3, "opposer": 3, "alternating": 8} // step 4 unseen
	wantReason := map[string]Reason{"heavy": ReasonWeight, "flagged": ReasonFlagged, "opposer": ReasonOpposed, "alternating": ReasonOpposed}
	if len(convicted) != len(want) {
		t.Fatalf("convicted %v, want %v", convicted, want)
	}
	for name, step := range want {
		if convicted[name] != step || reasons[name] != wantReason[name] {
			t.Fatalf("convicted %v for %v, want %v for %v", convicted, reasons, want, wantReason)
		}
	}
}
