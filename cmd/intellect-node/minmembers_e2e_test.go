package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/node"
)

// TestMinMembersKeptByJoiners is the README's "Three nodes by hand" with
// the third node late: the creator holds the run to 3 members, a joiner
// given only --bootstrap comes up, the third does not (yet). The run's
// minimum is in its manifest, so both wait and say so on /v1/status
// (waiting for 3, have 2); once the third joins, the first ring has all
// three. Before, the joiner knew no minimum, voted at once, the creator
// followed its vote, and step 1 was trained by a ring of 2.
func TestMinMembersKeptByJoiners(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process e2e test")
	}
	const steps = 2
	local := append([]string{"--max-outer-steps", fmt.Sprint(steps)}, simArgs...)
	a := startNode(t, "a", "", append([]string{"--run", "demo", "--preset", "tiny", "--inner-steps", "5", "--min-members", "3"}, local...)...)
	boot := bootstrapAddr(t, a)
	b := startNode(t, "b", "", append([]string{"--bootstrap", boot}, local...)...)
	for _, p := range []*proc{a, b} {
		waitFor(t, 2*time.Minute, p.name+" waiting for 3 members, with 2", func() bool {
			s, err := p.status()
			if err == nil && s.OuterStep > 0 {
				t.Fatalf("%s trained outer step 1 with %d members before the third came: %v", p.name, len(s.Members), s.Members)
			}
			return err == nil && s.Waiting != nil && *s.Waiting == node.Waiting{Members: 3, Have: 2}
		}, a, b)
	}
	c := startNode(t, "c", "", append([]string{"--bootstrap", boot}, local...)...)
	ps := []*proc{a, b, c}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s did not finish %d outer steps in time", p.name, steps)
		}
		if p.err != nil {
			t.Fatalf("%s exited with %v", p.name, p.err)
		}
	}
	first := byStep(readHistoryFile(t, a))[1]
	for _, p := range ps {
		r := byStep(readHistoryFile(t, p))[1]
		if r.Members != 3 || r.ModelHash != first.ModelHash {
			t.Errorf("%s: step 1 by %d members, hash %s; want 3 and a's %s", p.name, r.Members, r.ModelHash, first.ModelHash)
		}
	}
}
