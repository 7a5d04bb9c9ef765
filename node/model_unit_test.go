package node

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/intellect-node/intellect-node/train"
)

// unitVec returns n deterministic values in [-scale, scale).
func unitVec(seed uint64, n int, scale float32) []float32 {
	rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * (2*rng.Float32() - 1)
	}
	return v
}

// unitModel returns a global model of n parameters at step 0.
func unitModel(n int, lr, mu float32) *globalModel {
	g := &globalModel{theta0: unitVec(1, n, 1), outer: train.NewOuter(n, lr, mu)}
	g.set(0, func() {})
	return g
}

// TestGlobalModelSet pins set: the update runs, then step and hash change
// together, the hash being θ₀'s.
func TestGlobalModelSet(t *testing.T) {
	g := unitModel(1000, 1, 0)
	if g.step != 0 || g.hash != train.Hash(g.theta0) {
		t.Fatalf("initial step %d hash %s", g.step, g.hash)
	}
	h0 := g.hash
	ran := false
	g.set(7, func() { ran = true; g.theta0[3] += 1 })
	if !ran || g.step != 7 || g.hash != train.Hash(g.theta0) || g.hash == h0 {
		t.Fatalf("after set: ran %v step %d hash %s (θ₀'s %s, before %s)", ran, g.step, g.hash, train.Hash(g.theta0), h0)
	}
	newTheta := unitVec(2, 1000, 1)
	newV := unitVec(3, 1000, 0.1)
	g.set(12, func() { g.theta0, g.outer.V = newTheta, newV }) // as a fetch does
	if g.step != 12 || g.hash != train.Hash(newTheta) || !slices.Equal(g.outer.V, newV) {
		t.Fatalf("after a fetch: step %d hash %s", g.step, g.hash)
	}
	g.set(12, func() {}) // nothing changed: same hash
	if g.hash != train.Hash(newTheta) {
		t.Fatal("set without a change moved the hash")
	}
}

// TestGlobalModelSetHoldsLock pins that set runs its update under the write
// lock: no reader holds the read lock meanwhile.
func TestGlobalModelSetHoldsLock(t *testing.T) {
	g := unitModel(10, 1, 0)
	g.set(1, func() {
		if g.mu.TryRLock() {
			g.mu.RUnlock()
			t.Error("a reader got the lock during set's update")
		}
	})
	if !g.mu.TryLock() {
		t.Fatal("set left the lock held")
	}
	g.mu.Unlock()
}

// TestGlobalModelAdvanceIsOuterApply pins advance against train.Outer.Apply
// on copies, for several learning rates and momenta over several steps:
// θ₀, v and the hash bit for bit, and the step becomes t+1.
func TestGlobalModelAdvanceIsOuterApply(t *testing.T) {
	for _, c := range []struct{ lr, mu float32 }{{1, 0}, {0.7, 0.9}, {0.5, 0.5}, {2, 0.1}} {
		const n = 777
		g := unitModel(n, c.lr, c.mu)
		refTheta := slices.Clone(g.theta0)
		ref := train.NewOuter(n, c.lr, c.mu)
		for step := uint64(0); step < 5; step++ {
			avg := unitVec(100+step, n, 0.01)
			avgCopy := slices.Clone(avg)
			g.advance(step, avg)
			ref.Apply(refTheta, refTheta, avgCopy)
			if g.step != step+1 {
				t.Fatalf("lr %v mu %v: step %d after advance(%d)", c.lr, c.mu, g.step, step)
			}
			if !slices.Equal(g.theta0, refTheta) || !slices.Equal(g.outer.V, ref.V) {
				t.Fatalf("lr %v mu %v step %d: θ₀ or v differ from Outer.Apply", c.lr, c.mu, step)
			}
			if g.hash != train.Hash(refTheta) {
				t.Fatalf("lr %v mu %v step %d: hash is not θ₀'s", c.lr, c.mu, step)
			}
			if !slices.Equal(avg, avgCopy) {
				t.Fatal("advance changed the average it was given")
			}
		}
	}
}

// TestGlobalModelAdvancePlainAverage pins the default outer optimizer (lr 1,
// no momentum): G_{t+1} = G_t − Δ̄, exactly in float32.
func TestGlobalModelAdvancePlainAverage(t *testing.T) {
	g := unitModel(64, DefaultOuterLR, DefaultOuterMomentum)
	before := slices.Clone(g.theta0)
	avg := unitVec(9, 64, 0.05)
	g.advance(3, avg)
	for i := range before {
		if want := before[i] - avg[i]; g.theta0[i] != want {
			t.Fatalf("θ₀[%d] = %v, want %v", i, g.theta0[i], want)
		}
	}
	if g.step != 4 {
		t.Fatalf("step %d, want 4", g.step)
	}
}

// TestGlobalModelConsistentReaders pins the donors' view: readers under
// RLock, while the training goroutine advances, always see a step whose hash
// is θ₀'s, and steps that never go back (run with -race).
func TestGlobalModelConsistentReaders(t *testing.T) {
	const n, steps, readers = 2048, 150, 4
	g := unitModel(n, 0.7, 0.9)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			var last uint64
			for done := false; !done; {
				done = stop.Load() // at least one read after the writer is done
				g.mu.RLock()
				step, hash, got := g.step, g.hash, train.Hash(g.theta0)
				lenV := len(g.outer.V)
				g.mu.RUnlock()
				if hash != got || lenV != n {
					t.Errorf("step %d: hash %s but θ₀ hashes to %s", step, hash, got)
					return
				}
				if step < last {
					t.Errorf("step went back from %d to %d", last, step)
					return
				}
				last = step
			}
		})
	}
	for s := range uint64(steps) {
		g.advance(s, unitVec(s, n, 0.01))
	}
	stop.Store(true)
	wg.Wait()
	if g.step != steps {
		t.Fatalf("step %d, want %d", g.step, steps)
	}
}
