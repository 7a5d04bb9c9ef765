package diloco

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/train"
)

// Config configures a Loop.
type Config struct {
	// Inner is H, the inner steps of a phase; ≥ 1.
	Inner int
	// Lag is when the average of phase t is applied in phase t+1: 0 before
	// its first inner step (blocking), n in 1..Inner after its n-th, < 0
	// after the first inner step at which it has arrived.
	Lag int
	// MaxOuter ends Run (ErrDone) once the global model of this step is
	// the member's; 0: no limit.
	MaxOuter uint64
	// Tick is the mesh's tick: straggler waits are counted in it, and a
	// member at MaxOuter asks the port this often whether the last ring
	// caught up. Default mesh.DefaultTickMillis.
	Tick time.Duration
	// Drain bounds that wait. Default DefaultDrain.
	Drain time.Duration
	// ErrorFeedback makes the loop keep an error-feedback residual pair
	// for its reducer.
	ErrorFeedback bool
	// Eval evaluates every global model on the engine (Commit.Eval).
	Eval bool
	// WorkerMomentum μ ≥ 0 gives the member a Nesterov momentum buffer of
	// its own pseudo-gradients, v ← μ·v + Δ, and makes it send Δ + μ·v in
	// place of Δ (the outer optimizer then runs without momentum).
	WorkerMomentum float32
	// Logger receives the loop's few lines; nil discards them.
	Logger *slog.Logger
}

// DefaultDrain is Config.Drain's default.
const DefaultDrain = 10 * time.Second

// ErrConfig is wrapped by the errors of Validate.
var ErrConfig = errors.New("diloco: invalid configuration")

// Validate fills defaults and rejects out-of-range values.
func (c *Config) Validate() error {
	if c.Tick == 0 {
		c.Tick = mesh.DefaultTickMillis * time.Millisecond
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case c.Inner < 1:
		return fmt.Errorf("%w: %d inner steps", ErrConfig, c.Inner)
	case c.Lag > c.Inner:
		return fmt.Errorf("%w: lag %d over H = %d", ErrConfig, c.Lag, c.Inner)
	case !(c.WorkerMomentum >= 0 && c.WorkerMomentum < 1):
		return fmt.Errorf("%w: worker momentum %v", ErrConfig, c.WorkerMomentum)
	case c.Tick < 0 || c.Drain < 0:
		return fmt.Errorf("%w: tick %v, drain %v", ErrConfig, c.Tick, c.Drain)
	}
	return nil
}

// ErrDone ends Run when Config.MaxOuter is reached.
var ErrDone = errors.New("diloco: reached the last outer step")

// Loop is one member's DiLoCo loop. It owns the engine while it runs, the
// global model's changes, Δ, Δ̄, the error-feedback residuals and E; it sees
// the average through a Reducer and membership through a Port.
type Loop struct {
	cfg    Config
	engine train.Engine
	model  *Model
	reduce Reducer
	port   Port
	hooks  Hooks

	delta  []float32     // Δ_t, kept as is through retries
	avg    []float32     // Δ̄_t
	res    [2][]float32  // error feedback: the residual carried in, and the next
	mom    []float32     // the worker momentum v (Config.WorkerMomentum)
	end    []float32     // E_t, the base of the pending rebase (lag ≠ 0)
	stash  []float32     // the local model while G is evaluated (lag ≠ 0)
	tokens int64         // training tokens of the current phase
	closed atomic.Uint64 // 1 + the latest step the mesh closed (close.go)
}

// New returns the loop of a member training e from model m. It allocates
// the loop's vectors: two of the model's size, two more with error
// feedback, two more when lagged.
func New(cfg Config, e train.Engine, m *Model, r Reducer, p Port, h Hooks) (*Loop, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := m.Len()
	if len(e.Params()) != n {
		return nil, fmt.Errorf("%w: engine of %d parameters, model of %d", ErrModelSize, len(e.Params()), n)
	}
	l := &Loop{cfg: cfg, engine: e, model: m, reduce: r, port: p, hooks: h,
		delta: make([]float32, n), avg: make([]float32, n)}
	if cfg.ErrorFeedback {
		l.res = [2][]float32{make([]float32, n), make([]float32, n)}
	}
	if cfg.Lag != 0 {
		l.end, l.stash = make([]float32, n), make([]float32, n)
	}
	if cfg.WorkerMomentum > 0 {
		l.mom = make([]float32, n)
	}
	return l, nil
}

// Residual returns the error-feedback residual the next attempt carries in
// (nil without error feedback). It is the loop's: read or change it only
// while Run does not run, or from a hook.
func (l *Loop) Residual() []float32 { return l.res[0] }

// SetResidual copies r into the residual the next attempt carries in (a
// resumed member's).
func (l *Loop) SetResidual(r []float32) error {
	if l.res[0] == nil || len(r) != len(l.res[0]) {
		return fmt.Errorf("%w: residual of %d values, the loop keeps %d", ErrModelSize, len(r), len(l.res[0]))
	}
	copy(l.res[0], r)
	return nil
}

// WorkerMomentum returns the member's momentum buffer v (nil without
// Config.WorkerMomentum), with the same rules as Residual.
func (l *Loop) WorkerMomentum() []float32 { return l.mom }

// SetWorkerMomentum copies v into the member's momentum buffer (a resumed
// member's).
func (l *Loop) SetWorkerMomentum(v []float32) error {
	if l.mom == nil || len(v) != len(l.mom) {
		return fmt.Errorf("%w: worker momentum of %d values, the loop keeps %d", ErrModelSize, len(v), len(l.mom))
	}
	copy(l.mom, v)
	return nil
}

// Run trains outer steps until ctx ends (ctx.Err()) or MaxOuter is reached
// (ErrDone). The reduce worker it starts is joined before it returns.
func (l *Loop) Run(ctx context.Context) error {
	w := startWorker(ctx, l)
	defer w.stop()
	var p *pending
	ot := newTimes()
	phaseStart := time.Now()
	for {
		if p == nil {
			if l.reachedMax(ctx) {
				return ErrDone
			}
			if ev := w.pollFetch(); ev != nil {
				if err := l.fetch(ctx, *ev, &ot); err != nil {
					return err
				}
				continue
			}
		}
		inner, fetch, err := l.phase(ctx, w, &ot, &p)
		if err == nil && fetch == nil && !l.done() {
			p = l.startReduce(w, inner, &phaseStart)
			if l.cfg.Lag == 0 {
				fetch, err = l.apply(ctx, &ot, p, false)
				p = nil
			}
		}
		if err != nil {
			return err
		}
		if fetch != nil {
			// Left out, or on the losing side: the network's model replaces
			// this member's unreduced progress.
			if err := l.fetch(ctx, *fetch, &ot); err != nil {
				return err
			}
			p = nil
		}
	}
}

// done reports whether MaxOuter is reached.
func (l *Loop) done() bool { return l.cfg.MaxOuter > 0 && l.model.Step() >= l.cfg.MaxOuter }

// phase runs the H inner steps of one phase and applies *p (the pending
// average) at its lag, or at the phase's end. It returns the inner steps run
// and the fetch the pending all-reduce asked for instead, if it did (the
// phase is then cut short). Reaching MaxOuter also cuts it short, and so
// does the step's close (close.go) once no average is pending, and so does
// a fetch the mesh asks for meanwhile: the fetched model replaces this
// phase's work, so it is taken up at the next inner step, not at the
// phase's end (a joiner training the initial model while it waited for a
// fetch took it up a whole phase late, 10 s on the soak's sim device, and
// found the donors a step further on, again and again).
func (l *Loop) phase(ctx context.Context, w *worker, ot *times, p **pending) (int, *Event, error) {
	inner := 0
	for inner < l.cfg.Inner {
		if err := l.innerStep(ctx, ot, inner+1); err != nil {
			return inner, nil, err
		}
		inner++
		if *p != nil && l.applyNow(*p, inner) {
			fetch, err := l.apply(ctx, ot, *p, true)
			*p = nil
			if err != nil || fetch != nil || l.done() {
				return inner, fetch, err
			}
		}
		if *p == nil && inner < l.cfg.Inner {
			if ev := w.pollFetch(); ev != nil {
				return inner, ev, nil
			}
		}
		if *p == nil && l.closes(inner) {
			return inner, nil, nil // the step closed: Ready with inner steps
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
func (l *Loop) innerStep(ctx context.Context, ot *times, inner int) error {
	st, err := l.engine.Step()
	if err != nil {
		return fmt.Errorf("diloco: inner step: %w", err)
	}
	ot.compute += st.Compute
	ot.loss += st.Loss
	ot.steps++
	l.tokens += int64(st.Tokens)
	l.hooks.InnerDone(inner, st)
	return ctx.Err()
}

// applyNow reports whether the pending average is to be applied after the
// inner-th step of the phase.
func (l *Loop) applyNow(p *pending, inner int) bool {
	if l.cfg.Lag > 0 {
		return inner == l.cfg.Lag
	}
	return p.arrived()
}

// startReduce computes Δ_t from the local model, tells the mesh this member
// is Ready and hands the all-reduce to the worker.
func (l *Loop) startReduce(w *worker, inner int, phaseStart *time.Time) *pending {
	params := l.engine.Params()
	theta0 := l.model.theta0 // this goroutine is the model's one writer
	if l.end != nil {        // one pass for Δ_t and E_t
		end := l.end[:len(l.delta)]
		for i, p := range params[:len(l.delta)] {
			l.delta[i], end[i] = theta0[i]-p, p
		}
	} else {
		for i := range l.delta {
			l.delta[i] = theta0[i] - params[i]
		}
	}
	if mu := l.cfg.WorkerMomentum; l.mom != nil {
		for i, d := range l.delta {
			l.mom[i] = float32(mu*l.mom[i]) + d // explicit rounding: no fused multiply-add
			l.delta[i] = d + float32(mu*l.mom[i])
		}
	}
	if l.cfg.Lag != 0 {
		// Waiting for a slower member costs no compute here, and a faster
		// member is Ready up to a phase before it: wait up to 1.5 phases.
		phase := time.Since(*phaseStart)
		*phaseStart = time.Now()
		l.port.SetStragglerTicks(max(mesh.DefaultStragglerTicks, int(1.5*float64(phase)/float64(l.cfg.Tick))))
	}
	tokens := l.tokens
	l.tokens = 0
	return w.start(l.model.step, inner, tokens)
}
