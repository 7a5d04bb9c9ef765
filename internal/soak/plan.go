package soak

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a kind of fault.
type Kind int

// The faults a soak injects. Append only: the names are printed in tables.
const (
	// Kill sends SIGKILL to a member and restarts it with the same home
	// after Event.Dur.
	Kill Kind = iota
	// Join starts a new member with a fresh home on a free slot.
	Join
	// Leave sends SIGINT to a member (a graceful leave); its slot is freed.
	Leave
	// Partition cuts a random subset of the members from the rest for
	// Event.Dur, then heals.
	Partition
	// Flap takes one member's links down and up (Event.Downs) for Event.Dur.
	Flap
	// RateDrop cuts one member's link rates to Event.Factor of theirs for
	// Event.Dur.
	RateDrop
	// DiskFull fills the disk of the member whose home is a small tmpfs
	// while it writes a checkpoint, kills and restarts it on the full disk,
	// then frees the space.
	DiskFull
	// Skew starts a new member whose wall clock is Event.Skew off.
	Skew
	// DonorKill starts a new member on slow links and kills one of the
	// members serving it the model while the transfer runs.
	DonorKill
	// Storm makes every member but the long-lived ones leave at once, then
	// starts StormJoiners new members at once.
	Storm
	numKinds
)

var kindNames = [numKinds]string{"kill", "join", "leave", "partition", "flap", "rate-drop",
	"disk-full", "clock-skew", "donor-kill", "storm"}

// String is the kind's name in tables, e.g. "rate-drop".
func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("kind(%d)", int(k))
	}
	return kindNames[k]
}

// Kinds lists every kind, in table order.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// Interval is a span of time [From, To) from some origin.
type Interval struct {
	From, To time.Duration
}

// Contains reports whether t lies in [From, To).
func (iv Interval) Contains(t time.Duration) bool { return t >= iv.From && t < iv.To }

// Event is one fault of a plan. Which member it hits is chosen when it
// happens, from those eligible then, by Pick (Target), so that a seed gives
// the same plan whatever the members' timing.
type Event struct {
	// At is when it starts, from the start of the run.
	At   time.Duration
	Kind Kind
	// Dur: how long a partition, flap burst or rate drop lasts; for a Kill,
	// how long the member stays down.
	Dur time.Duration
	// Downs are a Flap's outages, from At.
	Downs []Interval
	// Factor is a RateDrop's fraction of the normal rate.
	Factor float64
	// Skew is a Skew member's clock offset.
	Skew time.Duration
	// Pick chooses the target among the eligible members (Target), and
	// seeds a partition's choice of side (Side).
	Pick uint64
}

// End is when the event's disturbance of the network ends (At for
// instantaneous events).
func (e Event) End() time.Duration {
	switch e.Kind {
	case Partition, Flap, RateDrop:
		return e.At + e.Dur
	}
	return e.At
}

// Target returns the element of eligible that e hits: eligible sorted,
// then indexed by Pick; false when eligible is empty.
func (e Event) Target(eligible []int) (int, bool) {
	if len(eligible) == 0 {
		return 0, false
	}
	s := slices.Sorted(slices.Values(eligible))
	return s[e.Pick%uint64(len(s))], true
}

// Side returns a Partition's minority side: between 1 and half of alive
// (sorted), drawn from Pick. Empty when fewer than 2 are alive.
func (e Event) Side(alive []int) []int {
	if len(alive) < 2 {
		return nil
	}
	s := slices.Sorted(slices.Values(alive))
	r := rand.New(rand.NewPCG(e.Pick, uint64(len(s))))
	r.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	side := s[:1+r.IntN(len(s)/2)]
	slices.Sort(side)
	return side
}

// PlanConfig is what a plan is drawn from.
type PlanConfig struct {
	// Seed draws everything.
	Seed uint64
	// Faults is the fault phase, from the start of the run.
	Faults Interval
	// Initial members when the fault phase starts; Min and Max bound the
	// members churn leaves running (a Storm goes below Min for a moment).
	Initial, Min, Max int
	// LongLived members are never killed or made to leave.
	LongLived int
}

// Fault schedule constants (issue: churn every 0.5–10 s, partitions of
// 30–120 s).
const (
	churnMin, churnMax         = 500 * time.Millisecond, 10 * time.Second
	downMin, downMax           = 500 * time.Millisecond, 5 * time.Second
	partitionMin, partitionMax = 30 * time.Second, 120 * time.Second
	flapBurstMin, flapBurstMax = 20 * time.Second, 60 * time.Second
	flapDownMin, flapDownMax   = time.Second, 5 * time.Second
	flapUpMin, flapUpMax       = 2 * time.Second, 10 * time.Second
	rateDropMin, rateDropMax   = 20 * time.Second, 90 * time.Second
	// ClockSkew is the size of a Skew member's clock offset (either sign).
	ClockSkew = 5 * time.Minute
	// StormJoiners is how many members a Storm starts at once.
	StormJoiners = 10
	// donorKillEvery: one donor kill per this much of the fault phase (at
	// least one).
	donorKillEvery = 20 * time.Minute
)

// ErrPlan is returned for a plan configuration that cannot be drawn.
var ErrPlan = errors.New("soak: bad plan configuration")

// Validate checks that the population bounds leave room for the storm and
// that the fault phase is long enough for a partition.
func (c PlanConfig) Validate() error {
	switch {
	case c.Faults.To-c.Faults.From < partitionMin:
		return fmt.Errorf("%w: fault phase %v shorter than a partition (%v)", ErrPlan, c.Faults.To-c.Faults.From, partitionMin)
	case c.LongLived < 1 || c.Min <= c.LongLived || c.Min > c.Initial || c.Initial > c.Max:
		return fmt.Errorf("%w: need 1 ≤ long-lived < min ≤ initial ≤ max, have %d, %d, %d, %d", ErrPlan, c.LongLived, c.Min, c.Initial, c.Max)
	case c.LongLived+StormJoiners > c.Max:
		return fmt.Errorf("%w: a storm needs long-lived + %d ≤ max members, have %d + %d > %d", ErrPlan, StormJoiners, c.LongLived, StormJoiners, c.Max)
	}
	return nil
}

// Plan draws the fault schedule from c.Seed: churn (kill, join, leave)
// every 0.5–10 s within the population bounds; back-to-back partitions,
// flap bursts and rate drops, each with pauses between; one disk-full, one
// clock skew, one storm (a third into the phase) and a donor kill per 20
// minutes. Every kind occurs
// at least once. Events are sorted by At.
func Plan(c PlanConfig) ([]Event, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x50a6))
	f := c.Faults
	span := f.To - f.From
	var evs []Event
	evs = append(evs, spans(r, f, Partition, partitionMin, partitionMax)...)
	evs = append(evs, spans(r, f, Flap, flapBurstMin, flapBurstMax)...)
	evs = append(evs, spans(r, f, RateDrop, rateDropMin, rateDropMax)...)
	// The scenarios that take minutes start early in the fault phase, so
	// that they end within it however short it is.
	evs = append(evs,
		Event{At: f.From + between(r, 0, span/8), Kind: DiskFull, Pick: r.Uint64()},
		Event{At: f.From + between(r, 0, span/4), Kind: Skew, Skew: skewSign(r) * ClockSkew, Pick: r.Uint64()},
		Event{At: f.From + span/3, Kind: Storm, Pick: r.Uint64()})
	n := max(1, int(span/donorKillEvery))
	for k := range n {
		seg := span / time.Duration(n)
		evs = append(evs, Event{At: f.From + time.Duration(k)*seg + between(r, seg/16, seg/4), Kind: DonorKill, Pick: r.Uint64()})
	}
	for i := range evs {
		if evs[i].Kind == Flap {
			evs[i].Downs = flapDowns(r, evs[i].Dur)
		}
		if evs[i].Kind == RateDrop {
			evs[i].Factor = 0.02 + 0.18*r.Float64()
		}
	}
	evs = append(evs, churn(r, c, f.From+span/3)...)
	slices.SortStableFunc(evs, func(a, b Event) int { return int(a.At - b.At) })
	return evs, nil
}

// spans draws back-to-back events of kind k over f: each lasts lo–hi
// (cut at f's end), separated by pauses of lo–hi. The first starts within
// the first pause; there is always at least one, lasting at least lo.
func spans(r *rand.Rand, f Interval, k Kind, lo, hi time.Duration) []Event {
	var out []Event
	t := f.From + between(r, 0, min(lo, f.To-f.From-lo))
	for t+lo <= f.To {
		d := min(between(r, lo, hi), f.To-t)
		out = append(out, Event{At: t, Kind: k, Dur: d, Pick: r.Uint64()})
		t += d + between(r, lo, hi)
	}
	return out
}

// flapDowns draws a flap burst's outages within dur: down 1–5 s, up 2–10 s.
func flapDowns(r *rand.Rand, dur time.Duration) []Interval {
	var out []Interval
	t := time.Duration(0)
	for {
		d := between(r, flapDownMin, flapDownMax)
		if t+d > dur {
			return out
		}
		out = append(out, Interval{t, t + d})
		t += d + between(r, flapUpMin, flapUpMax)
	}
}

// churn draws kill, join and leave events every 0.5–10 s over the fault
// phase, keeping the modelled population within [Min, Max]; the storm at
// time storm leaves LongLived + StormJoiners. The special events' joiners
// are not modelled: the runner frees a slot for them when none is free.
func churn(r *rand.Rand, c PlanConfig, storm time.Duration) []Event {
	var out []Event
	pop := c.Initial
	for t := c.Faults.From + between(r, churnMin, churnMax); t < c.Faults.To; t += between(r, churnMin, churnMax) {
		if t >= storm && storm >= 0 {
			pop, storm = c.LongLived+StormJoiners, -1
		}
		k := Kill
		// The first two are a join and a leave, so that every run has both.
		switch x := r.IntN(4); {
		case len(out) == 0 && pop < c.Max:
			k, pop = Join, pop+1
		case len(out) == 1 && pop > c.Min:
			k, pop = Leave, pop-1
		case x == 2 && pop < c.Max:
			k, pop = Join, pop+1
		case x == 3 && pop > c.Min:
			k, pop = Leave, pop-1
		}
		out = append(out, Event{At: t, Kind: k, Dur: between(r, downMin, downMax), Pick: r.Uint64()})
	}
	return out
}

// between draws a duration uniformly in [lo, hi] (lo when hi ≤ lo).
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

func skewSign(r *rand.Rand) time.Duration {
	if r.IntN(2) == 0 {
		return -1
	}
	return 1
}

// Count returns how many events of each kind evs holds.
func Count(evs []Event) map[Kind]int {
	n := map[Kind]int{}
	for _, e := range evs {
		n[e.Kind]++
	}
	return n
}
