package node

import (
	"slices"
	"testing"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

func TestOffenceLogCountsConsecutiveSteps(t *testing.T) {
	var l offenceLog
	for _, c := range []struct {
		step    uint64
		flagged bool
		want    []uint64
	}{
		{1, true, []uint64{1}}, {2, true, []uint64{1, 2}}, {3, false, nil},
		{4, true, []uint64{4}}, {6, true, []uint64{6}}, // a gap restarts the run
		{7, true, []uint64{6, 7}}, {8, true, []uint64{6, 7, 8}},
	} {
		if got := l.note("a", c.step, c.flagged); !slices.Equal(got, c.want) {
			t.Fatalf("step %d flagged %v: run %v, want %v", c.step, c.flagged, got, c.want)
		}
	}
	if got := l.note("b", 8, false); got != nil {
		t.Fatalf("an unflagged member has run %v", got)
	}
}

func TestVerdictCounts(t *testing.T) {
	res := collective.ScatterResult{Owned: []collective.SegmentReport{
		{Verdicts: [][]collective.Verdict{{{}, {Flag: collective.FlagHard}, {Flag: collective.FlagRejected}}}},
		{Verdicts: [][]collective.Verdict{{{}, {Flag: collective.FlagHard}, {}, {Flag: collective.FlagHard}}}}, // a 4th entry: ignored
	}}
	hard, rejected := verdictCounts(3, res)
	if !slices.Equal(hard, []int{0, 2, 0}) || !slices.Equal(rejected, []int{0, 0, 1}) {
		t.Fatalf("hard %v rejected %v", hard, rejected)
	}
}
