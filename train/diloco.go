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
	// Lag is 0 (blocking: every phase starts from the new global model) or
	// 1 (overlapped, node.Config.Overlap: the average of phase t is applied
	// after phase t+1, which starts from the worker's eager step,
	// Outer.Eager). Outer step t's record is then the global model after t
	// averages, made after t+1 phases.
	Lag int
}

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
	if cfg.Lag != 0 && cfg.Lag != 1 {
		return nil, fmt.Errorf("%w: diloco: lag %d, want 0 or 1", ErrConfig, cfg.Lag)
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
	starts [][]float32 // each worker's start of the current phase
	deltas [][]float32
	avg    []float32
}

func (d *diloco) run(ctx context.Context, each func(DiLoCoRecord)) ([]float32, error) {
	n := len(d.ws[0].Params())
	d.theta0 = append([]float32(nil), d.ws[0].Params()...)
	d.avg = make([]float32, n)
	d.starts = make([][]float32, len(d.ws))
	d.deltas = make([][]float32, len(d.ws))
	for i := range d.deltas {
		d.deltas[i] = make([]float32, n)
		d.starts[i] = append([]float32(nil), d.theta0...)
	}
	reduce := d.cfg.Reduce
	if reduce == nil {
		reduce = MeanReducer
	}
	weights := make([]float32, len(d.ws))
	var tokens, folded int64
	var loss float64
	for t := 0; t < d.cfg.Outer+d.cfg.Lag; t++ {
		l, err := d.phase(ctx, weights, &tokens)
		if err != nil {
			return nil, err
		}
		if d.cfg.Lag == 1 && t > 0 {
			// The average of phase t−1 (in d.avg) becomes global model t.
			d.outer.Apply(d.theta0, d.theta0, d.avg)
			if err := d.record(t, folded, loss, each); err != nil {
				return nil, err
			}
		}
		folded, loss = tokens, l
		if err := reduce(ctx, d.deltas, weights, d.avg); err != nil {
			return nil, fmt.Errorf("train: diloco: reduce of phase %d: %w", t+1, err)
		}
		if d.cfg.Lag == 0 {
			d.outer.Apply(d.theta0, d.theta0, d.avg)
			for i := range d.starts {
				copy(d.starts[i], d.theta0)
			}
			if err := d.record(t+1, folded, loss, each); err != nil {
				return nil, err
			}
			continue
		}
		for i := range d.starts {
			d.outer.Eager(d.starts[i], d.theta0, d.deltas[i])
		}
	}
	return d.theta0, nil
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

// phase runs H inner steps on every worker from its start Sᵢ and leaves
// each worker's pseudo-gradient Sᵢ − θᵢ in d.deltas[i] and its weight (inner steps done)
// in weights[i]. It returns the workers' mean training loss.
func (d *diloco) phase(ctx context.Context, weights []float32, tokens *int64) (float64, error) {
	var loss float64
	for i, w := range d.ws {
		if err := w.SetParams(d.starts[i]); err != nil {
			return 0, err
		}
		for range d.cfg.Inner {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			st, err := w.Step()
			if err != nil {
				return 0, err
			}
			loss += st.Loss
			*tokens += int64(st.Tokens)
		}
		p := w.Params()
		for j := range p {
			d.deltas[i][j] = d.starts[i][j] - p[j]
		}
		weights[i] = float32(d.cfg.Inner)
	}
	return loss / float64(len(d.ws)*d.cfg.Inner), nil
}
