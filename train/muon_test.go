package train

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// singularValues returns the singular values of the rows × cols matrix x,
// ascending: square roots of the eigenvalues of the smaller Gram matrix,
// found by cyclic Jacobi rotations in float64.
func singularValues(x []float32, rows, cols int) []float64 {
	r, c := rows, cols
	at := func(i, k int) float64 { return float64(x[i*cols+k]) }
	if rows > cols {
		r, c = cols, rows
		at = func(i, k int) float64 { return float64(x[k*cols+i]) }
	}
	a := make([]float64, r*r)
	for i := 0; i < r; i++ {
		for j := 0; j < r; j++ {
			var s float64
			for k := 0; k < c; k++ {
				s += at(i, k) * at(j, k)
			}
			a[i*r+j] = s
		}
	}
	for sweep := 0; sweep < 50; sweep++ {
		var off float64
		for p := 0; p < r; p++ {
			for q := p + 1; q < r; q++ {
				off += a[p*r+q] * a[p*r+q]
			}
		}
		if off < 1e-22 {
			break
		}
		for p := 0; p < r; p++ {
			for q := p + 1; q < r; q++ {
				apq := a[p*r+q]
				if math.Abs(apq) < 1e-300 {
					continue
				}
				theta := (a[q*r+q] - a[p*r+p]) / (2 * apq)
				t := math.Copysign(1, theta) / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				cs := 1 / math.Sqrt(t*t+1)
				sn := t * cs
				for k := 0; k < r; k++ { // columns p, q
					akp, akq := a[k*r+p], a[k*r+q]
					a[k*r+p], a[k*r+q] = cs*akp-sn*akq, sn*akp+cs*akq
				}
				for k := 0; k < r; k++ { // rows p, q
					apk, aqk := a[p*r+k], a[q*r+k]
					a[p*r+k], a[q*r+k] = cs*apk-sn*aqk, sn*apk+cs*aqk
				}
			}
		}
	}
	sv := make([]float64, r)
	for i := range sv {
		sv[i] = math.Sqrt(max(a[i*r+i], 0))
	}
	sort.Float64s(sv)
	return sv
}

// TestNewtonSchulzNearOrthogonal: for random matrices of the tiny model's
// hidden shapes, Newton–Schulz leaves singular values in ≈ [0.7, 1.2]
// (measured 0.68 … 1.19: Muon's quintic oscillates around 1 instead of
// converging, by design). A square Gaussian matrix has singular values near
// 0 (its smallest ≈ 1/n of the typical ones) that five iterations lift only
// part of the way: there the smallest 5 % may lie below the band.
func TestNewtonSchulzNearOrthogonal(t *testing.T) {
	c, _ := Preset("tiny")
	var shapes [][2]int
	for _, ti := range c.Layout()[:10] {
		if ti.IsHidden() {
			shapes = append(shapes, [2]int{ti.Shape[0], ti.Shape[1]})
		}
	}
	if len(shapes) != 7 {
		t.Fatalf("hidden shapes of one layer: %v", shapes)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		u := make([]float32, n)
		for i := range u {
			u[i] = float32(r.NormFloat64()) * 0.01
		}
		dst := make([]float32, n)
		s := newNSScratch(n, min(rows, cols))
		newtonSchulz(dst, u, rows, cols, &s)
		sv := singularValues(dst, rows, cols)
		lo := 0.65
		k := 0 // the singular values allowed below lo
		if rows == cols {
			k = len(sv) / 20
			if sv[0] < 0.01 {
				t.Errorf("%d×%d: smallest singular value %.3f", rows, cols, sv[0])
			}
		}
		t.Logf("%d×%d: singular values %.3f … %.3f (the %d-th smallest %.3f)", rows, cols, sv[0], sv[len(sv)-1], k+1, sv[k])
		if sv[k] < lo || sv[len(sv)-1] > 1.2 {
			t.Errorf("%d×%d: singular values %.3f (the %d-th smallest) … %.3f, want in [%.2f, 1.2]", rows, cols, sv[k], k+1, sv[len(sv)-1], lo)
		}
	}
}

// TestMuonLearns: a Muon run on the embedded corpus halves its held-out
// loss, as AdamW's does (TestHeldOutLossHalves), and the same seed gives
// the same bits.
func TestMuonLearns(t *testing.T) {
	o := testOptions(t)
	o.Optimizer = OptimizerMuon
	o.GradAccum, o.TotalSteps, o.WarmupSteps = 1, 120, 10
	a, err := NewTrainer(o, DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewTrainer(o, DefaultSource())
	first, err := a.Eval()
	if err != nil {
		t.Fatal(err)
	}
	la, lb := run(t, a, o.TotalSteps), run(t, b, o.TotalSteps)
	last, err := a.Eval()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("muon: held-out loss %.3f → %.3f after %d steps", first, last, o.TotalSteps)
	if last > first/2 {
		t.Fatalf("held-out loss %.3f → %.3f: not halved", first, last)
	}
	for i := range la {
		if math.Float64bits(la[i]) != math.Float64bits(lb[i]) {
			t.Fatalf("step %d: loss %v and %v with the same seed", i+1, la[i], lb[i])
		}
	}
	if Hash(a.Params()) != Hash(b.Params()) {
		t.Fatal("same seed, different parameters")
	}
	// Muon is not AdamW: the same seed with AdamW ends elsewhere.
	o.Optimizer = ""
	c, _ := NewTrainer(o, DefaultSource())
	run(t, c, 2)
	o.Optimizer = OptimizerMuon
	d, _ := NewTrainer(o, DefaultSource())
	run(t, d, 2)
	if Hash(c.Params()) == Hash(d.Params()) {
		t.Fatal("muon and adamw took the same steps")
	}
}

// TestMuonResumeBitIdentical: Muon's momentum buffer is saved and loaded
// with the checkpoint (in exp_avg), so a resumed run equals an
// uninterrupted one bit for bit.
func TestMuonResumeBitIdentical(t *testing.T) {
	o := testOptions(t)
	o.Optimizer = OptimizerMuon
	if _, c := resumeRoundTrip(t, o); c.Options().Optimizer != OptimizerMuon {
		t.Fatalf("resumed with optimizer %q", c.Options().Optimizer)
	}
}

func TestOptimizerOption(t *testing.T) {
	o := testOptions(t)
	for _, ok := range []string{"", OptimizerAdamW, OptimizerMuon} {
		o.Optimizer = ok
		if err := o.Validate(); err != nil {
			t.Errorf("optimizer %q: %v", ok, err)
		}
	}
	o.Optimizer = "sgd"
	if err := o.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("optimizer sgd: %v", err)
	}
	// "adamw" spelled out is the default's bits
	o.Optimizer = ""
	a, _ := NewTrainer(o, DefaultSource())
	o.Optimizer = OptimizerAdamW
	b, _ := NewTrainer(o, DefaultSource())
	run(t, a, 2)
	run(t, b, 2)
	if Hash(a.Params()) != Hash(b.Params()) {
		t.Fatal(`optimizer "adamw" differs from ""`)
	}
}
