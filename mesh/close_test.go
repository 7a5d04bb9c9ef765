package mesh

import (
	"fmt"
	"slices"
	"testing"
)

// simClose is what a run of simCloseRun measured over its steps after the
// first two.
type simClose struct {
	ticksPerStep float64 // of n00's steps
	slowIn       float64 // fraction of rings with the last member in them
	slowWeight   float64 // its mean weight in them
	fastUtil     float64 // n00's ticks training per tick
	full         int     // rings in which a fast member had fewer than H
}

// simCloseOpts configures simCloseRun.
type simCloseOpts struct {
	speeds   []int   // ticks per inner step, by node
	fraction float64 // Config.CloseFraction; 0 is the old rule
	snapshot bool    // closers answer from their last boundary
	lossy    bool    // 20 % loss, 10 % duplicates, 1–6 ticks delay
	steps    int
	seed     uint64
	tweak    func(*simNet) // after the nodes are added
}

// simCloseRun trains 10-inner-step phases with nodes of o.speeds and
// measures o.steps steps after two of warm-up.
func simCloseRun(t *testing.T, o simCloseOpts) simClose {
	t.Helper()
	s := newSimNet(t, o.seed)
	s.inner = 10
	if o.lossy {
		s.drop, s.dup, s.maxDelay = 0.2, 0.1, 6
	}
	s.addN(len(o.speeds), func(c *Config) {
		c.CloseFraction, c.Inner, c.StragglerTicks = o.fraction, s.inner, 400
	})
	for i, v := range o.speeds {
		n := s.nodes[simID(i)]
		n.stepTicks, n.snapshot = v, o.snapshot
	}
	if o.tweak != nil {
		o.tweak(s)
	}
	n0 := s.nodes["n00"]
	s.runUntil(2000, "step 2", func() bool { step, _ := n0.m.Model(); return step >= 2 })
	from, at, trained := len(s.done), s.now, n0.trained
	s.runUntil(400*o.steps, fmt.Sprintf("step %d", 2+o.steps), func() bool {
		step, _ := n0.m.Model()
		return step >= uint64(2+o.steps)
	})
	s.checkNoStepLost()
	var r simClose
	r.ticksPerStep = float64(s.now-at) / float64(o.steps)
	r.fastUtil = float64(n0.trained-trained) / float64(s.now-at)
	slow := simID(len(o.speeds) - 1)
	rings := s.done[from:]
	for _, d := range rings {
		if i := d.ring.Rank(slow); i >= 0 {
			r.slowIn++
			r.slowWeight += float64(d.ring.Weights[i])
		}
		for i, id := range d.ring.Members {
			if id != slow && o.speeds[slices.Index(s.ids, id)] == 1 && d.ring.Weights[i] < float32(s.inner) {
				r.full++
			}
		}
	}
	if r.slowIn > 0 {
		r.slowWeight /= r.slowIn
	}
	r.slowIn /= float64(len(rings))
	return r
}

// TestSimCloseMixedSpeeds: three members at one tick per inner step and one
// 3× or 10× slower. Under the close rule the step lasts as long as with
// four fast members, the slow member is in every ring with the inner steps
// it finished (about H/3, H/10), and the fast ones always contribute all H;
// under the old rule every step waits for the slow member's H steps.
func TestSimCloseMixedSpeeds(t *testing.T) {
	base := simCloseRun(t, simCloseOpts{speeds: []int{1, 1, 1, 1}, fraction: 0.5, steps: 10, seed: 1})
	for _, slow := range []int{3, 10} {
		t.Run(fmt.Sprintf("slow=%d", slow), func(t *testing.T) {
			speeds := []int{1, 1, 1, slow}
			for _, snap := range []bool{false, true} {
				r := simCloseRun(t, simCloseOpts{speeds: speeds, fraction: 0.5, snapshot: snap, steps: 10, seed: 2})
				old := simCloseRun(t, simCloseOpts{speeds: speeds, steps: 4, seed: 2})
				t.Logf("snapshot=%v: %.1f ticks/step (4 fast %.1f, old rule %.1f), fast utilization %.2f (old %.2f), slow in %.0f%% of rings with weight %.1f",
					snap, r.ticksPerStep, base.ticksPerStep, old.ticksPerStep, r.fastUtil, old.fastUtil, 100*r.slowIn, r.slowWeight)
				// A closer answers within one of its inner steps (at once
				// from a snapshot) and a gossip hop.
				limit := base.ticksPerStep + float64(slow) + 2
				if snap {
					limit = base.ticksPerStep + 2
				}
				if r.ticksPerStep > limit || r.slowIn < 1 || r.full > 0 {
					t.Errorf("ticks/step %.1f > %.1f, or slow member in %.0f%% of rings, or %d fast contributions short of H",
						r.ticksPerStep, limit, 100*r.slowIn, r.full)
				}
				if w := 10 / float64(slow); r.slowWeight < w-1 || r.slowWeight > w+2 {
					t.Errorf("slow member's mean weight %.1f, want about %.1f", r.slowWeight, w)
				}
				if old.ticksPerStep < 0.8*float64(10*slow) {
					t.Errorf("old rule: %.1f ticks/step, want the slow member's phase (%d)", old.ticksPerStep, 10*slow)
				}
			}
		})
	}
}

// TestSimCloseLossy: the same over a lossy network (20 % loss, 10 %
// duplicates, 1–6 ticks of delay), several seeds: no step lost, one ring a
// step (the harness checks both), the slow member in at least 90 % of the
// rings.
func TestSimCloseLossy(t *testing.T) {
	for seed := range uint64(6) {
		r := simCloseRun(t, simCloseOpts{speeds: []int{1, 1, 1, 3 + 7*int(seed%2)}, fraction: 0.5, snapshot: seed%3 != 0,
			lossy: true, steps: 12, seed: 100 + seed})
		t.Logf("seed %d: %.1f ticks/step, slow in %.0f%% of rings with weight %.1f", seed, r.ticksPerStep, 100*r.slowIn, r.slowWeight)
		if r.slowIn < 0.9 {
			t.Errorf("seed %d: slow member in %.0f%% of rings", seed, 100*r.slowIn)
		}
	}
}

// TestSimCloseLiar: a member that is Ready with H inner steps the moment
// each step begins cannot close steps alone (its claim is one H of the
// ½ · 4 · H the rule needs): the honest fast members still contribute all
// H every step, the slow one its share, at the pace of four honest
// members. It gains a fast member's weight, H, and no more.
func TestSimCloseLiar(t *testing.T) {
	base := simCloseRun(t, simCloseOpts{speeds: []int{1, 1, 1, 3}, fraction: 0.5, snapshot: true, steps: 10, seed: 3})
	r := simCloseRun(t, simCloseOpts{speeds: []int{1, 1, 1, 3}, fraction: 0.5, snapshot: true, steps: 10, seed: 3,
		tweak: func(s *simNet) { s.nodes["n02"].lie = true }})
	t.Logf("liar: %.1f ticks/step (honest %.1f), slow weight %.1f (honest %.1f)", r.ticksPerStep, base.ticksPerStep, r.slowWeight, base.slowWeight)
	if r.full > 0 || r.ticksPerStep < base.ticksPerStep-1 || r.slowWeight < base.slowWeight-0.5 {
		t.Errorf("a lone liar shortened the phases: %d fast contributions short of H, %.1f ticks/step against %.1f, slow weight %.1f against %.1f",
			r.full, r.ticksPerStep, base.ticksPerStep, r.slowWeight, base.slowWeight)
	}
}

// TestSimCloseDelayer: a member 10× slower that never answers a close (it
// is Ready only after its H steps) is waited for CloseWaitTicks once, then
// skipped for 1, 2, 4, … steps: it holds few steps, and the others' pace
// stays near that of three fast members.
func TestSimCloseDelayer(t *testing.T) {
	base := simCloseRun(t, simCloseOpts{speeds: []int{1, 1, 1}, fraction: 0.5, steps: 16, seed: 4})
	r := simCloseRun(t, simCloseOpts{speeds: []int{1, 1, 1, 10}, fraction: 0.5, steps: 16, seed: 4,
		tweak: func(s *simNet) { s.nodes["n03"].ignoreClose = true }})
	t.Logf("delayer: %.1f ticks/step (without it %.1f), in %.0f%% of rings", r.ticksPerStep, base.ticksPerStep, 100*r.slowIn)
	// Waited for in steps 1, 3, 6, 11, …: at most 4 of the first 18.
	if r.ticksPerStep > base.ticksPerStep+4*float64(DefaultCloseWaitTicks)/16+2 {
		t.Errorf("delayer held the run: %.1f ticks/step against %.1f", r.ticksPerStep, base.ticksPerStep)
	}
}

// TestCloseCountsUpToH: the work target counts each Ready member's inner
// steps up to H, so one claim of 2²⁴ closes nothing; a second Ready member
// closes the step (Closed), and the training node is told once.
func TestCloseCountsUpToH(t *testing.T) {
	m, err := New(Config{ID: "self", CloseFraction: 0.5, Inner: 10}, 0, "h")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []PeerID{"a", "b", "c"} {
		if err := m.Step(Message{Type: MsgHeartbeat, From: id, State: StateTraining, Hash: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	closes := func() (n int) {
		for m.HasReady() {
			rd := m.Ready()
			if rd.Close != nil {
				n++
			}
			m.Advance(rd)
		}
		return n
	}
	closes()
	steps := []struct {
		from  PeerID
		inner uint32
		want  int
	}{{"a", MaxInnerSteps, 0}, {"b", 10, 1}, {"c", 10, 0}}
	for _, s := range steps {
		if err := m.Step(Message{Type: MsgReady, From: s.from, Hash: "h", InnerSteps: s.inner}); err != nil {
			t.Fatal(err)
		}
		if got := closes(); got != s.want {
			t.Fatalf("after %s's Ready with %d: %d closes, want %d", s.from, s.inner, got, s.want)
		}
		if m.Closed(0) != (s.from != "a") || m.Closed(1) {
			t.Fatalf("after %s's Ready: Closed(0) %v, Closed(1) %v", s.from, m.Closed(0), m.Closed(1))
		}
	}
}

func TestCloseConfig(t *testing.T) {
	for _, c := range []Config{
		{ID: "x", CloseFraction: 0.5},
		{ID: "x", CloseFraction: -0.1, Inner: 1},
		{ID: "x", CloseFraction: 1.5, Inner: 1},
		{ID: "x", Inner: MaxInnerSteps + 1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", c)
		}
	}
}
