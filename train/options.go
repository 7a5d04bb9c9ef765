package train

import (
	"fmt"
	"math"
)

// Options are the training hyperparameters of one worker.
type Options struct {
	Model       Config  `json:"model"`
	Batch       int     `json:"batch"`        // rows per micro-batch, ≥ 1
	Seq         int     `json:"seq"`          // tokens per row, 1..Model.SeqLen
	GradAccum   int     `json:"grad_accum"`   // micro-batches per optimizer step, ≥ 1; tokens/step = Batch·Seq·GradAccum
	LR          float64 `json:"lr"`           // peak learning rate
	MinLR       float64 `json:"min_lr"`       // learning rate at the end of the decay
	WarmupSteps int     `json:"warmup_steps"` // linear warmup from 0 to LR
	TotalSteps  int     `json:"total_steps"`  // schedule length; the decay ends here
	DecayFrac   float64 `json:"decay_frac"`   // fraction of TotalSteps spent decaying (WSD), in [0, 1]
	WeightDecay float64 `json:"weight_decay"` // decoupled, on matrices only (not norms); default 0.1
	Beta1       float64 `json:"beta1"`        // default 0.9
	Beta2       float64 `json:"beta2"`        // default 0.95
	Eps         float64 `json:"eps"`          // default 1e-8
	ClipNorm    float64 `json:"clip_norm"`    // global gradient-norm clip; 0 disables
	Seed        uint64  `json:"seed"`         // parameter init and data sampling
	Worker      uint64  `json:"worker"`       // worker id: different workers draw different data
	EvalBatches int     `json:"eval_batches"` // held-out batches (Batch rows each) per Eval, ≥ 1
	// Optimizer is OptimizerAdamW ("" means it too) or OptimizerMuon.
	Optimizer string `json:"optimizer,omitempty"`
}

// The optimizers Options.Optimizer names.
const (
	// OptimizerAdamW is AdamW on every tensor (the default; "" means it too).
	OptimizerAdamW = "adamw"
	// OptimizerMuon is Muon (muon.go) on the hidden matrices — attention
	// q, k, v, o and the MLP's gate, up, down — and AdamW on the rest
	// (embeddings, output head, norm gains), at the same learning rate,
	// schedule and decoupled weight decay. CPU engine only.
	OptimizerMuon = "muon"
)

// DefaultOptions returns the model preset with training hyperparameters that
// suit it on this project's machines.
func DefaultOptions(preset string) (Options, error) {
	c, err := Preset(preset)
	if err != nil {
		return Options{}, err
	}
	o := Options{
		Model: c, Batch: 8, Seq: min(256, c.SeqLen), GradAccum: 1,
		LR: 1e-3, MinLR: 1e-4, WarmupSteps: 100, TotalSteps: 10000, DecayFrac: 0.2,
		WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, ClipNorm: 1, EvalBatches: 4,
	}
	switch preset {
	case "tiny":
		o.Batch, o.Seq, o.LR, o.MinLR, o.WarmupSteps, o.TotalSteps = 16, 64, 3e-3, 3e-4, 30, 600
	case "small":
		o.Batch, o.Seq, o.LR, o.MinLR = 8, 256, 1e-3, 1e-4
	default: // 150m and up: Llama-like settings
		o.Batch, o.Seq, o.LR, o.MinLR, o.WarmupSteps = 8, c.SeqLen, 3e-4, 3e-5, 1000
	}
	return o, nil
}

// Validate reports whether o is usable.
func (o Options) Validate() error {
	if err := o.Model.Validate(); err != nil {
		return err
	}
	bad := func(what string, v any) error { return fmt.Errorf("%w: %s = %v", ErrConfig, what, v) }
	switch {
	case o.Batch < 1 || o.Batch > maxDim:
		return bad("batch", o.Batch)
	case o.Seq < 1 || o.Seq > o.Model.SeqLen:
		return bad("seq (1..seq_len)", o.Seq)
	case o.GradAccum < 1 || o.GradAccum > maxDim:
		return bad("grad_accum", o.GradAccum)
	case !(o.LR >= 0 && o.LR < 10) || !(o.MinLR >= 0 && o.MinLR <= o.LR):
		return bad("lr/min_lr", [2]float64{o.LR, o.MinLR})
	case o.WarmupSteps < 0 || o.TotalSteps < 1:
		return bad("warmup_steps/total_steps", [2]int{o.WarmupSteps, o.TotalSteps})
	case !(o.DecayFrac >= 0 && o.DecayFrac <= 1):
		return bad("decay_frac", o.DecayFrac)
	case !(o.WeightDecay >= 0 && o.WeightDecay < 1):
		return bad("weight_decay", o.WeightDecay)
	case !(o.Beta1 >= 0 && o.Beta1 < 1) || !(o.Beta2 >= 0 && o.Beta2 < 1):
		return bad("beta1/beta2", [2]float64{o.Beta1, o.Beta2})
	case !(o.Eps > 0) || !(o.ClipNorm >= 0) || math.IsInf(o.ClipNorm, 0):
		return bad("eps/clip_norm", [2]float64{o.Eps, o.ClipNorm})
	case o.EvalBatches < 1 || o.EvalBatches > maxDim:
		return bad("eval_batches", o.EvalBatches)
	case o.Optimizer != "" && o.Optimizer != OptimizerAdamW && o.Optimizer != OptimizerMuon:
		return fmt.Errorf("%w: optimizer %q: want %q or %q", ErrConfig, o.Optimizer, OptimizerAdamW, OptimizerMuon)
	}
	return nil
}

// LRAt returns the learning rate of optimizer step `step` (0-based) under the
// warmup-stable-decay schedule: linear warmup over WarmupSteps, constant LR,
// then a linear decay to MinLR over the last DecayFrac·TotalSteps steps; MinLR
// after TotalSteps.
func (o Options) LRAt(step int) float64 {
	if step < o.WarmupSteps {
		return o.LR * float64(step+1) / float64(o.WarmupSteps)
	}
	decay := int(math.Round(o.DecayFrac * float64(o.TotalSteps)))
	start := o.TotalSteps - decay
	if step < start {
		return o.LR
	}
	if step >= o.TotalSteps || decay == 0 {
		return o.MinLR
	}
	f := float64(step-start+1) / float64(decay)
	return o.LR + (o.MinLR-o.LR)*f
}
