package train

import (
	"context"
	"fmt"
)

// DiLoCo in one process: M workers, each a Trainer with its own data stream
// and AdamW state, run H inner steps from the same global model, and their
// pseudo-gradients are averaged and applied by the outer optimizer — the
// algorithm node/ runs over the network, without the network. It is the
// reference the network's result is checked against (same options, worker
// ids and reduction give the same bits) and the engine of convergence sweeps.

// Reducer averages the members' pseudo-gradients: out ← Σ wᵢ·deltas[i] / Σ wᵢ.
// It may be called with out aliasing none of deltas; it must not keep them.
type Reducer func(ctx context.Context, deltas [][]float32, weights []float32, out []float32) error

// DiLoCoConfig describes an in-process DiLoCo run.
type DiLoCoConfig struct {
	// Options are every worker's training options; Options.Worker is
	// replaced by Workers[i].
	Options Options
	// Workers are the workers' data-stream ids (node/ derives them from
	// peer ids); M = len(Workers) ≥ 1.
	Workers []uint64
	// Inner is H, the inner steps between outer steps (≥ 1); Outer the
	// number of outer steps (≥ 1).
	Inner, Outer int
	// OuterLR and OuterMomentum configure the outer optimizer (SGD with
	// Nesterov momentum; lr 1 and momentum 0 is plain averaging).
	OuterLR, OuterMomentum float32
	// Reduce averages the pseudo-gradients; nil is MeanReducer.
	Reduce Reducer
	// OverlapSteps is 0 for blocking DiLoCo (every phase starts from the new
	// global model). τ ≥ 1 is overlapped DiLoCo (node.Config.Overlap): each
	// phase starts where the worker's last one ended while the last phase's
	// average is reduced, and after τ inner steps the worker moves onto the
	// new global model keeping its progress since (Rebase). Global model t
	// is then made during phase t+1.
	OverlapSteps int
	// OverlapStart is where an overlapped worker computes the inner steps
	// it makes before the rebase (the global model they will be applied to
	// is not known yet); the zero value is OverlapFromEnd, what node/ does.
	OverlapStart OverlapStart
}

// OverlapStart chooses the point at which an overlapped worker computes
// its first OverlapSteps inner steps of a phase, before it rebases onto the
// new global model G_t (the rebase keeps the progress made since that point,
// so the point matters only through the gradients computed there). Every
// choice uses only what the worker knows then: its own end E of the last
// phase, the last global model G_{t−1} and the update u = G_{t−1} − G_{t−2}
// that made it.
type OverlapStart int

const (
	// OverlapFromEnd: from E, where the worker's last phase ended (node/).
	OverlapFromEnd OverlapStart = iota
	// OverlapFromPrev: from G_{t−1}, the same point for every worker.
	OverlapFromPrev
	// OverlapFromExtrapolated: from G_{t−1} + u, the same point for every
	// worker (the last global update repeated).
	OverlapFromExtrapolated
	// OverlapFromPredicted: from G_{t−1} + (E − G_{t−1})/M + u·(M−1)/M, the
	// worker's own share of the coming average plus the others' shares
	// predicted by the last update.
	OverlapFromPredicted
	// OverlapFromMidpoint: from (G_{t−1} + E)/2, halfway back from the
	// worker's end to the last global model.
	OverlapFromMidpoint
	// OverlapFromBeyond: from G_{t−1} + 1.5·(E − G_{t−1}), past the end
	// along the worker's own last phase.
	OverlapFromBeyond
)

// DiLoCoRecord is the state after one outer step.
type DiLoCoRecord struct {
	Step     int     // outer steps completed
	Tokens   int64   // training tokens folded into the global model so far
	EvalLoss float64 // held-out loss of the global model
	Loss     float64 // mean training loss of the phase's inner steps over workers
	Hash     string  // Hash of the global model
}

// MeanReducer is the plain float32 weighted mean, member by member in
// order: the reference reduction (fp32, no compression).
func MeanReducer(_ context.Context, deltas [][]float32, weights []float32, out []float32) error {
	var total float32
	for _, w := range weights {
		total += w
	}
	clear(out)
	for i, d := range deltas {
		s := weights[i] / total
		for j, v := range d {
			out[j] += float32(s * v)
		}
	}
	return nil
}

// RunDiLoCo runs cfg on data and calls each (if not nil) after every outer
// step. It returns the global model.
func RunDiLoCo(ctx context.Context, cfg DiLoCoConfig, data Source, each func(DiLoCoRecord)) ([]float32, error) {
	if len(cfg.Workers) < 1 || cfg.Inner < 1 || cfg.Outer < 1 {
		return nil, fmt.Errorf("%w: diloco: %d workers, inner %d, outer %d", ErrConfig, len(cfg.Workers), cfg.Inner, cfg.Outer)
	}
	if cfg.OverlapStart < OverlapFromEnd || cfg.OverlapStart > OverlapFromBeyond {
		return nil, fmt.Errorf("%w: diloco: overlap start %d", ErrConfig, cfg.OverlapStart)
	}
	if cfg.OverlapSteps < 0 || cfg.OverlapSteps > cfg.Inner {
		return nil, fmt.Errorf("%w: diloco: overlap steps %d, want 0..H (%d)", ErrConfig, cfg.OverlapSteps, cfg.Inner)
	}
	if !(cfg.OuterLR > 0) || !(cfg.OuterMomentum >= 0 && cfg.OuterMomentum < 1) {
		return nil, fmt.Errorf("%w: diloco: outer lr %v, momentum %v", ErrConfig, cfg.OuterLR, cfg.OuterMomentum)
	}
	var err error
	ws := make([]*Trainer, len(cfg.Workers))
	for i, id := range cfg.Workers {
		o := cfg.Options
		o.Worker = id
		if ws[i], err = NewTrainer(o, data); err != nil {
			return nil, err
		}
	}
	outer := NewOuter(len(ws[0].Params()), cfg.OuterLR, cfg.OuterMomentum)
	return (&diloco{cfg: cfg, ws: ws, outer: outer}).run(ctx, each)
}

// diloco is the state of one in-process run.
type diloco struct {
	cfg    DiLoCoConfig
	ws     []*Trainer
	outer  *Outer
	theta0 []float32
	ends   [][]float32 // overlapped: each worker's end of its last phase, the base of its rebase
	last   []float32   // overlapped, OverlapStart ≠ OverlapFromEnd: G_{t−1}
	upd    []float32   // ... and u = G_{t−1} − G_{t−2} (0 before there are two)
	deltas [][]float32
	avg    []float32
}

func (d *diloco) run(ctx context.Context, each func(DiLoCoRecord)) ([]float32, error) {
	n := len(d.ws[0].Params())
	d.theta0 = append([]float32(nil), d.ws[0].Params()...)
	d.avg = make([]float32, n)
	d.deltas = make([][]float32, len(d.ws))
	for i := range d.deltas {
		d.deltas[i] = make([]float32, n)
	}
	reduce := d.cfg.Reduce
	if reduce == nil {
		reduce = MeanReducer
	}
	weights := make([]float32, len(d.ws))
	var tokens int64
	if d.cfg.OverlapSteps == 0 {
		return d.blocking(ctx, reduce, weights, &tokens, each)
	}
	return d.overlapped(ctx, reduce, weights, &tokens, each)
}

// blocking: reduce after each phase, every worker starts the next phase
// from the new global model.
func (d *diloco) blocking(ctx context.Context, reduce Reducer, weights []float32, tokens *int64, each func(DiLoCoRecord)) ([]float32, error) {
	for t := 1; t <= d.cfg.Outer; t++ {
		loss, err := d.phase(ctx, weights, tokens, false, false)
		if err != nil {
			return nil, err
		}
		if err := reduce(ctx, d.deltas, weights, d.avg); err != nil {
			return nil, fmt.Errorf("train: diloco: reduce of outer step %d: %w", t, err)
		}
		d.outer.Apply(d.theta0, d.theta0, d.avg)
		if err := d.record(t, *tokens, loss, each); err != nil {
			return nil, err
		}
	}
	return d.theta0, nil
}

// overlapped: phase t+1 runs while phase t's average is reduced; global
// model t+1 is made from it and each worker rebases onto it after
// OverlapSteps inner steps of phase t+1.
func (d *diloco) overlapped(ctx context.Context, reduce Reducer, weights []float32, tokens *int64, each func(DiLoCoRecord)) ([]float32, error) {
	d.ends = make([][]float32, len(d.ws))
	var folded int64
	var loss float64
	for t := 0; t <= d.cfg.Outer; t++ {
		rebase := t > 0
		if t > 0 {
			if d.cfg.OverlapStart != OverlapFromEnd {
				d.remember()
			}
			// Global model t, from the average of phase t−1 (made here, before
			// the workers run phase t: it depends on nothing they do now).
			d.outer.Apply(d.theta0, d.theta0, d.avg)
			if err := d.record(t, folded, loss, each); err != nil {
				return nil, err
			}
			if t == d.cfg.Outer {
				break
			}
		}
		l, err := d.phase(ctx, weights, tokens, true, rebase)
		if err != nil {
			return nil, err
		}
		folded, loss = *tokens, l
		if err := reduce(ctx, d.deltas, weights, d.avg); err != nil {
			return nil, fmt.Errorf("train: diloco: reduce of phase %d: %w", t+1, err)
		}
	}
	return d.theta0, nil
}

// remember keeps G_{t−1} (d.theta0, before the outer step that makes G_t)
// and the update that made it from G_{t−2}.
func (d *diloco) remember() {
	if d.last == nil {
		d.last = append([]float32(nil), d.theta0...)
		d.upd = make([]float32, len(d.theta0))
		return
	}
	for j, g := range d.theta0 {
		d.upd[j] = g - d.last[j]
	}
	copy(d.last, d.theta0)
}

// start moves overlapped worker w from E (its params) to the point chosen
// by OverlapStart, which is then the base of its rebase.
func (d *diloco) start(w *Trainer) {
	p := w.Params()
	m := float32(len(d.ws))
	for j := range p {
		switch d.cfg.OverlapStart {
		case OverlapFromPrev:
			p[j] = d.last[j]
		case OverlapFromExtrapolated:
			p[j] = d.last[j] + d.upd[j]
		case OverlapFromPredicted:
			p[j] = d.last[j] + (p[j]-d.last[j])/m + d.upd[j]*(m-1)/m
		case OverlapFromMidpoint:
			p[j] = d.last[j] + (p[j]-d.last[j])/2
		case OverlapFromBeyond:
			p[j] = d.last[j] + (p[j]-d.last[j])*1.5
		}
	}
}

// record reports global model t (d.theta0), which folds in `tokens`.
func (d *diloco) record(t int, tokens int64, loss float64, each func(DiLoCoRecord)) error {
	if each == nil {
		return nil
	}
	w := d.ws[0]
	keep := append([]float32(nil), w.Params()...)
	if err := w.SetParams(d.theta0); err != nil {
		return err
	}
	ev, err := w.Eval()
	if err != nil {
		return err
	}
	each(DiLoCoRecord{Step: t, Tokens: tokens, EvalLoss: ev, Loss: loss, Hash: Hash(d.theta0)})
	return w.SetParams(keep)
}

// phase runs H inner steps on every worker and leaves each worker's
// pseudo-gradient θ₀ − Eᵢ (its end Eᵢ against the global model) in
// d.deltas[i] and its weight (inner steps done) in weights[i]. Blocking, a
// worker starts from θ₀; overlapped, from where its last phase ended (its
// Trainer still holds it), keeping Eᵢ in d.ends[i] for the next rebase;
// with rebase it moves onto θ₀ after OverlapSteps steps: θ += θ₀ − Eᵢ(last).
// It returns the workers' mean training loss.
func (d *diloco) phase(ctx context.Context, weights []float32, tokens *int64, overlapped, rebase bool) (float64, error) {
	var loss float64
	for i, w := range d.ws {
		if !overlapped {
			if err := w.SetParams(d.theta0); err != nil {
				return 0, err
			}
		}
		if rebase && d.cfg.OverlapStart != OverlapFromEnd && d.cfg.OverlapSteps > 0 {
			d.start(w)
			d.ends[i] = append(d.ends[i][:0], w.Params()...)
		}
		for s := 1; s <= d.cfg.Inner; s++ {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			st, err := w.Step()
			if err != nil {
				return 0, err
			}
			loss += st.Loss
			*tokens += int64(st.Tokens)
			if rebase && s == d.cfg.OverlapSteps {
				Rebase(w.Params(), d.ends[i], d.theta0)
			}
		}
		p := w.Params()
		for j := range p {
			d.deltas[i][j] = d.theta0[j] - p[j]
		}
		if overlapped {
			d.ends[i] = append(d.ends[i][:0], p...)
		}
		weights[i] = float32(d.cfg.Inner)
	}
	return loss / float64(len(d.ws)*d.cfg.Inner), nil
}

// Rebase moves a member's local model from one global model onto another,
// keeping the progress it made since: params[i] += to[i] − from[i]
// (overlapped DiLoCo, when the average it was waiting for arrives).
// Element-wise float32, the same on every machine.
func Rebase(params, from, to []float32) {
	from, to = from[:len(params)], to[:len(params)]
	for i := range params {
		params[i] += to[i] - from[i]
	}
}
