package diloco

import (
	"context"
	"fmt"
	"time"
)

// times accumulates a member's work towards its next commit.
type times struct {
	start   time.Time
	compute time.Duration
	loss    float64
	steps   int
}

func newTimes() times { return times{start: time.Now()} }

// apply waits for p, makes its average G_{t+1}, evaluates G and puts the
// engine on it: exactly (restart, lag 0) or rebased (inner steps ran since
// E_t). It returns the fetch p asked for instead, if it did.
func (l *Loop) apply(ctx context.Context, ot *times, p *pending, rebase bool) (*Event, error) {
	out, err := p.wait(ctx)
	if err != nil || out.fetch != nil {
		return out.fetch, err
	}
	l.model.Advance(out.step, l.avg)
	var eval float64
	if rebase {
		eval, err = l.evalRebased(ot)
	} else {
		eval, err = l.evalRestart(ot)
	}
	if err != nil {
		return nil, err
	}
	hash := l.model.hash // this goroutine is the model's one writer
	l.port.Completed(out.step, hash)
	c := Commit{Step: out.step + 1, Hash: hash, Ring: out.ring, Stats: out.stats, Attempts: out.attempts, Took: out.took,
		Tokens: out.tokens, Start: ot.start, Compute: ot.compute, Steps: ot.steps, Eval: eval, Update: l.avg}
	if ot.steps > 0 {
		c.Loss = ot.loss / float64(ot.steps)
	}
	l.hooks.Committed(c)
	*ot = newTimes()
	return nil, nil
}

// evalRestart puts the engine on G and evaluates it (blocking mode).
func (l *Loop) evalRestart(ot *times) (float64, error) {
	if err := l.engine.SetParams(l.model.theta0); err != nil {
		return 0, err
	}
	return l.eval(ot)
}

// evalRebased evaluates G with the local model set aside, then rebases the
// local model onto G.
func (l *Loop) evalRebased(ot *times) (float64, error) {
	Rebase(l.stash, l.engine.Params(), l.end, l.model.theta0)
	if !l.cfg.Eval {
		return 0, l.engine.SetParams(l.stash)
	}
	if err := l.engine.SetParams(l.model.theta0); err != nil {
		return 0, err
	}
	eval, err := l.eval(ot)
	if err != nil {
		return 0, err
	}
	return eval, l.engine.SetParams(l.stash)
}

// eval evaluates the engine's model when Config.Eval says so.
func (l *Loop) eval(ot *times) (float64, error) {
	if !l.cfg.Eval {
		return 0, nil
	}
	start := time.Now()
	eval, err := l.engine.Eval()
	if err != nil {
		return 0, fmt.Errorf("diloco: eval: %w", err)
	}
	ot.compute += time.Since(start)
	return eval, nil
}

// fetch gets the model ev names through the port and makes it this
// member's: the engine restarts from it, and the error-feedback residual
// and the worker momentum start at zero (they were this member's on
// another model).
func (l *Loop) fetch(ctx context.Context, ev Event, ot *times) error {
	f, err := l.port.Fetch(ctx, ev)
	if err != nil || f == nil {
		return err
	}
	if err := l.model.Set(f.Step, f.Theta0, f.Momentum); err != nil {
		return err
	}
	if err := l.engine.SetParams(f.Theta0); err != nil {
		return err
	}
	clear(l.res[0])
	clear(l.mom)
	l.tokens = 0
	*ot = newTimes()
	l.port.Synced(f.Step, l.model.hash, f.History)
	l.hooks.Synced(f.Step, l.model.hash)
	return nil
}

// reachedMax reports whether MaxOuter is reached. If so, it first drains:
// it waits until the port says every other member of the last ring is at
// this member's step or gone, and no peer is fetching a model (or Drain
// passes). A member whose all-reduce returned has written all its bytes,
// but they may still be on their way to a slower neighbour; leaving at once
// would cut them off.
func (l *Loop) reachedMax(ctx context.Context) bool {
	if !l.done() {
		return false
	}
	l.cfg.Logger.Info("reached the last outer step", "outer_step", l.model.step)
	tick := time.NewTicker(l.cfg.Tick)
	defer tick.Stop()
	deadline := time.After(l.cfg.Drain)
	for !l.port.CaughtUp(ctx) && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-deadline:
			l.cfg.Logger.Warn("leaving before every member of the last ring was seen at this step, or while a peer still fetches the model")
			return true
		case <-ctx.Done():
		}
	}
	return true
}
