package node

import (
	"context"
	"fmt"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
)

// Overlapped DiLoCo (Config.Overlap). The global models G_t are the same as
// in the blocking loop's bookkeeping — identical bits on every member — but
// each is applied one outer step late, so the all-reduce never stalls the
// inner steps:
//
//	phase t: H inner steps from the local start S_t, ending at E_t;  Δ_t = S_t − E_t
//	         (meanwhile the all-reduce of Δ_{t−1} runs in the background)
//	end of phase t: wait for Δ̄_{t−1};  G_t = outer(G_{t−1}, Δ̄_{t−1})  (v_{t−1} → v_t)
//	         start the all-reduce of Δ_t in the background
//	         S_{t+1} = G_t − lr·(Δ_t + μ·(μ·v_t + Δ_t))
//
// S_{t+1} is the outer step this node would take if the average equalled its
// own progress ("eager updates", Kale et al. 2025): the best local estimate
// of G_{t+1}. A plain rebase to G_t − Δ_t ignores the outer learning rate and
// momentum, and measured 4 % worse at equal tokens (docs/convergence.md).
// Every member's local model stays within one phase of the global one; the
// model hash, eval loss and checkpoints are those of G.

// background is an all-reduce running while the next inner steps do.
type background struct {
	t        uint64
	done     chan struct{}
	res      reduceResult
	fetch    *meshEvent
	err      error
	attempts int
	start    time.Time
	took     time.Duration
}

// overlapBuffers are the extra vectors of the overlapped loop.
type overlapBuffers struct {
	start []float32 // S: where the current phase's inner steps began
	bg    []float32 // Δ being reduced in the background
	stash []float32 // the local model while G is evaluated
}

func (n *Node) overlapLoop(ctx context.Context) error {
	nparams := len(n.theta0)
	buf := overlapBuffers{start: make([]float32, nparams), bg: make([]float32, nparams), stash: make([]float32, nparams)}
	copy(buf.start, n.engine.Params())
	var bg *background
	ot := outerTimes{start: time.Now()}
	phaseStart := time.Now()
	defer func() {
		if bg != nil {
			<-bg.done
		}
	}()
	for {
		if bg == nil {
			if n.reachedMax(ctx) {
				return errLeft
			}
			if ev, ok := n.pollEvent(); ok && ev.fetch != nil {
				if err := n.fetch(ctx, ev.fetch, ev.adopt); err != nil {
					return err
				}
				copy(buf.start, n.engine.Params())
				ot = outerTimes{start: time.Now()}
				continue
			}
		}
		inner, err := n.innerSteps(ctx, &ot)
		if err != nil {
			return err
		}
		params := n.engine.Params()
		for i := range n.delta {
			n.delta[i] = buf.start[i] - params[i] // Δ_t: this phase's progress
		}
		if bg != nil {
			select {
			case <-bg.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			if bg.err != nil {
				return bg.err
			}
			if bg.fetch != nil {
				// Left out, or on the losing side: take the network's model and
				// drop this node's unreduced progress.
				f := bg.fetch
				bg = nil
				if err := n.fetch(ctx, f.fetch, f.adopt); err != nil {
					return err
				}
				copy(buf.start, n.engine.Params())
				ot = outerTimes{start: time.Now()}
				continue
			}
			if err := n.applyBackground(bg, &ot, buf.stash); err != nil {
				return err
			}
			bg = nil
			if n.cfg.MaxOuterSteps > 0 && n.step >= n.cfg.MaxOuterSteps {
				continue // leaves at the top of the loop
			}
		}
		// Waiting for a slower member costs no compute here, and a faster
		// member is Ready a whole phase before it: wait up to 1.5 phases.
		phase := time.Since(phaseStart)
		phaseStart = time.Now()
		ticks := max(mesh.DefaultStragglerTicks, int(1.5*float64(phase)/float64(n.cfg.Tick)))
		n.mesh(func(m *mesh.Mesh) { m.SetStragglerTicks(ticks) })
		bg = n.startBackground(ctx, n.step, inner, buf.bg)
		n.outer.Eager(params, n.theta0, n.delta)
		if err := n.engine.SetParams(params); err != nil {
			return err
		}
		copy(buf.start, params)
	}
}

// startBackground copies Δ_t (n.delta) into buf, tells the mesh this node is
// ready for step t, and reduces in a goroutine of its own. That goroutine is
// the only reader of n.events until done is closed, and uses only buf,
// n.work and n.residual.
func (n *Node) startBackground(ctx context.Context, t uint64, inner int, buf []float32) *background {
	copy(buf, n.delta)
	bg := &background{t: t, done: make(chan struct{}), start: time.Now()}
	n.mesh(func(m *mesh.Mesh) { m.SetReady(t, inner) })
	go func() {
		defer close(bg.done)
		bg.res, bg.fetch, bg.err = n.reduce(ctx, t, buf, &bg.attempts)
		bg.took = time.Since(bg.start)
	}()
	return bg
}

// applyBackground turns a finished background all-reduce of step t into
// G_{t+1}, evaluates it, and records the outer step. The engine's local
// parameters are left as they were.
func (n *Node) applyBackground(bg *background, ot *outerTimes, stash []float32) error {
	n.setModel(bg.t+1, func() { n.outer.Apply(n.theta0, n.theta0, n.work) })
	evalStart := time.Now()
	copy(stash, n.engine.Params())
	if err := n.engine.SetParams(n.theta0); err != nil {
		return err
	}
	eval, err := n.engine.Eval()
	if err != nil {
		return fmt.Errorf("node: eval: %w", err)
	}
	if err := n.engine.SetParams(stash); err != nil {
		return err
	}
	ot.compute += time.Since(evalStart)
	ot.attempts = bg.attempts
	n.commitOuter(bg.t, *ot, bg.res, bg.took, eval)
	*ot = outerTimes{start: time.Now()}
	return nil
}
