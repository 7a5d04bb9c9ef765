package train

import "testing"

// TestHeldOutLossHalves is the demo's criterion at test scale: on the default
// corpus the held-out loss falls to at most half its first value.
func TestHeldOutLossHalves(t *testing.T) {
	o := testOptions(t)
	o.GradAccum, o.TotalSteps, o.WarmupSteps = 1, 120, 10
	tr, err := NewTrainer(o, DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	first, err := tr.Eval()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < o.TotalSteps; i++ {
		if _, err := tr.Step(); err != nil {
			t.Fatal(err)
		}
	}
	last, _ := tr.Eval()
	t.Logf("held-out loss %.3f → %.3f after %d steps", first, last, o.TotalSteps)
	if last > first/2 {
		t.Fatalf("held-out loss %.3f → %.3f: not halved", first, last)
	}
}
