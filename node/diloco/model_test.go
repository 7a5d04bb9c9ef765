package diloco

import (
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/intellect-node/intellect-node/train"
)

// testModel returns a global model of n parameters at step 0.
func testModel(n int, lr, mu float32) *Model {
	return NewModel(0, testVec(1, n, 1), NewOuter(n, lr, mu))
}

// TestModelSet pins Set, a fetched model's arrival: θ₀, v, step and hash
// change together; another size is refused and changes nothing.
func TestModelSet(t *testing.T) {
	m := testModel(1000, 1, 0)
	if m.Step() != 0 || m.Hash() != train.Hash(m.theta0) {
		t.Fatalf("initial step %d hash %s", m.Step(), m.Hash())
	}
	theta, v := testVec(2, 1000, 1), testVec(3, 1000, 0.1)
	if err := m.Set(12, theta, v); err != nil {
		t.Fatal(err)
	}
	m.Read(func(step uint64, hash string, theta0, mom []float32) {
		if step != 12 || hash != train.Hash(theta) || !slices.Equal(theta0, theta) || !slices.Equal(mom, v) {
			t.Fatalf("after Set: step %d hash %s", step, hash)
		}
	})
	for _, bad := range [][2][]float32{{make([]float32, 999), v}, {theta, make([]float32, 1001)}} {
		if err := m.Set(13, bad[0], bad[1]); !errors.Is(err, ErrModelSize) || m.Step() != 12 {
			t.Fatalf("Set of %d and %d values: %v, step %d", len(bad[0]), len(bad[1]), err, m.Step())
		}
	}
}

// TestModelSetHoldsLock pins that set runs its update under the write lock:
// no reader holds the read lock meanwhile.
func TestModelSetHoldsLock(t *testing.T) {
	m := testModel(10, 1, 0)
	m.set(1, func() {
		if m.mu.TryRLock() {
			m.mu.RUnlock()
			t.Error("a reader got the lock during set's update")
		}
	})
	if !m.mu.TryLock() {
		t.Fatal("set left the lock held")
	}
	m.mu.Unlock()
}

// TestModelAdvance pins Advance against the outer step computed in float64
// (v ← μv + Δ̄; θ ← θ₀ − lr(Δ̄ + μv)) by relative error, over several steps
// and optimizers; the step becomes t+1, the hash is θ₀'s, avg is left as is.
func TestModelAdvance(t *testing.T) {
	for _, c := range []struct{ lr, mu float32 }{{1, 0}, {0.7, 0.9}, {0.5, 0.5}, {2, 0.1}} {
		const n = 777
		m := testModel(n, c.lr, c.mu)
		theta, v := make([]float64, n), make([]float64, n)
		for i, x := range m.theta0 {
			theta[i] = float64(x)
		}
		for step := uint64(0); step < 5; step++ {
			avg := testVec(100+step, n, 0.01)
			avgCopy := slices.Clone(avg)
			m.Advance(step, avg)
			for i := range theta {
				v[i] = float64(c.mu)*v[i] + float64(avg[i])
				theta[i] -= float64(c.lr) * (float64(avg[i]) + float64(c.mu)*v[i])
			}
			if m.Step() != step+1 || m.Hash() != train.Hash(m.theta0) || !slices.Equal(avg, avgCopy) {
				t.Fatalf("lr %v mu %v: step %d hash %s after Advance(%d)", c.lr, c.mu, m.Step(), m.Hash(), step)
			}
			if e := relErr(m.theta0, theta); e > 1e-6 {
				t.Fatalf("lr %v mu %v step %d: θ₀ off by %.2g", c.lr, c.mu, step, e)
			}
			if e := relErr(m.outer.V, v); e > 1e-6 {
				t.Fatalf("lr %v mu %v step %d: v off by %.2g", c.lr, c.mu, step, e)
			}
		}
	}
}

// relErr is ‖got − want‖ / ‖want‖.
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range got {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

// TestModelAdvancePlainAverage pins plain averaging (lr 1, no momentum):
// G_{t+1} = G_t − Δ̄, exactly in float32.
func TestModelAdvancePlainAverage(t *testing.T) {
	m := testModel(64, 1, 0)
	before := slices.Clone(m.theta0)
	avg := testVec(9, 64, 0.05)
	m.Advance(3, avg)
	for i := range before {
		if want := before[i] - avg[i]; m.theta0[i] != want {
			t.Fatalf("θ₀[%d] = %v, want %v", i, m.theta0[i], want)
		}
	}
	if m.Step() != 4 {
		t.Fatalf("step %d, want 4", m.Step())
	}
}

// TestModelConsistentReaders pins the donors' view: readers, while the
// loop advances, always see a step whose hash is θ₀'s, and steps that never
// go back (run with -race).
func TestModelConsistentReaders(t *testing.T) {
	const n, steps, readers = 2048, 150, 4
	m := testModel(n, 0.7, 0.9)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			var last uint64
			for done := false; !done; {
				done = stop.Load() // at least one read after the writer is done
				var step uint64
				var hash, got string
				m.Read(func(s uint64, h string, theta0, v []float32) {
					step, hash, got = s, h, train.Hash(theta0)
					if len(v) != n {
						t.Errorf("v of %d values", len(v))
					}
				})
				if hash != got {
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
		m.Advance(s, testVec(s, n, 0.01))
	}
	stop.Store(true)
	wg.Wait()
	if m.Step() != steps {
		t.Fatalf("step %d, want %d", m.Step(), steps)
	}
}

// TestOuterNesterov pins two outer steps of SGD with Nesterov momentum.
func TestOuterNesterov(t *testing.T) {
	o := NewOuter(2, 0.5, 0.9)
	theta0 := []float32{1, -2}
	delta := []float32{0.2, -0.4}
	theta := make([]float32, 2)
	o.Apply(theta, theta0, delta)
	// v = Δ; θ = θ₀ − lr·(Δ + μ·Δ) = θ₀ − 0.5·1.9·Δ
	for i := range theta {
		w := theta0[i] - 0.5*float32(1.9)*delta[i]
		if math.Abs(float64(theta[i]-w)) > 1e-6 || o.V[i] != delta[i] {
			t.Fatalf("step 1: θ=%v v=%v", theta, o.V)
		}
	}
	o.Apply(theta, theta, delta) // v = 1.9Δ ; θ -= 0.5·(Δ + 0.9·1.9Δ)
	if math.Abs(float64(o.V[0]-1.9*0.2)) > 1e-6 {
		t.Fatalf("step 2: v=%v", o.V)
	}
}

// TestRebase pins Rebase against the float64 rebase by relative error, its
// float32 form bit for bit (params + (to − from): the same on every
// member), and writing in place.
func TestRebase(t *testing.T) {
	const n = 1000
	p, from, to := testVec(1, n, 1), testVec(2, n, 3), testVec(3, n, 1e-3)
	got := make([]float32, n)
	Rebase(got, p, from, to)
	want := make([]float64, n)
	for i := range n {
		want[i] = float64(p[i]) + (float64(to[i]) - float64(from[i]))
		if bits := p[i] + (to[i] - from[i]); got[i] != bits {
			t.Fatalf("[%d] = %v, want %v", i, got[i], bits)
		}
	}
	if e := relErr(got, want); e > 1e-6 {
		t.Fatalf("relative error %.2g", e)
	}
	Rebase(p, p, from, to)
	if !slices.Equal(p, got) {
		t.Fatal("in place differs")
	}
}
