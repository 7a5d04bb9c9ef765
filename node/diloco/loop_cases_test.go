package diloco

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// TestLoopAgrees: every member ends every step with the same global model,
// blocking and overlapped, int8 and with error feedback, and leaves with
// ErrDone at MaxOuter.
func TestLoopAgrees(t *testing.T) {
	for _, c := range []groupConfig{
		{k: 3, inner: 3, lag: 0, maxOuter: 4, codec: collective.CodecInt8},
		{k: 3, inner: 3, lag: 2, maxOuter: 4, codec: collective.CodecInt8},
		{k: 3, inner: 3, lag: -1, maxOuter: 4, codec: collective.CodecInt8, stepDur: []time.Duration{time.Millisecond, 3 * time.Millisecond}},
		{k: 2, inner: 2, lag: 0, maxOuter: 3, codec: collective.CodecInt8, feedback: true, momentum: 0.9, lr: 0.7},
	} {
		t.Run(fmt.Sprintf("k%d-lag%d-ef%v", c.k, c.lag, c.feedback), func(t *testing.T) {
			g := newGroup(t, c)
			for i, err := range g.run(t) {
				if !errors.Is(err, ErrDone) {
					t.Fatalf("member %d ended with %v, want ErrDone", i, err)
				}
			}
			for s := uint64(1); s <= c.maxOuter; s++ {
				want := g.members[0].hashes[s]
				for i, m := range g.members {
					if m.hashes[s] == "" || m.hashes[s] != want {
						t.Fatalf("step %d: member %d has hash %q, member 0 %q", s, i, m.hashes[s], want)
					}
				}
			}
			if c.lag != 0 && g.f.stragglr[0] < mesh.DefaultStragglerTicks {
				t.Errorf("overlapped loop set straggler ticks %d", g.f.stragglr[0])
			}
		})
	}
}

// meanOf returns the element-wise mean of vs.
func meanOf(vs ...[]float32) []float32 {
	out := make([]float32, len(vs[0]))
	for j := range out {
		var s float64
		for _, v := range vs {
			s += float64(v[j])
		}
		out[j] = float32(s / float64(len(vs)))
	}
	return out
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, float64(abs32(a[i]-b[i])))
	}
	return d
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestLoopIsDiLoCo: with fp32 averaging, outer lr 1 and no momentum,
// G_{t+1} is the mean of the members' ends E_t (Δ̄ = G − mean E), and after
// a blocking step every engine restarts from G_{t+1} exactly.
func TestLoopIsDiLoCo(t *testing.T) {
	g := newGroup(t, groupConfig{k: 3, inner: 4, lag: 0, maxOuter: 3, codec: collective.CodecFP32})
	g.run(t)
	for s := uint64(0); s < 3; s++ {
		var ends [][]float32
		for _, m := range g.members {
			ends = append(ends, m.ends[s])
		}
		if d := maxDiff(g.members[0].models[s+1], meanOf(ends...)); d > 1e-6 {
			t.Fatalf("step %d: G differs from the mean of the ends by %g", s+1, d)
		}
	}
	for i, m := range g.members {
		if maxDiff(m.ends[2], g.members[0].models[2]) == 0 {
			t.Fatalf("member %d: no training between steps", i)
		}
	}
}

// TestLoopRetryDivisor: a member dies in the first attempt of step 0; the
// others retry without it and average only their own two pseudo-gradients
// (divisor 2), and the dead member fetches the result.
func TestLoopRetryDivisor(t *testing.T) {
	g := newGroup(t, groupConfig{k: 3, inner: 2, lag: 0, maxOuter: 2, codec: collective.CodecFP32})
	g.rings.kill["r0-0"] = g.f.ids[2]
	g.run(t)
	m0, m1, m2 := g.members[0], g.members[1], g.members[2]
	if d := maxDiff(m0.models[1], meanOf(m0.ends[0], m1.ends[0])); d > 1e-6 {
		t.Fatalf("step 1 is not the mean of the two survivors (off by %g)", d)
	}
	if g.f.fetches[2] != 1 || m2.hashes[1] != "" {
		t.Fatalf("the dead member fetched %d times and committed step 1 itself: %q", g.f.fetches[2], m2.hashes[1])
	}
	if m2.hashes[2] == "" || m2.hashes[2] != m0.hashes[2] {
		t.Fatalf("after its fetch the member did not rejoin: step 2 hash %q vs %q", m2.hashes[2], m0.hashes[2])
	}
	if c := m0.commits[0]; c.Attempts != 2 || len(c.Ring.Members) != 2 {
		t.Fatalf("step 1 committed after %d attempts by a ring of %d", c.Attempts, len(c.Ring.Members))
	}
}

// TestLoopFetchMidReduce: a fetch the mesh asks for while a member waits
// for its ring replaces the step: the member takes the fetched model and
// goes on training with the others.
func TestLoopFetchMidReduce(t *testing.T) {
	g := newGroup(t, groupConfig{k: 2, inner: 2, lag: 0, maxOuter: 3, codec: collective.CodecInt8})
	// Member 1 is left out of step 1: when it is Ready, the mesh tells it
	// to fetch step 2 and decides step 1 without it.
	g.f.onReady = func(rank int, step uint64) {
		if rank == 1 && step == 1 {
			g.f.tellFetch(1, 2)
		}
	}
	errs := g.run(t)
	if !errors.Is(errs[1], ErrDone) || g.f.fetches[1] != 1 {
		t.Fatalf("member 1: %v after %d fetches", errs[1], g.f.fetches[1])
	}
	if h := g.members[1].hashes[3]; h == "" || h != g.members[0].hashes[3] {
		t.Fatalf("member 1 did not train step 3 with member 0: %q vs %q", h, g.members[0].hashes[3])
	}
}

// TestLoopDrain: at MaxOuter a member waits for the last ring to catch up,
// and leaves after the drain timeout if it never does.
func TestLoopDrain(t *testing.T) {
	g := newGroup(t, groupConfig{k: 2, inner: 1, lag: 0, maxOuter: 1, codec: collective.CodecInt8})
	var asked int
	g.f.caughtUp = func(int) bool { asked++; return false }
	for _, m := range g.members {
		m.l.cfg.Drain = 30 * time.Millisecond
	}
	start := time.Now()
	for i, err := range g.run(t) {
		if !errors.Is(err, ErrDone) {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if took := time.Since(start); took < 30*time.Millisecond || asked < 2 {
		t.Fatalf("left after %v having asked %d times", took, asked)
	}
}

// TestLoopLagOne: with lag 1 the first global step equals the blocking
// loop's (both phases start from G_0), and the local model is rebased:
// θ = E_0 + one step, moved by G_1 − E_0.
func TestLoopLagOne(t *testing.T) {
	run := func(lag int) *group {
		// 8 inner steps: the test engine's phase 0 touches every parameter
		// (one in 8 per step), so the step before the rebase matters.
		g := newGroup(t, groupConfig{k: 2, inner: 8, lag: lag, maxOuter: 2, codec: collective.CodecFP32})
		g.run(t)
		return g
	}
	g0, g1 := run(0), run(1)
	if g0.members[0].hashes[1] != g1.members[0].hashes[1] {
		t.Fatalf("step 1: lag 1 %q, lag 0 %q", g1.members[0].hashes[1], g0.members[0].hashes[1])
	}
	if g0.members[0].hashes[2] == g1.members[0].hashes[2] {
		t.Fatal("step 2 of lag 1 equals lag 0's: no overlap happened")
	}
	if maxDiff(g1.members[0].ends[1], g0.members[0].ends[1]) == 0 {
		t.Fatal("lag 1 trained phase 1 exactly as lag 0 did")
	}
}

// TestLoopCancel: cancelling ctx (here once member 0 committed step 1) ends
// every loop with ctx's error and joins the worker.
func TestLoopCancel(t *testing.T) {
	g := newGroup(t, groupConfig{k: 2, inner: 2, lag: -1, codec: collective.CodecInt8})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.members[0].committed = func(Commit) { cancel() }
	errs := make(chan error, 2)
	for _, m := range g.members {
		go func() { errs <- m.l.Run(ctx) }()
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("loop ended with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("loop did not end after cancel")
		}
	}
}

// TestLoopCommits pins what a commit says: the new step and its hash, the
// tokens of the phase reduced (H steps of the engine's 16), the steps and
// their mean loss, the attempt; Eval only when Config.Eval is set.
func TestLoopCommits(t *testing.T) {
	g := newGroup(t, groupConfig{k: 2, inner: 3, lag: 0, maxOuter: 2, codec: collective.CodecInt8})
	g.members[1].l.cfg.Eval = false
	g.run(t)
	for i, m := range g.members {
		if len(m.commits) != 2 {
			t.Fatalf("member %d: %d commits", i, len(m.commits))
		}
		for k, c := range m.commits {
			if c.Step != uint64(k+1) || c.Hash != m.hashes[c.Step] || c.Tokens != 3*16 || c.Steps != 3 || c.Loss != 1 ||
				c.Attempts != 1 || len(c.Ring.Members) != 2 || c.Start.IsZero() {
				t.Fatalf("member %d commit %d: %+v", i, k, c)
			}
			if (c.Eval > 0) != (i == 0) {
				t.Fatalf("member %d commit %d: eval %v", i, k, c.Eval)
			}
		}
	}
	if g.members[0].eng.evals != 2 || g.members[1].eng.evals != 0 {
		t.Fatalf("evaluations %d and %d, want 2 and 0", g.members[0].eng.evals, g.members[1].eng.evals)
	}
}

// TestLoopFetchZeroesResidual: a member that fetches the model starts its
// error-feedback residual and its worker momentum at zero: they were this
// member's on another model.
func TestLoopFetchZeroesResidual(t *testing.T) {
	g := newGroup(t, groupConfig{k: 2, inner: 2, lag: 0, maxOuter: 3, codec: collective.CodecInt8, feedback: true, wmu: 0.5})
	m1 := g.members[1].l
	if err := m1.SetResidual(make([]float32, 3)); !errors.Is(err, ErrModelSize) {
		t.Fatalf("a short residual: %v", err)
	}
	if err := m1.SetWorkerMomentum(make([]float32, 3)); !errors.Is(err, ErrModelSize) {
		t.Fatalf("a short worker momentum: %v", err)
	}
	if err := m1.SetResidual(testVec(5, testParams, 1)); err != nil || m1.Residual()[0] == 0 {
		t.Fatalf("SetResidual: %v", err)
	}
	var atFetch, momAtFetch []float32
	g.f.onReady = func(rank int, step uint64) {
		if rank == 1 && step == 1 {
			atFetch, momAtFetch = slices.Clone(m1.Residual()), slices.Clone(m1.WorkerMomentum())
			g.f.tellFetch(1, 2)
		}
	}
	var afterFetch, momAfterFetch []float32
	g.f.onSynced = func(rank int) {
		afterFetch, momAfterFetch = slices.Clone(m1.Residual()), slices.Clone(m1.WorkerMomentum())
	}
	for i, err := range g.run(t) {
		if !errors.Is(err, ErrDone) {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	zero := make([]float32, testParams)
	if atFetch == nil || slices.Equal(atFetch, zero) || slices.Equal(momAtFetch, zero) {
		t.Fatal("the residual or the momentum was zero before the fetch: nothing to check")
	}
	if !slices.Equal(afterFetch, zero) || !slices.Equal(momAfterFetch, zero) {
		t.Fatal("the residual or the worker momentum survived the fetch")
	}
	if h := g.members[1].hashes[3]; h == "" || h != g.members[0].hashes[3] {
		t.Fatalf("member 1 did not rejoin: %q vs %q", h, g.members[0].hashes[3])
	}
	if r := g.members[0].l.Residual(); slices.Equal(r, make([]float32, testParams)) {
		t.Fatal("member 0 carries no residual")
	}
}

// TestConfigValidate pins Config's defaults and limits.
func TestConfigValidate(t *testing.T) {
	c := Config{Inner: 4}
	if err := c.Validate(); err != nil || c.Tick != 100*time.Millisecond || c.Drain != DefaultDrain || c.Logger == nil {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, bad := range []Config{{}, {Inner: 2, Lag: 3}, {Inner: 2, Tick: -1}, {Inner: 2, WorkerMomentum: 1}, {Inner: 2, WorkerMomentum: -0.1}} {
		if err := bad.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	e := newTestEngine(10, 1, 1, 0)
	if _, err := New(Config{Inner: 1}, e, NewModel(0, make([]float32, 11), NewOuter(11, 1, 0)), nil, nil, nil); !errors.Is(err, ErrModelSize) {
		t.Fatalf("an engine of another size: %v", err)
	}
}

// TestLoopCloses: a step that closes while a member trains ends its phase
// at the next inner-step boundary, and the member is Ready with the inner
// steps it finished (its weight); members stay bit-identical. The close
// comes from the port's clock (Port.Closed) or from the mesh
// (Event.Close, read by the reduce worker), blocking and overlapped (the
// average applied after 2 inner steps, before the close).
func TestLoopCloses(t *testing.T) {
	for _, lag := range []int{0, 2} {
		for _, byEvent := range []bool{false, true} {
			t.Run(fmt.Sprintf("lag%d-event%v", lag, byEvent), func(t *testing.T) {
				const inner, want = 6, 3
				g := newGroup(t, groupConfig{k: 3, inner: inner, lag: lag, maxOuter: 4, codec: collective.CodecInt8})
				slow := g.members[2]
				if byEvent {
					slow.innerDone = func(n int) {
						if n != want {
							return
						}
						step := slow.l.model.step
						g.f.events[2] <- Event{Close: &mesh.Close{Step: step}}
						for slow.l.closed.Load() != step+1 {
							runtime.Gosched() // the worker reads it
						}
					}
				} else {
					g.f.closed = func(rank int, _ uint64, n int) bool { return rank == 2 && n >= want }
				}
				for i, err := range g.run(t) {
					if !errors.Is(err, ErrDone) {
						t.Fatalf("member %d ended with %v, want ErrDone", i, err)
					}
				}
				for s := uint64(1); s <= 4; s++ {
					for i, m := range g.members {
						if m.hashes[s] != g.members[0].hashes[s] {
							t.Fatalf("step %d: member %d has hash %q, member 0 %q", s, i, m.hashes[s], g.members[0].hashes[s])
						}
					}
				}
				for s := range uint64(4) {
					if got := g.f.ready[s]; got[0] != inner || got[1] != inner || got[2] != want {
						t.Errorf("step %d: Ready with %v inner steps, want %d, %d and %d", s, got, inner, inner, want)
					}
				}
			})
		}
	}
}

// TestLoopFetchMidPhase: a fetch the mesh asks for while a member trains
// its phase is taken up at the next inner step boundary, not at the
// phase's end: the fetched model replaces the phase's work anyway (a
// joiner training the initial model took its fetch up a phase late and
// found the donors a step further on, again and again).
func TestLoopFetchMidPhase(t *testing.T) {
	const inner = 8
	g := newGroup(t, groupConfig{k: 2, inner: inner, lag: 0, maxOuter: 2, codec: collective.CodecInt8})
	m1 := g.members[1]
	var mu sync.Mutex
	trained, synced := 0, false
	m1.innerDone = func(n int) {
		mu.Lock()
		defer mu.Unlock()
		if synced {
			return
		}
		trained++
		if trained == 2 { // the mesh leaves it out of step 0 and asks for step 1
			g.f.tellFetch(1, 1)
		}
	}
	g.f.onSynced = func(rank int) {
		mu.Lock()
		defer mu.Unlock()
		synced = synced || rank == 1
	}
	errs := g.run(t)
	if !errors.Is(errs[1], ErrDone) || g.f.fetches[1] != 1 {
		t.Fatalf("member 1: %v after %d fetches", errs[1], g.f.fetches[1])
	}
	if trained > 4 {
		t.Fatalf("member 1 ran %d inner steps of the phase it was asked to fetch in at its 2nd, want ≤ 4", trained)
	}
}
