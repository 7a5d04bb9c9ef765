package train

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/intellect-node/intellect-node/kernels"
)

// ErrData is wrapped by errors about training data (bad tokens, too little data).
var ErrData = errors.New("train: data")

// Trainer is the CPU training engine: the model, AdamW state and the data
// position of one worker. It implements Engine.
type Trainer struct {
	opts    Options
	data    Source
	m       *model
	mom     []float32  // AdamW first moment; Muon's momentum buffer on hidden matrices
	vel     []float32  // AdamW second moment
	muon    *muonState // Muon's scratch when opts.Optimizer is OptimizerMuon, else nil
	step    int
	lay     []TensorInfo
	rows    []int32 // (Batch, Seq+1) tokens of one micro-batch
	inputs  []int32 // (Batch, Seq)
	targets []int32 // (Batch, Seq)
}

var _ Engine = (*Trainer)(nil)

// NewTrainer builds a CPU trainer with freshly initialised parameters
// (InitParams with opts.Seed) drawing from data.
func NewTrainer(opts Options, data Source) (*Trainer, error) {
	t, err := newTrainer(opts, data)
	if err != nil {
		return nil, err
	}
	InitParams(opts.Model, opts.Seed, t.m.params)
	return t, nil
}

func newTrainer(opts Options, data Source) (*Trainer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if data == nil {
		return nil, fmt.Errorf("%w: no source", ErrData)
	}
	if data.Vocab() > opts.Model.Vocab {
		return nil, fmt.Errorf("%w: source %s has vocabulary %d > model vocab %d", ErrData, data, data.Vocab(), opts.Model.Vocab)
	}
	m, err := newModel(opts.Model, opts.Batch, opts.Seq)
	if err != nil {
		return nil, err
	}
	B, T := opts.Batch, opts.Seq
	t := &Trainer{
		opts: opts, data: data, m: m, lay: opts.Model.Layout(),
		mom: make([]float32, len(m.params)), vel: make([]float32, len(m.params)),
		rows: make([]int32, B*(T+1)), inputs: make([]int32, B*T), targets: make([]int32, B*T),
	}
	if opts.Optimizer == OptimizerMuon {
		t.muon = newMuonState(t.lay)
	}
	return t, nil
}

// Options returns the trainer's options.
func (t *Trainer) Options() Options { return t.opts }

// Layout returns the tensors of the flat parameter vector.
func (t *Trainer) Layout() []TensorInfo { return t.lay }

// Params returns the live parameter vector (aliased).
func (t *Trainer) Params() []float32 { return t.m.params }

// SetParams copies p into the parameters.
func (t *Trainer) SetParams(p []float32) error {
	if len(p) != len(t.m.params) {
		return fmt.Errorf("train: SetParams: %d values, want %d", len(p), len(t.m.params))
	}
	copy(t.m.params, p)
	return nil
}

// StepCount returns the optimizer steps taken so far.
func (t *Trainer) StepCount() int { return t.step }

// Close releases nothing (the CPU trainer holds only Go memory); the data
// source is the caller's to close.
func (t *Trainer) Close() error { return nil }

// Step runs one optimizer step: GradAccum micro-batches of forward and
// backward, global-norm clipping, then AdamW (or Muon on the hidden
// matrices, Options.Optimizer) at the scheduled learning rate.
func (t *Trainer) Step() (StepStats, error) {
	start := time.Now()
	o := t.opts
	t.m.zeroGrads()
	scale := float32(1 / float64(o.Batch*o.Seq*o.GradAccum))
	var loss float64
	for micro := 0; micro < o.GradAccum; micro++ {
		key := Key{Seed: o.Seed, Worker: o.Worker, Step: t.step, Micro: micro}
		if err := t.data.Train(t.rows, o.Batch, o.Seq+1, key); err != nil {
			return StepStats{}, fmt.Errorf("train: step %d: %w", t.step, err)
		}
		if err := t.split(); err != nil {
			return StepStats{}, fmt.Errorf("train: step %d: %w", t.step, err)
		}
		ce, _ := t.m.forward(t.inputs, t.targets, scale)
		t.m.backward(t.inputs)
		loss += ce / float64(o.GradAccum)
	}
	norm := math.Sqrt(t.m.gradSumSquares())
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return StepStats{}, fmt.Errorf("train: step %d: gradient norm is %v", t.step, norm)
	}
	gscale := float32(1)
	if o.ClipNorm > 0 && norm > o.ClipNorm {
		gscale = float32(o.ClipNorm / norm) // applied inside AdamW: one pass over memory
	}
	lr := o.LRAt(t.step)
	t.step++
	t.update(lr, gscale)
	return StepStats{Step: t.step, Loss: loss, Tokens: o.Batch * o.Seq * o.GradAccum, LR: lr, GradNorm: norm, Compute: time.Since(start)}, nil
}

// update takes the optimizer step on every tensor: Muon on the hidden
// matrices when the trainer runs it (muon.go), AdamW on the rest; norm
// gains get no weight decay.
func (t *Trainer) update(lr float64, gscale float32) {
	o := t.opts
	for _, ti := range t.lay {
		s, e := ti.Offset, ti.Offset+ti.Size()
		if t.muon != nil && ti.IsHidden() {
			muonMatrix(t.m.params[s:e], t.m.grads[s:e], t.mom[s:e], ti.Shape[0], ti.Shape[1],
				float32(lr), float32(o.WeightDecay), gscale, t.muon)
			continue
		}
		wd := o.WeightDecay
		if ti.isNorm() {
			wd = 0
		}
		kernels.AdamW(t.m.params[s:e], t.m.grads[s:e], t.mom[s:e], t.vel[s:e],
			float32(lr), float32(o.Beta1), float32(o.Beta2), float32(o.Eps), float32(wd), gscale, t.step)
	}
}

// split turns rows (B, T+1) into inputs and targets (B, T), checking every
// token against the model's vocabulary.
func (t *Trainer) split() error {
	B, T, V := t.opts.Batch, t.opts.Seq, int32(t.opts.Model.Vocab)
	for b := 0; b < B; b++ {
		row := t.rows[b*(T+1) : (b+1)*(T+1)]
		for _, tok := range row {
			if tok < 0 || tok >= V {
				return fmt.Errorf("%w: token %d outside vocabulary [0, %d)", ErrData, tok, V)
			}
		}
		copy(t.inputs[b*T:(b+1)*T], row[:T])
		copy(t.targets[b*T:(b+1)*T], row[1:])
	}
	return nil
}

// Eval returns the mean cross-entropy over EvalBatches fixed held-out batches.
func (t *Trainer) Eval() (float64, error) {
	r, err := t.EvalDetail()
	return r.Loss, err
}

// EvalResult is the outcome of an evaluation on the held-out batches.
type EvalResult struct {
	Loss      float64 // mean cross-entropy, nats/token
	TokenAcc  float64 // fraction of targets that are the arg-max prediction
	AnswerAcc float64 // the same over answer tokens (sums of the arithmetic corpus); NaN for other sources
}

// EvalDetail evaluates the held-out batches: loss and greedy accuracies.
func (t *Trainer) EvalDetail() (EvalResult, error) {
	o := t.opts
	var loss float64
	var hit, n, ansHit, ansN int
	am, _ := t.data.(answerMasker)
	mask := make([]bool, o.Seq)
	for i := 0; i < o.EvalBatches; i++ {
		if err := t.data.Eval(t.rows, o.Batch, o.Seq+1, i); err != nil {
			return EvalResult{}, fmt.Errorf("train: eval batch %d: %w", i, err)
		}
		if err := t.split(); err != nil {
			return EvalResult{}, fmt.Errorf("train: eval batch %d: %w", i, err)
		}
		ce, _ := t.m.forward(t.inputs, t.targets, 0)
		loss += ce
		for b := 0; b < o.Batch; b++ {
			if am != nil {
				am.AnswerMask(t.inputs[b*o.Seq:(b+1)*o.Seq], mask)
			}
			for j := 0; j < o.Seq; j++ {
				k := b*o.Seq + j
				ok := t.m.argmax(k) == t.targets[k]
				hit, n = hit+b2i(ok), n+1
				if am != nil && mask[j] {
					ansHit, ansN = ansHit+b2i(ok), ansN+1
				}
			}
		}
	}
	r := EvalResult{Loss: loss / float64(o.EvalBatches), TokenAcc: float64(hit) / float64(n), AnswerAcc: math.NaN()}
	if ansN > 0 {
		r.AnswerAcc = float64(ansHit) / float64(ansN)
	}
	return r, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
