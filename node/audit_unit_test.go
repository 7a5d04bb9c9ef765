package node

import "testing"

// TestProbation: owners present at this node's first ring are settled; one
// first seen later is on probation for probationSteps steps.
func TestProbation(t *testing.T) {
	var n Node
	if n.onProbation("a", 5) || n.onProbation("b", 5) {
		t.Fatal("members of the first ring on probation")
	}
	if !n.onProbation("c", 7) || !n.onProbation("c", 7+probationSteps-1) {
		t.Fatal("a newcomer not on probation")
	}
	if n.onProbation("c", 7+probationSteps) || n.onProbation("a", 8) {
		t.Fatal("probation does not end")
	}
}
