package soak

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Sample is one reading of one member's /v1/status by the harness.
type Sample struct {
	// T is when it was read, from the start of the run (the harness's
	// clock: a member's own clock may be skewed).
	T time.Duration
	// Member names one life of a slot: a fresh home is a new member; a
	// restart with the same home is the same member.
	Member string
	Step   uint64
	Hash   string
	// Syncing: the member is replacing its model by a fetch (its state is
	// syncing, or a download runs), so the model it reports is on its way
	// out; split checks pass it over.
	Syncing bool
}

// Tick is one round of readings of every running member.
type Tick struct {
	T time.Duration
	// Up counts the members that answered; Linked those of them that
	// report at least one other running member connected.
	Up, Linked int
}

// Split is two members seen at one outer step with different models.
type Split struct {
	Step         uint64
	A, B         string
	HashA, HashB string
	SeenA, SeenB time.Duration
	// Excused: one of the two readings falls within a window that applies
	// to its member (a partition, flap or rate drop and its heal window; a
	// member's own restart from a checkpoint and the heal window after it).
	Excused bool
}

// Window is a time in which members may hold models that others do not:
// a network disturbance (Member "") or a member's restart (Member set),
// each followed by the heal window.
type Window struct {
	Interval
	Member string
}

// firstSeen is the first time each (member, step, hash) was read.
type firstSeen struct {
	member string
	step   uint64
	hash   string
	t      time.Duration
}

func firstSeens(samples []Sample) []firstSeen {
	type key struct {
		m string
		s uint64
		h string
	}
	seen := map[key]time.Duration{}
	var out []firstSeen
	for _, s := range samples {
		if s.Hash == "" || s.Syncing {
			continue
		}
		k := key{s.Member, s.Step, s.Hash}
		if t, ok := seen[k]; ok && t <= s.T {
			continue
		}
		seen[k] = s.T
		out = append(out, firstSeen{s.Member, s.Step, s.Hash, s.T})
	}
	return out
}

// Splits returns every pair of members seen at one step with different
// model hashes (one pair per step and pair of hashes), marking as excused
// those of which one reading falls within a window that applies to its
// member, extended by heal: a model made on one side of a partition, or
// resumed from a checkpoint made there, differs from the other side's.
// What is left is a split that no fault explains.
func Splits(samples []Sample, windows []Window, heal time.Duration) []Split {
	byStep := map[uint64][]firstSeen{}
	for _, f := range firstSeens(samples) {
		byStep[f.step] = append(byStep[f.step], f)
	}
	var out []Split
	for _, step := range slices.Sorted(mapKeys(byStep)) {
		fs := byStep[step]
		done := map[[2]string]bool{}
		for i, a := range fs {
			for _, b := range fs[i+1:] {
				if a.hash == b.hash || a.member == b.member || done[[2]string{a.hash, b.hash}] {
					continue
				}
				done[[2]string{a.hash, b.hash}], done[[2]string{b.hash, a.hash}] = true, true
				out = append(out, Split{Step: step, A: a.member, B: b.member, HashA: a.hash, HashB: b.hash,
					SeenA: a.t, SeenB: b.t, Excused: excused(windows, heal, a) || excused(windows, heal, b)})
			}
		}
	}
	return out
}

// excused reports whether f falls within a window (extended by heal) that
// applies to its member.
func excused(windows []Window, heal time.Duration, f firstSeen) bool {
	for _, w := range windows {
		if (w.Member == "" || w.Member == f.member) && (Interval{w.From, w.To + heal}).Contains(f.t) {
			return true
		}
	}
	return false
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Gap is a stretch of time in which no member completed an outer step.
type Gap struct {
	From, To time.Duration
	// Linked is how long within it at least two running members were
	// connected to each other (Tick.Linked ≥ 2).
	Linked time.Duration
}

// Gaps returns the stretches between outer steps within iv, longest first:
// an outer step is a member's step growing by one between two of its
// samples (a larger jump is a fetch of others' steps).
func Gaps(samples []Sample, ticks []Tick, iv Interval) []Gap {
	progress := []time.Duration{iv.From}
	last := map[string]uint64{}
	for _, s := range samples {
		if prev, ok := last[s.Member]; ok && s.Step == prev+1 && iv.Contains(s.T) {
			progress = append(progress, s.T)
		}
		last[s.Member] = s.Step
	}
	progress = append(progress, iv.To)
	slices.Sort(progress)
	var gaps []Gap
	for i := 1; i < len(progress); i++ {
		g := Gap{From: progress[i-1], To: progress[i]}
		g.Linked = linkedWithin(ticks, g)
		gaps = append(gaps, g)
	}
	slices.SortStableFunc(gaps, func(a, b Gap) int { return cmp.Compare(b.To-b.From, a.To-a.From) })
	return gaps
}

// linkedWithin sums the time between consecutive ticks inside g during
// which the earlier tick saw two members linked.
func linkedWithin(ticks []Tick, g Gap) time.Duration {
	var d time.Duration
	for i, t := range ticks {
		if t.T < g.From || t.T >= g.To || t.Linked < 2 {
			continue
		}
		end := g.To
		if i+1 < len(ticks) && ticks[i+1].T < end {
			end = ticks[i+1].T
		}
		d += end - t.T
	}
	return d
}

// MaxStep returns the highest step any member was seen at by time t.
func MaxStep(samples []Sample, t time.Duration) uint64 {
	var m uint64
	for _, s := range samples {
		if s.T <= t {
			m = max(m, s.Step)
		}
	}
	return m
}

// Pace returns the outer steps per minute the network made over iv: the
// growth of the highest step seen.
func Pace(samples []Sample, iv Interval) float64 {
	steps := float64(MaxStep(samples, iv.To)) - float64(MaxStep(samples, iv.From))
	return steps / (iv.To - iv.From).Minutes()
}

// HealTime returns how long after healed the two sides of a partition were
// back on one model: the first time after healed that a member of side was
// seen holding a (step, hash) that a member of the other side held too, at
// a step no older than the other side's newest at the heal. False if that
// never happened.
func HealTime(samples []Sample, side []string, healed time.Duration) (time.Duration, bool) {
	var others []Sample
	for _, s := range samples {
		if !slices.Contains(side, s.Member) {
			others = append(others, s)
		}
	}
	newest := MaxStep(others, healed)
	held := map[[2]string]bool{}
	for _, s := range others {
		held[[2]string{fmt.Sprint(s.Step), s.Hash}] = true
	}
	for _, s := range samples {
		if s.T >= healed && s.Step >= newest && slices.Contains(side, s.Member) && held[[2]string{fmt.Sprint(s.Step), s.Hash}] {
			return s.T - healed, true
		}
	}
	return 0, false
}

// Stuck returns the members seen all through iv that made no step in it
// while the network made at least minSteps (MaxStep grew by that much).
func Stuck(samples []Sample, iv Interval, minSteps uint64) []string {
	if MaxStep(samples, iv.To) < MaxStep(samples, iv.From)+minSteps {
		return nil
	}
	first, last := map[string]Sample{}, map[string]Sample{}
	for _, s := range samples {
		if !iv.Contains(s.T) && s.T != iv.To {
			continue
		}
		if _, ok := first[s.Member]; !ok {
			first[s.Member] = s
		}
		last[s.Member] = s
	}
	var out []string
	for _, m := range slices.Sorted(mapKeys(first)) {
		f, l := first[m], last[m]
		if f.T-iv.From < 5*time.Second && iv.To-l.T < 5*time.Second && l.Step <= f.Step {
			out = append(out, m)
		}
	}
	return out
}

// Point is one reading of a resource.
type Point struct {
	T time.Duration
	V float64
}

// Slope fits a line to the points of the last half of the span they cover
// (least squares) and returns its slope per hour and the mean of those
// points; false with fewer than 3 points there.
func Slope(pts []Point) (perHour, mean float64, ok bool) {
	if len(pts) == 0 {
		return 0, 0, false
	}
	mid := pts[0].T + (pts[len(pts)-1].T-pts[0].T)/2
	var n, sx, sy, sxx, sxy float64
	for _, p := range pts {
		if p.T < mid {
			continue
		}
		x := p.T.Hours()
		n, sx, sy, sxx, sxy = n+1, sx+x, sy+p.V, sxx+x*x, sxy+x*p.V
	}
	den := n*sxx - sx*sx
	if n < 3 || den == 0 {
		return 0, 0, false
	}
	return (n*sxy - sx*sy) / den, sy / n, true
}
