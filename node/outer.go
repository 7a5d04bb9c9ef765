package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/train"
)

// The DiLoCo outer loop of one node. Phase t trains H inner steps from
// where phase t−1 ended (E_{t−1}, or the global model G_t), then:
//
//	Δ_t = G_t − E_t            this member's pseudo-gradient (delta)
//	Δ̄_t = weighted mean of the members' Δ_t, over the ring (avg)
//	G_{t+1} = outer(G_t, Δ̄_t)  the outer optimizer (model.advance)
//
// Δ̄_t is applied lag inner steps into phase t+1. With lag 0 (blocking) the
// engine then restarts from G_{t+1} exactly. With lag > 0 (--overlap-steps),
// or lag < 0 (--overlap: the first inner step at which the average has
// arrived), the all-reduce runs while those steps do, and the local model is
// rebased onto the new global one: θ ← θ + (G_{t+1} − E_t) (train.Rebase), so
// it keeps the progress it made since E_t (Streaming DiLoCo's overlap,
// Douillard et al. 2025). The model hash, eval loss and checkpoints are G's.

// loopConfig is what the outer loop needs of Config.
type loopConfig struct {
	inner    int    // H
	lag      int    // 0 blocking; > 0 fixed; < 0 the first step the average is in
	maxOuter uint64 // 0: no limit
	tick     time.Duration
	drain    time.Duration // longest wait for the last ring at maxOuter
}

// outerTimes accumulates the timing of one outer step.
type outerTimes struct {
	start    time.Time
	compute  time.Duration
	loss     float64
	losses   int
	attempts int
}

func newTimes() outerTimes { return outerTimes{start: time.Now()} }

// loopHooks are what the loop reports to the rest of the node.
type loopHooks interface {
	// innerDone is called after each inner step (1-based within the phase).
	innerDone(inner int, st train.StepStats)
	// committed is called once G of step t+1 is this node's model.
	committed(t uint64, ot outerTimes, out outcome, eval float64)
	// fetch replaces the model by the one the mesh names (sync.go).
	fetch(ctx context.Context, ev meshEvent) error
}

// outerLoop owns the engine during the run, the global model, Δ, Δ̄, the
// error-feedback residuals and E; it sees the ring through reduce and the
// mesh through port.
type outerLoop struct {
	cfg    loopConfig
	engine train.Engine
	model  *globalModel
	reduce reducer
	port   meshPort
	hooks  loopHooks
	log    *slog.Logger

	delta []float32    // Δ_t, kept as is through retries
	avg   []float32    // Δ̄_t
	res   [2][]float32 // error feedback: the residual carried in, and the next
	end   []float32    // E_t, the base of the pending rebase (lag ≠ 0)
	stash []float32    // the local model while G is evaluated (lag ≠ 0)
}

// newOuterLoop allocates the loop's vectors for a model of n parameters.
func newOuterLoop(cfg loopConfig, e train.Engine, g *globalModel, r reducer, p meshPort, h loopHooks, feedback bool, log *slog.Logger) *outerLoop {
	n := len(g.theta0)
	l := &outerLoop{cfg: cfg, engine: e, model: g, reduce: r, port: p, hooks: h, log: log,
		delta: make([]float32, n), avg: make([]float32, n)}
	if feedback {
		l.res = [2][]float32{make([]float32, n), make([]float32, n)}
	}
	if cfg.lag != 0 {
		l.end, l.stash = make([]float32, n), make([]float32, n)
	}
	return l
}

// run trains outer steps until ctx ends (ctx.Err()) or maxOuter is reached
// (errLeft). The reduce worker it starts is joined before it returns.
func (l *outerLoop) run(ctx context.Context) error {
	w := startWorker(ctx, l)
	defer w.stop()
	var p *pending
	ot := newTimes()
	phaseStart := time.Now()
	for {
		if p == nil {
			if l.reachedMax(ctx) {
				return errLeft
			}
			if ev := w.pollFetch(); ev != nil {
				if err := l.hooks.fetch(ctx, *ev); err != nil {
					return err
				}
				ot = newTimes()
				continue
			}
		}
		inner, fetch, err := l.phase(ctx, &ot, &p)
		if err == nil && fetch == nil && !l.done() {
			p = l.startReduce(w, inner, &phaseStart)
			if l.cfg.lag == 0 {
				fetch, err = l.apply(ctx, &ot, p, false)
				p = nil
			}
		}
		if err != nil {
			return err
		}
		if fetch != nil {
			// Left out, or on the losing side: the network's model replaces
			// this node's unreduced progress.
			if err := l.hooks.fetch(ctx, *fetch); err != nil {
				return err
			}
			ot, p = newTimes(), nil
		}
	}
}

// done reports whether maxOuter is reached.
func (l *outerLoop) done() bool { return l.cfg.maxOuter > 0 && l.model.step >= l.cfg.maxOuter }

// phase runs the H inner steps of one phase and applies *p (the pending
// average) at its lag, or at the phase's end. It returns the inner steps run
// and the fetch the pending all-reduce asked for instead, if it did (the
// phase is then cut short). Reaching maxOuter also cuts it short.
func (l *outerLoop) phase(ctx context.Context, ot *outerTimes, p **pending) (int, *meshEvent, error) {
	inner := 0
	for inner < l.cfg.inner {
		if err := l.innerStep(ctx, ot, inner+1); err != nil {
			return inner, nil, err
		}
		inner++
		if *p == nil || !l.applyNow(*p, inner) {
			continue
		}
		fetch, err := l.apply(ctx, ot, *p, true)
		*p = nil
		if err != nil || fetch != nil || l.done() {
			return inner, fetch, err
		}
	}
	if *p != nil {
		fetch, err := l.apply(ctx, ot, *p, true)
		*p = nil
		return inner, fetch, err
	}
	return inner, nil, nil
}

// innerStep runs inner step number inner (1-based) of the phase.
func (l *outerLoop) innerStep(ctx context.Context, ot *outerTimes, inner int) error {
	st, err := l.engine.Step()
	if err != nil {
		return fmt.Errorf("node: inner step: %w", err)
	}
	ot.compute += st.Compute
	ot.loss += st.Loss
	ot.losses++
	l.hooks.innerDone(inner, st)
	return ctx.Err()
}

// applyNow reports whether the pending average is to be applied after the
// inner-th step of the phase.
func (l *outerLoop) applyNow(p *pending, inner int) bool {
	if l.cfg.lag > 0 {
		return inner == l.cfg.lag
	}
	return p.arrived()
}

// startReduce computes Δ_t from the local model, tells the mesh this member
// is Ready and hands the all-reduce to the worker.
func (l *outerLoop) startReduce(w *worker, inner int, phaseStart *time.Time) *pending {
	params := l.engine.Params()
	theta0 := l.model.theta0
	if l.end != nil { // one pass for Δ_t and E_t
		end := l.end[:len(l.delta)]
		for i, p := range params[:len(l.delta)] {
			l.delta[i], end[i] = theta0[i]-p, p
		}
	} else {
		for i := range l.delta {
			l.delta[i] = theta0[i] - params[i]
		}
	}
	if l.cfg.lag != 0 {
		// Waiting for a slower member costs no compute here, and a faster
		// member is Ready up to a phase before it: wait up to 1.5 phases.
		phase := time.Since(*phaseStart)
		*phaseStart = time.Now()
		l.port.SetStragglerTicks(max(mesh.DefaultStragglerTicks, int(1.5*float64(phase)/float64(l.cfg.tick))))
	}
	return w.start(l.model.step, inner)
}

// apply waits for p, makes its average G_{t+1}, evaluates G and puts the
// engine on it: exactly (restart, lag 0) or rebased (inner steps ran since
// E_t). It returns the fetch p asked for instead, if it did.
func (l *outerLoop) apply(ctx context.Context, ot *outerTimes, p *pending, rebase bool) (*meshEvent, error) {
	out, err := p.wait(ctx)
	if err != nil || out.fetch != nil {
		return out.fetch, err
	}
	l.model.advance(out.step, l.avg)
	var eval float64
	if rebase {
		eval, err = l.evalRebased(ot)
	} else {
		eval, err = l.evalRestart(ot)
	}
	if err != nil {
		return nil, err
	}
	ot.attempts = out.attempts
	l.port.Completed(out.step, l.model.hash)
	l.hooks.committed(out.step, *ot, out, eval)
	*ot = newTimes()
	return nil, nil
}

// evalRestart puts the engine on G and evaluates it (blocking mode).
func (l *outerLoop) evalRestart(ot *outerTimes) (float64, error) {
	if err := l.engine.SetParams(l.model.theta0); err != nil {
		return 0, err
	}
	return l.eval(ot)
}

// evalRebased evaluates G with the local model set aside, then rebases the
// local model onto G.
func (l *outerLoop) evalRebased(ot *outerTimes) (float64, error) {
	rebaseInto(l.stash, l.engine.Params(), l.end, l.model.theta0)
	if err := l.engine.SetParams(l.model.theta0); err != nil {
		return 0, err
	}
	eval, err := l.eval(ot)
	if err != nil {
		return 0, err
	}
	return eval, l.engine.SetParams(l.stash)
}

// rebaseInto writes params moved from one base to another, dst = params +
// (to − from): train.Rebase's arithmetic, bit for bit, in one pass that also
// sets the local model aside.
func rebaseInto(dst, params, from, to []float32) {
	params, from, to = params[:len(dst)], from[:len(dst)], to[:len(dst)]
	for i := range dst {
		dst[i] = params[i] + (to[i] - from[i])
	}
}

func (l *outerLoop) eval(ot *outerTimes) (float64, error) {
	start := time.Now()
	eval, err := l.engine.Eval()
	if err != nil {
		return 0, fmt.Errorf("node: eval: %w", err)
	}
	ot.compute += time.Since(start)
	return eval, nil
}

// drainTimeout bounds how long a node that reached maxOuter waits for the
// other members of its last ring before it leaves.
const drainTimeout = 10 * time.Second

// reachedMax reports whether maxOuter is reached. If so, it first drains:
// it waits until every other member of the last ring is seen at this node's
// step or gone, and no peer is fetching a model (or drainTimeout passes). A member whose all-reduce returned
// has written all its bytes, but they may still be on their way to a slower
// neighbour; leaving at once would cut them off.
func (l *outerLoop) reachedMax(ctx context.Context) bool {
	if !l.done() {
		return false
	}
	l.log.Info("reached --max-outer-steps", "outer_step", l.model.step)
	tick := time.NewTicker(l.cfg.tick)
	defer tick.Stop()
	deadline := time.After(l.cfg.drain)
	for !l.port.CaughtUp(ctx) && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-deadline:
			l.log.Warn("leaving before every member of the last ring was seen at this step, or while a peer still fetches the model")
			return true
		case <-ctx.Done():
		}
	}
	return true
}
