package node

import (
	"sync"

	"github.com/intellect-node/intellect-node/train"
)

// globalModel is the global model of the current outer step, identical bits
// on every member: θ₀, the outer optimizer (its momentum v), the step and
// θ₀'s hash. The training goroutine is its only writer and changes it under
// Lock (set); donors encoding a snapshot read it under RLock, so they see a
// step's θ₀, v and hash together or not at all.
type globalModel struct {
	mu     sync.RWMutex
	theta0 []float32
	outer  *train.Outer
	step   uint64 // the outer step being trained
	hash   string // train.Hash(theta0)
}

// set runs update, which changes θ₀ and v, and makes the result the global
// model of step, with its hash.
func (g *globalModel) set(step uint64, update func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	update()
	g.step = step
	g.hash = train.Hash(g.theta0)
}

// advance applies the averaged pseudo-gradient avg of step t with the outer
// optimizer: θ₀ becomes the global model of step t+1.
func (g *globalModel) advance(t uint64, avg []float32) {
	g.set(t+1, func() { g.outer.Apply(g.theta0, g.theta0, avg) })
}
