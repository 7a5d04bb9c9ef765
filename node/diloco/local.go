package diloco

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/train"
)

// LocalConfig describes an in-process run: M members in one process, each
// a Loop with its own engine (a train.Trainer) run concurrently, an
// in-memory port that decides a ring of all of them once all are Ready, and
// in-memory reducers that run the collectives' own code. It is the
// reference a network run is checked against (the same options, worker ids
// and averaging give the same bits) and the engine of convergence sweeps.
type LocalConfig struct {
	// Options are every member's training options; Options.Worker is
	// replaced by Workers[i].
	Options train.Options
	// Workers are the members' data-stream ids (node/ derives them from
	// peer ids); M = len(Workers) ≥ 1. Member i has ring rank i.
	Workers []uint64
	// Inner is H, the inner steps between outer steps (≥ 1); Outer the
	// number of outer steps (≥ 1).
	Inner, Outer int
	// OuterLR and OuterMomentum configure the outer optimizer (Outer).
	OuterLR, OuterMomentum float32
	// WorkerMomentum is every member's Config.WorkerMomentum.
	WorkerMomentum float32
	// Lag is Config.Lag: 0 blocking, n in 1..Inner the average applied
	// after n inner steps of the next phase, < 0 after the first at which
	// it has arrived (timing-dependent).
	Lag int
	// Averaging is how the members average; the zero value is the plain
	// float32 mean.
	Averaging Averaging
	// StepCost is member i's time per inner step in a simulated clock
	// (nil: 1 each; else len(Workers) values ≥ 1), and CloseFraction the
	// close rule's (mesh.Config.CloseFraction; 0: every phase is whole).
	// Each step closes when the members Ready with a whole phase hold
	// CloseFraction · M · H inner steps; a member still training then ends
	// its phase at its next boundary (closeInner). The clock makes a run
	// of unequal members deterministic (Record.Clock).
	StepCost      []int
	CloseFraction float64
}

// Record is the state after one outer step of an in-process run.
type Record struct {
	Step     int     // outer steps completed
	Tokens   int64   // training tokens folded into the global model so far
	EvalLoss float64 // held-out loss of the global model (member 0's evaluation)
	Hash     string  // train.Hash of the global model
	// Members made the step; BytesSent and BytesRecv are their all-reduce
	// bytes (chunk messages) summed over them, the successful attempt's.
	Members              int
	BytesSent, BytesRecv int64
	// Clock is the simulated time so far (LocalConfig.StepCost): each
	// step lasts as long as its slowest phase, communication free.
	Clock int64
}

// validate rejects a configuration no run can take.
func (c LocalConfig) validate() error {
	switch {
	case len(c.Workers) < 1 || c.Inner < 1 || c.Outer < 1:
		return fmt.Errorf("%w: %d members, inner %d, outer %d", ErrConfig, len(c.Workers), c.Inner, c.Outer)
	case c.Lag > c.Inner:
		return fmt.Errorf("%w: lag %d over H = %d", ErrConfig, c.Lag, c.Inner)
	case !(c.OuterLR > 0) || !(c.OuterMomentum >= 0 && c.OuterMomentum < 1):
		return fmt.Errorf("%w: outer lr %v, momentum %v", ErrConfig, c.OuterLR, c.OuterMomentum)
	case c.StepCost != nil && (len(c.StepCost) != len(c.Workers) || slices.Min(c.StepCost) < 1):
		return fmt.Errorf("%w: step costs %v of %d members", ErrConfig, c.StepCost, len(c.Workers))
	case !(c.CloseFraction >= 0 && c.CloseFraction <= 1):
		return fmt.Errorf("%w: close fraction %v", ErrConfig, c.CloseFraction)
	}
	return c.Averaging.validate()
}

// RunLocal runs cfg on data and calls each (if not nil) after every outer
// step, in order. It returns the global model.
func RunLocal(ctx context.Context, cfg LocalConfig, data train.Source, each func(Record)) ([]float32, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	engines := make([]train.Engine, len(cfg.Workers))
	for i, id := range cfg.Workers {
		o := cfg.Options
		o.Worker = id
		t, err := train.NewTrainer(o, data)
		if err != nil {
			return nil, err
		}
		engines[i] = t
	}
	defer func() {
		for _, e := range engines {
			e.Close()
		}
	}()
	return runLocal(ctx, cfg, engines, each)
}

// runLocal runs cfg with member i training engines[i]; every engine starts
// from engines[0]'s parameters.
func runLocal(ctx context.Context, cfg LocalConfig, engines []train.Engine, each func(Record)) ([]float32, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := newLocalGroup(len(engines), cfg.Averaging, each)
	g.closeAt, g.stepTime = closeInner(cfg)
	theta0 := slices.Clone(engines[0].Params())
	loops := make([]*Loop, len(engines))
	for i, e := range engines {
		if err := e.SetParams(theta0); err != nil {
			return nil, err
		}
		m := NewModel(0, slices.Clone(theta0), NewOuter(len(theta0), cfg.OuterLR, cfg.OuterMomentum))
		lc := Config{Inner: cfg.Inner, Lag: cfg.Lag, MaxOuter: uint64(cfg.Outer), Tick: time.Millisecond,
			ErrorFeedback: cfg.Averaging.errorFeedback(), Eval: i == 0, WorkerMomentum: cfg.WorkerMomentum}
		var err error
		if loops[i], err = New(lc, e, m, g.reducer(i), g.port(i, m), g.hooks(i)); err != nil {
			return nil, err
		}
	}
	if err := runLoops(ctx, loops); err != nil {
		return nil, err
	}
	var out []float32
	loops[0].model.Read(func(_ uint64, _ string, theta0, _ []float32) { out = slices.Clone(theta0) })
	return out, nil
}

// runLoops runs the loops at once until all are done; when one fails the
// others are cancelled, and the first error (by member) is returned.
func runLoops(ctx context.Context, loops []*Loop) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(loops))
	var wg sync.WaitGroup
	for i, l := range loops {
		wg.Go(func() {
			if errs[i] = l.Run(ctx); !errors.Is(errs[i], ErrDone) {
				cancel()
			}
		})
	}
	wg.Wait()
	var first error
	for i, err := range errs {
		if err != nil && !errors.Is(err, ErrDone) && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("diloco: member %d: %w", i, err)
		}
		if err != nil && first == nil && !errors.Is(err, ErrDone) {
			first = err
		}
	}
	return first
}

// StepTime is the simulated time of one outer step under the config's
// clock (StepCost, CloseFraction): its slowest phase.
func (c LocalConfig) StepTime() int64 {
	_, took := closeInner(c)
	return took
}

// closeInner returns the inner steps each member's phase lasts under cfg's
// clock (StepCost, CloseFraction) and the simulated time of a step. The
// step closes at T, when the members whose whole phase (H·c) is done by T
// hold CloseFraction · M · H inner steps; a member still training then
// finishes the inner step in flight: ⌈T/c⌉ of them. Without the rule every
// phase is whole.
func closeInner(cfg LocalConfig) ([]int, int64) {
	k, h := len(cfg.Workers), cfg.Inner
	cost := cfg.StepCost
	if cost == nil {
		cost = slices.Repeat([]int{1}, k)
	}
	whole := make([]int, k)
	for i, c := range cost {
		whole[i] = h * c
	}
	closeT := slices.Max(whole)
	if cfg.CloseFraction > 0 {
		sorted := slices.Sorted(slices.Values(whole))
		need := int(math.Ceil(cfg.CloseFraction*float64(k) - 1e-9)) // members with a whole phase
		closeT = sorted[max(need, 1)-1]
	}
	inner := make([]int, k)
	var took int64
	for i, c := range cost {
		inner[i] = min(h, (closeT+c-1)/c)
		took = max(took, int64(inner[i]*c))
	}
	return inner, took
}
