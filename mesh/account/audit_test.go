package account

import "testing"

// TestProbation: owners present at this member's first ring are settled;
// one first seen later is on probation for ProbationSteps steps.
func TestProbation(t *testing.T) {
	var p probation
	if p.on("a", 5) || p.on("b", 5) {
		t.Fatal("members of the first ring on probation")
	}
	if !p.on("c", 7) || !p.on("c", 7+ProbationSteps-1) {
		t.Fatal("a newcomer not on probation")
	}
	if p.on("c", 7+ProbationSteps) || p.on("a", 8) {
		t.Fatal("probation does not end")
	}
}
