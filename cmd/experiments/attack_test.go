package main

import (
	"context"
	"math"
	"testing"

	"github.com/intellect-node/intellect-node/mesh/account"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node/diloco"
)

func TestParseAttackRuns(t *testing.T) {
	rs, err := parseRuns("diloco:m=8,codec=robust,atk=signflip4,f=3", 20)
	if err != nil || len(rs) != 1 || rs[0].Attack != "signflip4" || rs[0].F != 3 || rs[0].Codec != "robust" {
		t.Fatalf("%+v %v", rs, err)
	}
	if _, err := parseRuns("diloco:m=4,atk=nosuch", 20); err == nil {
		t.Fatal("an unknown attack was accepted")
	}
	if _, err := attacked("nosuch", 4, 1, 1); err == nil {
		t.Fatal("attacked took an unknown attack")
	}
	for _, f := range []int{0, 4} {
		if _, err := attacked("signflip", 4, f, 1); err == nil {
			t.Fatalf("an attack by %d of 4 workers was accepted", f)
		}
	}
}

// TestAttackedMeanAndRobust: a sign flip ×1000 by the last of 4 wrecks the
// plain mean and not the robust scatter.
func TestAttackedMeanAndRobust(t *testing.T) {
	deltas := make([][]float32, 4)
	for i := range deltas {
		deltas[i] = make([]float32, 4096)
		for j := range deltas[i] {
			deltas[i][j] = 1 + 0.1*float32((i*7+j)%5)
		}
	}
	w := []float32{20, 20, 20, 20}
	errOf := func(out []float32) float64 {
		var d float64
		for j := range out {
			d = math.Max(d, math.Abs(float64(out[j])-1.2))
		}
		return d
	}
	sc := collective.ScatterConfig{Shards: 1, Robust: collective.RobustConfig{MaxWeight: 20}}
	judge, err := account.NewJudge(sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		avg  diloco.Averaging
		bad  bool
	}{
		{"mean", diloco.Averaging{}, true},
		{"robust", diloco.Averaging{Scatter: &sc, Judge: judge}, false},
	} {
		var err error
		if c.avg.Alter, err = attacked("signflip1000", 4, 1, 1); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, 4096)
		if err := diloco.Average(context.Background(), c.avg, deltas, w, out); err != nil {
			t.Fatal(err)
		}
		if e := errOf(out); (e > 10) != c.bad {
			t.Fatalf("%s: max error %.3g against the honest values", c.name, e)
		}
	}
}

// TestAttackedTargetsMembers: the attackers are the last f members of the
// run, whatever their rank in a ring that lacks some member; the others
// send their own vectors, and "weight" claims 2²⁴ inner steps.
func TestAttackedTargetsMembers(t *testing.T) {
	alter, err := attacked("weight", 4, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	srcs := [][]float32{{1, 2}, {3, 4}, {5, 6}}
	sent, w := alter([]int{0, 2, 3}, srcs, []float32{4, 4, 4})
	if &sent[0][0] != &srcs[0][0] || &sent[1][0] != &srcs[1][0] || sent[2][0] != -5 || sent[2][1] != -6 {
		t.Fatalf("sent %v", sent)
	}
	if w[0] != 4 || w[1] != 4 || w[2] != 1<<24 {
		t.Fatalf("weights %v", w)
	}
}
