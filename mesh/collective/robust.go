package collective

import (
	"fmt"
	"math"
	"slices"
	"sync"
)

// Rule is how a segment owner combines the contributions of its segment.
type Rule uint8

// Rules. Values: append only, never renumber.
const (
	// RuleCenteredClip (the default): each contribution's L2 norm clipped to
	// ClipFactor × the median norm, then CenteredClip iterations
	// (Karimireddy et al. 2021, as BTARD uses it) from the coordinate-wise
	// median with radius Tau × the median distance to it. With no outlier
	// every contribution lies inside the radius and the result is the plain
	// weighted mean.
	RuleCenteredClip Rule = 1
	// RuleTrimmedMean: the same norm clipping, then per coordinate the
	// Trim largest and Trim smallest values are dropped and the rest
	// averaged with their weights. Kept to compare with (docs/robust.md).
	RuleTrimmedMean Rule = 2
)

// String names the rule.
func (r Rule) String() string {
	switch r {
	case RuleCenteredClip:
		return "centered-clip"
	case RuleTrimmedMean:
		return "trimmed-mean"
	}
	return fmt.Sprintf("rule(%d)", uint8(r))
}

// Defaults of RobustConfig, chosen from the measurements of docs/robust.md.
const (
	DefaultClipFactor = 2
	DefaultTau        = 2
	DefaultIters      = 1
	DefaultFlagFactor = 4
	// MaxIters bounds RobustConfig.Iters.
	MaxIters = 64
)

// RobustConfig is the robust rule's parameters. Every member of an attempt
// must use the same values (they decide the bits of the result).
type RobustConfig struct {
	// Rule is the combining rule. Default RuleCenteredClip.
	Rule Rule
	// ClipFactor c: a contribution whose L2 norm (over one chunk) exceeds
	// c × the lower median norm is scaled down to that. Default 2; > 1.
	ClipFactor float64
	// Tau is CenteredClip's radius in units of the lower median distance of
	// the contributions to the coordinate-wise median. Default 2; > 0.
	Tau float64
	// Iters is the number of CenteredClip iterations. Default 1; 1..MaxIters.
	Iters int
	// Trim is the number of values dropped at each end per coordinate by
	// RuleTrimmedMean; 0 means ⌊(k−1)/2⌋ capped so that one value remains.
	Trim int
	// MaxWeight caps every weight (the run's H, in inner steps); 0: no cap.
	MaxWeight float32
	// FlagFactor: a contribution whose norm clip scales it by less than
	// 1/FlagFactor (a norm above FlagFactor × ClipFactor × the median) is
	// flagged FlagHard. The CenteredClip factor does not flag: colluding
	// identical contributions shrink its radius and could get honest members
	// flagged. Default 4; ≥ 1.
	FlagFactor float64
}

// Validate fills defaults and rejects out-of-range values.
func (c *RobustConfig) Validate() error {
	if c.Rule == 0 {
		c.Rule = RuleCenteredClip
	}
	if c.ClipFactor == 0 {
		c.ClipFactor = DefaultClipFactor
	}
	if c.Tau == 0 {
		c.Tau = DefaultTau
	}
	if c.Iters == 0 {
		c.Iters = DefaultIters
	}
	if c.FlagFactor == 0 {
		c.FlagFactor = DefaultFlagFactor
	}
	switch {
	case c.Rule != RuleCenteredClip && c.Rule != RuleTrimmedMean:
		return fmt.Errorf("%w: rule %d", ErrInvalidArgument, c.Rule)
	case !(c.ClipFactor > 1) || math.IsInf(c.ClipFactor, 0):
		return fmt.Errorf("%w: ClipFactor %v not > 1", ErrInvalidArgument, c.ClipFactor)
	case !(c.Tau > 0) || math.IsInf(c.Tau, 0):
		return fmt.Errorf("%w: Tau %v not > 0", ErrInvalidArgument, c.Tau)
	case c.Iters < 1 || c.Iters > MaxIters:
		return fmt.Errorf("%w: Iters %d not in 1..%d", ErrInvalidArgument, c.Iters, MaxIters)
	case c.Trim < 0:
		return fmt.Errorf("%w: Trim %d < 0", ErrInvalidArgument, c.Trim)
	case !(c.MaxWeight >= 0) || math.IsInf(float64(c.MaxWeight), 0):
		return fmt.Errorf("%w: MaxWeight %v", ErrInvalidArgument, c.MaxWeight)
	case !(c.FlagFactor >= 1) || math.IsInf(c.FlagFactor, 0):
		return fmt.Errorf("%w: FlagFactor %v not ≥ 1", ErrInvalidArgument, c.FlagFactor)
	}
	return nil
}

// Flag is the owner's verdict on one contribution of one chunk.
type Flag uint8

// Flags. Values: append only, never renumber.
const (
	// FlagNone: used as sent, or clipped mildly.
	FlagNone Flag = 0
	// FlagHard: norm clipped by more than FlagFactor.
	FlagHard Flag = 1
	// FlagRejected: non-finite values; weight 0.
	FlagRejected Flag = 2
)

// Verdict is what an owner publishes about one contribution of one chunk.
type Verdict struct {
	Norm   float32 // L2 norm of the decoded contribution (+Inf when rejected)
	Clip   float32 // norm clip scale, ≤ 1
	Factor float32 // final CenteredClip factor min(1, τ/distance), ≤ 1 (1 for the trimmed mean)
	Flag   Flag
	// Dot is the inner product of the decoded contribution (as sent, before
	// the norm clip) with the coordinate-wise median of the clipped
	// contributions that CenteredClip starts from (0 when the member takes
	// no part, and with the trimmed mean). Over an owner's segment its sign
	// says whether the member pulled with the others or against them.
	Dot float32
}

// robustWork is the scratch space of the rule for one goroutine.
type robustWork struct {
	w     []float64 // effective weights (capped; 0: not used)
	norms []float64
	dist  []float64
	fac   []float64
	tmp   []float64
	coef  []float64 // (k) wᵢ·factorᵢ / Σw of one CenteredClip step
	v     []float64 // (m) the estimate
	// medianNorm is ‖v‖ when v was the coordinate median (medianDots).
	medianNorm float64
	acc        []float64 // (m) one CenteredClip step
	col        []float32 // (k) one coordinate's values
	colW       []float64 // (k) their weights (trimmed mean)
	active     []int     // members with weight > 0
	clipped    []int     // active members whose norm is clipped
	rows       []float32 // (active, m) the coordinate median's sorted copy
	coded      codedWork // the int8 path's scratch (robust_kernels.go)
}

func (ws *robustWork) reset(k, m int) {
	grow := func(s []float64, n int) []float64 {
		if cap(s) < n {
			return make([]float64, n)
		}
		return s[:n]
	}
	ws.w, ws.norms, ws.dist, ws.fac = grow(ws.w, k), grow(ws.norms, k), grow(ws.dist, k), grow(ws.fac, k)
	ws.tmp, ws.colW, ws.v = grow(ws.tmp, k), grow(ws.colW, k), grow(ws.v, m)
	ws.coef, ws.acc = grow(ws.coef, k), grow(ws.acc, m)
	if cap(ws.col) < k {
		ws.col = make([]float32, k)
	}
	ws.col = ws.col[:k]
	ws.active = ws.active[:0]
	ws.medianNorm = 0
}

// robustMean combines the k contributions xs (k × m, decoded; clipped in
// place) with weights into out (m) and writes one Verdict per member to
// rep. A contribution holding a non-finite value, or with weight 0, takes
// no part. It reports false when no contribution is usable (out is then
// zero). Every operation has a fixed order and no fused multiply-add, so
// the bits of out are the same on every platform.
func robustMean(ws *robustWork, rc *RobustConfig, weights []float32, xs [][]float32, out []float32, rep []Verdict) bool {
	k, m := len(xs), len(out)
	ws.reset(k, m)
	ws.screen(rc, weights, xs, rep)
	if len(ws.active) == 0 {
		clear(out)
		return false
	}
	ws.clipNorms(rc, xs, rep)
	if rc.Rule == RuleTrimmedMean {
		ws.trimmedMean(rc, xs, out)
	} else {
		ws.centeredClip(rc, xs, out, rep)
	}
	ws.flag(rc, rep)
	return true
}

// flag completes the verdicts of the active members.
func (ws *robustWork) flag(rc *RobustConfig, rep []Verdict) {
	for _, i := range ws.active {
		rep[i].Factor = float32(ws.fac[i])
		if float64(rep[i].Clip) < 1/rc.FlagFactor {
			rep[i].Flag = FlagHard
		}
	}
}

// screen caps the weights, computes the norms and rejects non-finite
// contributions.
func (ws *robustWork) screen(rc *RobustConfig, weights []float32, xs [][]float32, rep []Verdict) {
	for i, x := range xs {
		ws.norms[i] = norm(x)
	}
	ws.admit(rc, weights, rep)
}

// admit caps the weights and rejects the contributions whose norm
// (ws.norms) is not finite: the members with weight > 0 left are active.
func (ws *robustWork) admit(rc *RobustConfig, weights []float32, rep []Verdict) {
	ws.active = ws.active[:0]
	for i, n := range ws.norms {
		w := capWeight(rc, weights[i])
		rep[i] = Verdict{Norm: float32(n), Clip: 1, Factor: 1}
		ws.fac[i] = 1
		if math.IsNaN(n) || math.IsInf(n, 0) {
			rep[i] = Verdict{Norm: float32(math.Inf(1)), Flag: FlagRejected}
			w = 0
		}
		ws.w[i] = w
		if w > 0 {
			ws.active = append(ws.active, i)
		}
	}
}

// capWeight is w capped at rc.MaxWeight.
func capWeight(rc *RobustConfig, w float32) float64 {
	if rc.MaxWeight > 0 {
		return min(float64(w), float64(rc.MaxWeight))
	}
	return float64(w)
}

// norm is ‖x‖₂ in float64, summed in order.
func norm(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(float64(v) * float64(v))
	}
	return math.Sqrt(s)
}

// lowerMedian returns the lower median of vals[i] over the active members.
func (ws *robustWork) lowerMedian(vals []float64) float64 {
	t := ws.tmp[:0]
	for _, i := range ws.active {
		t = append(t, vals[i])
	}
	slices.Sort(t)
	return t[(len(t)-1)/2]
}

// clipNorms scales every active contribution down to ClipFactor × the lower
// median norm.
func (ws *robustWork) clipNorms(rc *RobustConfig, xs [][]float32, rep []Verdict) {
	for _, i := range ws.clipScales(rc, rep) {
		s, x := rep[i].Clip, xs[i]
		for t := range x {
			x[t] = float32(x[t] * s)
		}
	}
}

// clipScales sets rep[i].Clip for the active members whose norm exceeds
// ClipFactor × the lower median norm and returns those members.
func (ws *robustWork) clipScales(rc *RobustConfig, rep []Verdict) []int {
	limit := rc.ClipFactor * ws.lowerMedian(ws.norms)
	ws.clipped = ws.clipped[:0]
	for _, i := range ws.active {
		if ws.norms[i] > limit {
			rep[i].Clip = float32(limit / ws.norms[i])
			ws.clipped = append(ws.clipped, i)
		}
	}
	return ws.clipped
}

// coordMedian sets ws.v to the coordinate-wise lower median of the active
// contributions: a copy of them goes through a Batcher sorting network row
// by row (branch-free compare-exchange; the median is one of the values).
func (ws *robustWork) coordMedian(xs [][]float32) {
	a, m := len(ws.active), len(ws.v)
	if cap(ws.rows) < a*m {
		ws.rows = make([]float32, a*m)
	}
	rows := ws.rows[:a*m]
	for r, i := range ws.active {
		copy(rows[r*m:(r+1)*m], xs[i][:m])
	}
	for _, c := range sortNetwork(a) {
		compareExchange(rows[int(c[0])*m:int(c[0]+1)*m], rows[int(c[1])*m:int(c[1]+1)*m])
	}
	med := rows[(a-1)/2*m : ((a-1)/2+1)*m]
	for t, x := range med {
		ws.v[t] = float64(x)
	}
}

// compareExchange leaves the smaller value of each pair in lo, the larger
// in hi. Go's min and max are branch-free and defined for every input
// (min(−0, +0) = −0), so every platform gets the same bits.
func compareExchange(lo, hi []float32) {
	hi = hi[:len(lo)]
	for t, a := range lo {
		b := hi[t]
		lo[t], hi[t] = min(a, b), max(a, b)
	}
}

// sortNetworks caches Batcher's odd–even merge sort networks by size.
var sortNetworks sync.Map // int → [][2]uint16

// sortNetwork returns the comparators (lower index gets the smaller key) of
// a sorting network for n keys: Batcher's network for the next power of
// two without the comparators that touch an index ≥ n (those would see
// +∞ there and never swap).
func sortNetwork(n int) [][2]uint16 {
	if c, ok := sortNetworks.Load(n); ok {
		return c.([][2]uint16)
	}
	var cs [][2]uint16
	p2 := 1
	for p2 < n {
		p2 *= 2
	}
	for p := 1; p < p2; p *= 2 {
		for k := p; k >= 1; k /= 2 {
			for j := k % p; j+k < p2; j += 2 * k {
				for i := 0; i < min(k, p2-j-k); i++ {
					lo, hi := i+j, i+j+k
					if lo/(2*p) == hi/(2*p) && hi < n {
						cs = append(cs, [2]uint16{uint16(lo), uint16(hi)})
					}
				}
			}
		}
	}
	sortNetworks.Store(n, cs)
	return cs
}

// distances sets ws.dist[i] = ‖xs[i] − v‖₂ for the active members.
func (ws *robustWork) distances(xs [][]float32) {
	for _, i := range ws.active {
		var s float64
		for t, x := range xs[i] {
			d := float64(x) - ws.v[t]
			s += float64(d * d)
		}
		ws.dist[i] = math.Sqrt(s)
	}
}

// medianDots sets rep[i].Dot of the active members to the inner product
// of their contribution as sent with v, the coordinate-wise median of the
// clipped contributions, from the norms and distances already summed:
// ⟨x, v⟩ = (‖c‖² + ‖v‖² − ‖c − v‖²) / 2s for the clipped c = s·x, ‖c‖
// taken as s·‖x‖. No pass over the coordinates but one over v (its norm,
// kept in ws.medianNorm); float64 sums of m terms lose far less than the
// sign needs.
func (ws *robustWork) medianDots(v []float64, rep []Verdict) {
	var vv float64
	for _, x := range v {
		vv += x * x
	}
	ws.medianNorm = math.Sqrt(vv)
	for _, i := range ws.active {
		s := float64(rep[i].Clip)
		if !(s > 0) {
			continue
		}
		c, d := s*ws.norms[i], ws.dist[i]
		rep[i].Dot = float32((c*c + vv - d*d) / (2 * s))
	}
}

// centeredClip runs rc.Iters iterations of
// v ← v + Σ wᵢ·min(1, τ/‖xᵢ−v‖)·(xᵢ−v) / Σ wᵢ from the coordinate median,
// τ = Tau × the lower median distance to it.
func (ws *robustWork) centeredClip(rc *RobustConfig, xs [][]float32, out []float32, rep []Verdict) {
	ws.coordMedian(xs)
	ws.distances(xs)
	ws.medianDots(ws.v, rep)
	tau := rc.Tau * ws.lowerMedian(ws.dist)
	total := ws.totalWeight()
	for it := range rc.Iters {
		if it > 0 {
			ws.distances(xs)
		}
		ws.step(xs, ws.coefs(tau, total))
	}
	for t, v := range ws.v {
		out[t] = float32(v)
	}
}

// totalWeight is Σ w over the active members, in order.
func (ws *robustWork) totalWeight() float64 {
	var total float64
	for _, i := range ws.active {
		total += ws.w[i]
	}
	return total
}

// coefs sets the CenteredClip factors min(1, τ/dist) of the active members
// and returns their step coefficients w·factor / total.
func (ws *robustWork) coefs(tau, total float64) []float64 {
	c := ws.coef
	for _, i := range ws.active {
		f := 1.0
		if ws.dist[i] > tau {
			f = tau / ws.dist[i]
		}
		ws.fac[i] = f
		c[i] = float64(ws.w[i]*f) / total
	}
	return c
}

// step is v ← v + Σ c[i]·(xs[i] − v) over the active members. Each
// coordinate's sum runs over the members in order (member-major loops, so
// that the inner loop streams one row).
func (ws *robustWork) step(xs [][]float32, c []float64) {
	acc := ws.acc[:len(ws.v)]
	clear(acc)
	for _, i := range ws.active {
		ci := c[i]
		x := xs[i][:len(acc)]
		v := ws.v[:len(acc)]
		for t := range acc {
			acc[t] += float64(ci * float64(float64(x[t])-v[t]))
		}
	}
	for t, a := range acc {
		ws.v[t] += a
	}
}

// trimmedMean drops rc.Trim values at each end per coordinate and averages
// the rest with their weights.
func (ws *robustWork) trimmedMean(rc *RobustConfig, xs [][]float32, out []float32) {
	a := len(ws.active)
	b := rc.Trim
	if b == 0 {
		b = (len(xs) - 1) / 2
	}
	b = min(b, (a-1)/2)
	col, colW := ws.col[:a], ws.colW[:a]
	for t := range out {
		for j, i := range ws.active {
			col[j], colW[j] = xs[i][t], ws.w[i]
		}
		sortPairs(col, colW)
		var s, w float64
		for j := b; j < a-b; j++ {
			s += float64(colW[j] * float64(col[j]))
			w += colW[j]
		}
		if w > 0 {
			out[t] = float32(s / w)
		} else {
			out[t] = col[(a-1)/2]
		}
	}
}

// sortPairs sorts a ascending, moving w along; ties keep their order.
func sortPairs(a []float32, w []float64) {
	for i := 1; i < len(a); i++ {
		x, y := a[i], w[i]
		j := i
		for ; j > 0 && a[j-1] > x; j-- {
			a[j], w[j] = a[j-1], w[j-1]
		}
		a[j], w[j] = x, y
	}
}
