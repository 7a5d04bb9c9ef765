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
	r0, err := tr.EvalDetail()
	if err != nil {
		t.Fatal(err)
	}
	first := r0.Loss
	for i := 0; i < o.TotalSteps; i++ {
		if _, err := tr.Step(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := tr.EvalDetail()
	if err != nil {
		t.Fatal(err)
	}
	last := r.Loss
	t.Logf("held-out loss %.3f → %.3f after %d steps; token acc %.3f, answer acc %.3f", first, last, o.TotalSteps, r.TokenAcc, r.AnswerAcc)
	if last > first/2 {
		t.Fatalf("held-out loss %.3f → %.3f: not halved", first, last)
	}
	if !(r.TokenAcc > 2*r0.TokenAcc && r.AnswerAcc > 0 && r.AnswerAcc <= 1) {
		t.Fatalf("accuracies before %+v, after %+v", r0, r)
	}
}

func TestAnswerMask(t *testing.T) {
	in := ByteTokenizer{}.Encode("12+3=15\n4+5=9\n7")
	mask := make([]bool, len(in))
	arithmetic{}.AnswerMask(in, mask)
	// targets: "2+3=15\n4+5=9\n7": answer tokens are 1, 5, \n and 9, \n
	want := "00001110000110"
	for i := range want {
		if mask[i] != (want[i] == '1') {
			t.Fatalf("mask = %v, want %s", mask, want)
		}
	}
}
