package collective

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The run's H in these tests: honest members report 15..20 inner steps.
const testH = 20

// pseudoGrads draws k honest pseudo-gradients of n values the way DiLoCo's
// look: a shared direction g (AR(1)-correlated along the vector, per
// coordinate scales spread over a factor ≈ 7) that each member sees with
// its own gain (non-iid data: 0.6..1.6) plus its own noise of 0.5..1.5 ×
// the signal's RMS.
func pseudoGrads(rng *rand.Rand, k, n int) (xs [][]float32, g []float64) {
	scale := make([]float64, n)
	g = make([]float64, n)
	z := 0.0
	for t := range g {
		scale[t] = 0.01 * math.Exp(0.5*rng.NormFloat64())
		z = 0.9*z + math.Sqrt(1-0.81)*rng.NormFloat64()
		g[t] = scale[t] * z
	}
	xs = make([][]float32, k)
	for i := range xs {
		gain := 0.6 + float64(i%5)*0.25
		noise := 0.5 + float64(i%3)*0.5
		xs[i] = make([]float32, n)
		for t := range xs[i] {
			xs[i][t] = float32(gain*g[t] + noise*scale[t]*rng.NormFloat64())
		}
	}
	return xs, g
}

// honestWeights are 15..20 inner steps.
func honestWeights(k int) []float32 {
	w := make([]float32, k)
	for i := range w {
		w[i] = float32(testH - i%6)
	}
	return w
}

// attack is a poisoning strategy: it rewrites the contributions and weights
// of the attackers (members 0..f−1) knowing every honest contribution.
type attack struct {
	name string
	// plainFails: the plain weighted mean leaves the bound under this
	// attack (the attacks that only shrink or copy do not move it far).
	plainFails bool
	apply      func(rng *rand.Rand, xs [][]float32, w []float32, f int)
}

func attacks() []attack {
	own := func(fn func(x float32) float32) func(*rand.Rand, [][]float32, []float32, int) {
		return func(_ *rand.Rand, xs [][]float32, _ []float32, f int) {
			for a := range f {
				for t := range xs[a] {
					xs[a][t] = fn(xs[a][t])
				}
			}
		}
	}
	return []attack{
		{"flip×−1", false, own(func(x float32) float32 { return -x })},
		{"flip×−1000", true, own(func(x float32) float32 { return -1000 * x })},
		{"scale×1000", true, own(func(x float32) float32 { return 1000 * x })},
		{"noise×1000", true, noiseAttack},
		{"nan", true, own(func(x float32) float32 { return float32(math.NaN()) })},
		{"inf", true, func(_ *rand.Rand, xs [][]float32, _ []float32, f int) {
			for a := range f {
				xs[a][len(xs[a])/2] = float32(math.Inf(-1))
			}
		}},
		{"alie", false, alieAttack},
		{"ipm", false, ipmAttack},
		{"zero", false, own(func(float32) float32 { return 0 })},
		{"copy", false, func(_ *rand.Rand, xs [][]float32, _ []float32, f int) {
			for a := range f {
				copy(xs[a], xs[len(xs)-1])
			}
		}},
		{"stale", false, func(rng *rand.Rand, xs [][]float32, _ []float32, f int) {
			old, _ := pseudoGrads(rng, f, len(xs[0]))
			copy(xs, old)
		}},
		{"weight2^24", true, func(_ *rand.Rand, xs [][]float32, w []float32, f int) {
			for a := range f {
				w[a] = 1 << 24
				for t := range xs[a] {
					xs[a][t] = -xs[a][t]
				}
			}
		}},
	}
}

func noiseAttack(rng *rand.Rand, xs [][]float32, _ []float32, f int) {
	for a := range f {
		s := 1000 * norm(xs[a]) / math.Sqrt(float64(len(xs[a])))
		for t := range xs[a] {
			xs[a][t] = float32(s * rng.NormFloat64())
		}
	}
}

// honestStats returns the per-coordinate mean and standard deviation of the
// honest members f..k−1.
func honestStats(xs [][]float32, f int) (mean, std []float64) {
	n := len(xs[0])
	mean, std = make([]float64, n), make([]float64, n)
	h := float64(len(xs) - f)
	for t := range n {
		var s, q float64
		for _, x := range xs[f:] {
			s += float64(x[t])
			q += float64(x[t]) * float64(x[t])
		}
		mean[t] = s / h
		std[t] = math.Sqrt(max(q/h-mean[t]*mean[t], 0))
	}
	return mean, std
}

// alieAttack is "a little is enough" (Baruch et al. 2019): every attacker
// sends mean − z·std of the honest values per coordinate, z = 1.
func alieAttack(_ *rand.Rand, xs [][]float32, _ []float32, f int) {
	mean, std := honestStats(xs, f)
	for a := range f {
		for t := range xs[a] {
			xs[a][t] = float32(mean[t] - std[t])
		}
	}
}

// ipmAttack is inner-product manipulation (Xie et al. 2020): −ε × the
// honest mean, ε = 0.5.
func ipmAttack(_ *rand.Rand, xs [][]float32, _ []float32, f int) {
	mean, _ := honestStats(xs, f)
	for a := range f {
		for t := range xs[a] {
			xs[a][t] = float32(-0.5 * mean[t])
		}
	}
}

func cloneVecs(xs [][]float32) [][]float32 {
	out := make([][]float32, len(xs))
	for i, x := range xs {
		out[i] = append([]float32(nil), x...)
	}
	return out
}

// plainMean is the weighted mean in float64, uncapped: today's average.
func plainMean(xs [][]float32, w []float32) []float32 {
	ref := refMean(xs, w)
	out := make([]float32, len(ref))
	for t, v := range ref {
		out[t] = float32(v)
	}
	return out
}

// robustOf runs the rule over the whole vector as one chunk.
func robustOf(t testing.TB, rc RobustConfig, xs [][]float32, w []float32) ([]float32, []Verdict) {
	t.Helper()
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(xs[0]))
	rep := make([]Verdict, len(xs))
	var ws robustWork
	robustMean(&ws, &rc, w, cloneVecs(xs), out, rep)
	return out, rep
}

// relErrOK is relErr with NaN counted as +Inf.
func relErrOK(got []float32, want []float64) float64 {
	e := relErr(got, want)
	if math.IsNaN(e) {
		return math.Inf(1)
	}
	return e
}

// TestRobustNoAttacker: with honest members only the rule stays close to the
// plain weighted mean and flags nobody, though the members' gains and noise
// differ (non-iid).
func TestRobustNoAttacker(t *testing.T) {
	for _, k := range []int{2, 3, 4, 8, 16} {
		rng := rand.New(rand.NewPCG(uint64(k), 1))
		xs, _ := pseudoGrads(rng, k, 1<<14)
		w := honestWeights(k)
		ref := refMean(xs, w)
		for _, rule := range []Rule{RuleCenteredClip, RuleTrimmedMean} {
			got, rep := robustOf(t, RobustConfig{Rule: rule, MaxWeight: testH}, xs, w)
			e := relErr(got, ref)
			t.Logf("k=%d %v: rel err vs plain mean %.2e, verdicts %v", k, rule, e, rep)
			for i, v := range rep {
				if v.Flag != FlagNone {
					t.Errorf("k=%d %v: honest member %d flagged: %+v", k, rule, i, v)
				}
			}
			if rule == RuleCenteredClip && e > 1e-6 {
				t.Errorf("k=%d: CenteredClip rel err %.2e vs the plain mean, want ≤ 1e-6", k, e)
			}
		}
	}
}

// TestRobustConfigValidate rejects out-of-range parameters.
func TestRobustConfigValidate(t *testing.T) {
	bad := []RobustConfig{
		{Rule: 9}, {ClipFactor: 1}, {ClipFactor: math.NaN()}, {Tau: -1}, {Iters: MaxIters + 1},
		{Trim: -1}, {MaxWeight: float32(math.Inf(1))}, {FlagFactor: 0.5},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	var c RobustConfig
	if err := c.Validate(); err != nil || c.Rule != RuleCenteredClip || c.Iters != DefaultIters {
		t.Errorf("defaults: %+v %v", c, err)
	}
}

// attackCase is one poisoned input: k contributions of which the first f
// are the attackers', their weights, and the honest members' weighted mean.
type attackCase struct {
	xs     [][]float32
	w      []float32
	honest []float64
}

func newAttackCase(a attack, k, f, n int, seed uint64) attackCase {
	rng := rand.New(rand.NewPCG(seed, uint64(k*100+f)))
	xs, _ := pseudoGrads(rng, k, n)
	w := honestWeights(k)
	c := attackCase{honest: refMean(xs[f:], w[f:])}
	a.apply(rng, xs, w, f)
	c.xs, c.w = xs, w
	return c
}

// TestRobustAttackTable: the rule alone (no codec) keeps within attackBound
// of the honest mean under every attack. With -v it logs the relative
// error vs the honest mean of both rules and of the plain mean (the
// figures of docs/robust.md).
func TestRobustAttackTable(t *testing.T) {
	for _, k := range []int{4, 8, 16} {
		for f := 1; f <= (k-1)/2; f++ {
			for _, a := range attacks() {
				c := newAttackCase(a, k, f, 1<<13, 7)
				cc, _ := robustOf(t, RobustConfig{MaxWeight: testH}, c.xs, c.w)
				tm, _ := robustOf(t, RobustConfig{Rule: RuleTrimmedMean, MaxWeight: testH}, c.xs, c.w)
				e := relErrOK(cc, c.honest)
				t.Logf("k=%2d f=%d %-11s cc %.3f  tm %.3f  plain %.3g", k, f, a.name,
					e, relErrOK(tm, c.honest), relErrOK(plainMean(c.xs, c.w), c.honest))
				if e > attackBound(k, f) {
					t.Errorf("k=%d f=%d %s: rel err %.3f > %.2f", k, f, a.name, e, attackBound(k, f))
				}
			}
		}
	}
}

// TestCoordMedian checks the sorting-network median against sorting each
// coordinate (its slow twin) for 1..20 contributions with ties, zeros of
// both signs, negative, tiny and huge values.
func TestCoordMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	pool := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 3e38, -3e38, 1e-45, -1e-45, 0.5, -0.25}
	for k := 1; k <= 20; k++ {
		const m = 500
		xs := make([][]float32, k)
		for i := range xs {
			xs[i] = make([]float32, m)
			for t := range xs[i] {
				if rng.IntN(3) == 0 {
					xs[i][t] = pool[rng.IntN(len(pool))]
				} else {
					xs[i][t] = float32(rng.NormFloat64())
				}
			}
		}
		var ws robustWork
		ws.reset(k, m)
		for i := range k {
			ws.active = append(ws.active, i)
		}
		ws.coordMedian(xs)
		col := make([]float64, k)
		for j := range m {
			for i := range k {
				col[i] = float64(xs[i][j])
			}
			slices.Sort(col)
			if want := col[(k-1)/2]; ws.v[j] != want || math.Signbit(ws.v[j]) != math.Signbit(want) && want != 0 {
				t.Fatalf("k=%d coordinate %d: median %v, want %v", k, j, ws.v[j], want)
			}
		}
	}
}
