package account

import (
	"testing"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

// TestJudge: the in-process rule of every owner convicts a member that
// sends −1000× its update at the third reduction, each honest owner once,
// and shows every owner's cosines of the others.
func TestJudge(t *testing.T) {
	n := newTestNet(t, 4, false)
	var views []OwnerView
	j, err := NewJudge(n.cfg, func(v OwnerView) { views = append(views, v) })
	if err != nil {
		t.Fatal(err)
	}
	members := []int{0, 1, 2, 3}
	for step := uint64(1); step <= ExcludeAfter; step++ {
		srcs := n.srcs(3000)
		for k := range srcs[3] {
			srcs[3][k] *= -1000
		}
		rg := n.ring(step - 1)
		convicted := j.Judge(step, members, rg.Weights, n.scatter(rg, srcs))
		if step < ExcludeAfter && len(convicted) != 0 || step == ExcludeAfter && (len(convicted) != 3 || convicted[0] != 3) {
			t.Fatalf("step %d: convicted %v", step, convicted)
		}
	}
	if len(views) != 4*ExcludeAfter-1 {
		t.Fatalf("%d views, want one per owner and step but the attacker's last, convicted by then", len(views))
	}
	for _, v := range views {
		for k, c := range v.Cos {
			if k != v.Owner && k != 3 && v.Owner != 3 && !(c > 0.5) {
				t.Fatalf("step %d: owner %d saw member %d at cosine %v", v.Step, v.Owner, k, c)
			}
		}
		if v.Step == ExcludeAfter && v.Owner != 3 && v.Excluded[3] == "" {
			t.Fatalf("owner %d's view of step %d excludes %v", v.Owner, v.Step, v.Excluded)
		}
	}
	if _, err := NewJudge(collective.ScatterConfig{Robust: collective.RobustConfig{ClipFactor: 0.5}}, nil); err == nil {
		t.Fatal("a judge of a bad rule")
	}
}
