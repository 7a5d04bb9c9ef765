package main

import (
	"context"
	"math"
	"testing"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/train"
)

func TestParseAttackRuns(t *testing.T) {
	rs, err := parseRuns("diloco:m=8,codec=robust,atk=signflip4,f=3", 20)
	if err != nil || len(rs) != 1 || rs[0].Attack != "signflip4" || rs[0].F != 3 || rs[0].Codec != "robust" {
		t.Fatalf("%+v %v", rs, err)
	}
	if _, err := parseRuns("diloco:m=4,atk=nosuch", 20); err == nil {
		t.Fatal("an unknown attack was accepted")
	}
	if _, err := attacked(train.MeanReducer, "nosuch", 1, 1); err == nil {
		t.Fatal("attacked took an unknown attack")
	}
}

// TestAttackedMeanAndRobust: a sign flip ×1000 by the last of 4 wrecks the
// plain mean and not the robust scatter; f out of range is an error.
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
	for _, c := range []struct {
		name   string
		reduce train.Reducer
		bad    bool
	}{
		{"mean", train.MeanReducer, true},
		{"robust", node.ScatterReducer(collective.ScatterConfig{Shards: 1, Robust: collective.RobustConfig{MaxWeight: 20}}), false},
	} {
		red, err := attacked(c.reduce, "signflip1000", 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, 4096)
		if err := red(context.Background(), deltas, w, out); err != nil {
			t.Fatal(err)
		}
		if e := errOf(out); (e > 10) != c.bad {
			t.Fatalf("%s: max error %.3g against the honest values", c.name, e)
		}
		if err := red(context.Background(), deltas[:1], w[:1], out); err == nil {
			t.Fatalf("%s: an attack with every worker attacking was accepted", c.name)
		}
	}
}
