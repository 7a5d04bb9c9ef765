package emu

import (
	"math"
	"testing"
)

// TestLossRate: the drop frequency matches p within 4 standard deviations.
func TestLossRate(t *testing.T) {
	const n = 200_000
	for _, p := range []float64{0.001, 0.01, 0.3} {
		l := NewLoss(p, 42, 7)
		drops := 0
		for range n {
			if l.Drop() {
				drops++
			}
		}
		sd := math.Sqrt(n * p * (1 - p))
		if math.Abs(float64(drops)-n*p) > 4*sd {
			t.Errorf("p=%g: %d drops of %d, want %.0f ± %.0f", p, drops, n, n*p, 4*sd)
		}
	}
}

// TestLossSeeded: the same seed and stream repeat the same drops; another
// stream gives another sequence; 0 and 1 are exact.
func TestLossSeeded(t *testing.T) {
	a, b, c := NewLoss(0.5, 1, 1), NewLoss(0.5, 1, 1), NewLoss(0.5, 1, 2)
	same, diff := true, false
	for range 256 {
		x, y, z := a.Drop(), b.Drop(), c.Drop()
		same = same && x == y
		diff = diff || x != z
	}
	if !same || !diff {
		t.Errorf("same seed repeats: %v (want true); other stream differs: %v (want true)", same, diff)
	}
	never, always := NewLoss(0, 1, 1), NewLoss(1, 1, 1)
	var zero Loss
	for range 1000 {
		if never.Drop() || zero.Drop() || !always.Drop() {
			t.Fatal("loss 0 dropped or loss 1 passed a packet")
		}
	}
}
