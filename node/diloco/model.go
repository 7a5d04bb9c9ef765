package diloco

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"

	"github.com/intellect-node/intellect-node/train"
)

// Model is the global model of the current outer step, identical bits on
// every member: θ₀, the outer optimizer (its momentum v), the step and θ₀'s
// hash. One goroutine (the loop's, once it runs) changes it, under its
// lock; others read it with Read, so they see a step's θ₀, v and hash
// together or not at all.
type Model struct {
	mu     sync.RWMutex
	theta0 []float32
	outer  *Outer
	step   uint64 // the outer step being trained
	hash   string // train.Hash(theta0)
}

// ErrModelSize is wrapped by Set when θ₀ and v differ in length from the
// model's.
var ErrModelSize = errors.New("diloco: model size mismatch")

// NewModel returns the global model θ₀ of step with outer optimizer o (its
// V as long as θ₀). It takes ownership of theta0.
func NewModel(step uint64, theta0 []float32, o *Outer) *Model {
	return &Model{theta0: theta0, outer: o, step: step, hash: train.Hash(theta0)}
}

// Step returns the outer step being trained.
func (m *Model) Step() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.step
}

// Hash returns θ₀'s hash.
func (m *Model) Hash() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.hash
}

// Len returns the number of parameters.
func (m *Model) Len() int { return len(m.theta0) }

// Outer returns the outer optimizer (its LR and Momentum are fixed; V
// changes with the model: read it with Read).
func (m *Model) Outer() *Outer { return m.outer }

// Read calls f with the model under the read lock. f must not keep the
// slices, nor change the model.
func (m *Model) Read(f func(step uint64, hash string, theta0, momentum []float32)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	f(m.step, m.hash, m.theta0, m.outer.V)
}

// Set makes (theta0, momentum) the global model of step, taking ownership
// of both slices (a fetched model).
func (m *Model) Set(step uint64, theta0, momentum []float32) error {
	if len(theta0) != len(m.theta0) || len(momentum) != len(m.theta0) {
		return fmt.Errorf("%w: θ₀ of %d and v of %d values, the model has %d", ErrModelSize, len(theta0), len(momentum), len(m.theta0))
	}
	m.set(step, func() { m.theta0, m.outer.V = theta0, momentum })
	return nil
}

// Advance applies the averaged pseudo-gradient avg of step t with the outer
// optimizer: θ₀ becomes the global model of step t+1.
func (m *Model) Advance(t uint64, avg []float32) {
	m.set(t+1, func() { m.outer.Apply(m.theta0, m.theta0, avg) })
}

// set runs update, which changes θ₀ and v, and makes the result the global
// model of step, with its hash.
func (m *Model) set(step uint64, update func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	update()
	m.step = step
	// A CPU profile of the node counts the hashing apart (p2p.PartLabel).
	pprof.Do(context.Background(), pprof.Labels("part", "hashing"), func(context.Context) {
		m.hash = train.Hash(m.theta0)
	})
}

// Outer is the outer optimizer: SGD with Nesterov momentum on the averaged
// pseudo-gradient (lr 1 and momentum 0 is plain averaging). All math is
// element-wise float32 in a fixed order, so every member computes the same
// bits from the same inputs.
type Outer struct {
	LR, Momentum float32   // outer learning rate (DiLoCo: 0.7) and momentum μ (0.9)
	V            []float32 // momentum buffer, one per parameter
}

// NewOuter returns an outer optimizer for n parameters with zero momentum.
func NewOuter(n int, lr, momentum float32) *Outer {
	return &Outer{LR: lr, Momentum: momentum, V: make([]float32, n)}
}

// Apply performs v ← μ·v + Δ̄ ; θ ← θ₀ − lr·(Δ̄ + μ·v), writing theta. All
// slices have len(o.V) elements; theta may alias theta0.
func (o *Outer) Apply(theta, theta0, avgDelta []float32) {
	n := len(o.V)
	theta, theta0, avgDelta = theta[:n], theta0[:n], avgDelta[:n]
	mu, lr := o.Momentum, o.LR
	for i := range o.V {
		d := avgDelta[i]
		// The float32() conversions forbid fused multiply-add (Go spec), which
		// some platforms and GOAMD64 levels would otherwise use.
		v := float32(mu*o.V[i]) + d
		o.V[i] = v
		step := d + float32(mu*v)
		theta[i] = theta0[i] - float32(lr*step)
	}
}

// Rebase writes params moved from one global model onto another, keeping
// the progress made since: dst = params + (to − from), element-wise
// float32, the same on every machine (dst may alias params).
func Rebase(dst, params, from, to []float32) {
	params, from, to = params[:len(dst)], from[:len(dst)], to[:len(dst)]
	for i := range dst {
		dst[i] = params[i] + (to[i] - from[i])
	}
}
