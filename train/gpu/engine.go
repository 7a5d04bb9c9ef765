//go:build cuda || cudaemu

package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/intellect-node/intellect-node/kernels"
	"github.com/intellect-node/intellect-node/kernels/cuda"
	"github.com/intellect-node/intellect-node/train"
)

func init() {
	train.RegisterEngine("cuda", func(o train.Options, s train.Source) (train.Engine, error) {
		return New(o, s, Config{})
	})
}

// ErrClosed is returned by every method of an Engine after Close.
var ErrClosed = errors.New("gpu: engine closed")

// Config selects the GPU and the cuBLAS library.
type Config struct {
	Device int          // CUDA device ordinal; default 0
	Cublas string       // path of libcublas.so.N; default $INTELLECT_CUBLAS, then .13/.12/.11
	Log    *slog.Logger // default slog.Default()
	// Attention picks the attention kernels: "tc" (tensor cores, the default)
	// or "simple" (the CUDA-core reference kernels). Default: $INTELLECT_CUDA_ATTN, then "tc".
	Attention string
}

// EnvAttention names the environment variable that sets Config.Attention.
const EnvAttention = "INTELLECT_CUDA_ATTN"

// Engine is the CUDA training engine; it implements train.Engine with the
// same math as train.Trainer. Parameters, gradients and AdamW moments are fp32
// on the device; the matmuls read a bf16 copy of the parameters refreshed by
// every AdamW step.
//
// Params returns a host copy (pinned memory) downloaded at the call; changes
// the caller makes to it are uploaded at the next Step, Eval, Save or
// SetParams. Unlike the CPU trainer's, that slice does not follow later steps:
// call Params again after stepping. Not safe for concurrent use.
type Engine struct {
	opts     train.Options
	cfg      train.Config
	data     train.Source
	dev      *cuda.Device
	lay      layout
	B, T     int
	n        int            // parameters
	p, pb, g cuda.DevicePtr // fp32 master, bf16 copy, fp32 gradient
	m, v     cuda.DevicePtr // AdamW moments; m is Muon's momentum on the hidden matrices
	muon     *muonBufs      // Muon's scratch when opts.Optimizer is train.OptimizerMuon, else nil
	a        acts
	host     []float32 // pinned mirror of p, handed out by Params
	dirty    bool      // host was handed out and may have changed
	step     int
	rows     []int32 // (B, T+1)
	inputs   []int32 // (B, T)
	targets  []int32 // (B, T)
	// scal receives the loss sums from the device. Its own allocation: cgo
	// refuses a host pointer into memory that holds Go pointers, such as
	// an array field of Engine ("Go pointer to unpinned Go pointer").
	scal     []float64
	timer    *cuda.Timer
	attnFwd  string
	attnDQ   string
	attnDKDV string
	attnTC   bool
	log      *slog.Logger
	closed   bool
}

var _ train.Engine = (*Engine)(nil)

// New builds a CUDA engine with parameters from train.InitParams(opts.Seed),
// the same bits the CPU trainer starts from.
func New(opts train.Options, data train.Source, dc Config) (*Engine, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if data == nil {
		return nil, fmt.Errorf("%w: no source", train.ErrData)
	}
	if data.Vocab() > opts.Model.Vocab {
		return nil, fmt.Errorf("%w: source %s has vocabulary %d > model vocab %d", train.ErrData, data, data.Vocab(), opts.Model.Vocab)
	}
	c := opts.Model
	e := &Engine{opts: opts, cfg: c, data: data, lay: newLayout(c), B: opts.Batch, T: opts.Seq,
		n: int(c.NumParams()), log: dc.Log, scal: make([]float64, 4)}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.log = e.log.With("system", "gpu")
	var err error
	attn := dc.Attention
	if attn == "" {
		attn = os.Getenv(EnvAttention)
	}
	switch attn {
	case "", "tc":
		e.attnTC = true
	case "simple":
	default:
		return nil, fmt.Errorf("%w: attention %q (want tc or simple)", cuda.ErrUnsupported, attn)
	}
	if e.attnFwd, err = cuda.AttnKernel("fwd", c.HeadDim(), e.attnTC); err != nil {
		return nil, err
	}
	e.attnDQ, _ = cuda.AttnKernel("bwd_dq", c.HeadDim(), e.attnTC)
	e.attnDKDV, _ = cuda.AttnKernel("bwd_dkdv", c.HeadDim(), e.attnTC)
	e.rows = make([]int32, e.B*(e.T+1))
	e.inputs, e.targets = make([]int32, e.B*e.T), make([]int32, e.B*e.T)
	if e.dev, err = cuda.Open(dc.Device, dc.Cublas, e.log); err != nil {
		return nil, err
	}
	if err = e.dev.Do(e.alloc); err != nil {
		e.dev.Close()
		return nil, err
	}
	train.InitParams(c, opts.Seed, e.host)
	if err = e.SetParams(e.host); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// alloc makes every device buffer and the RoPE tables (inside Do).
func (e *Engine) alloc() error {
	n := int64(e.n)
	ar := &arena{plan: true}
	carveActs(ar, e.cfg, e.B, e.T)
	params := 4*n*4 + 2*n // p, g, m, v (f32) + pb (bf16)
	var err error
	if ar.base, err = e.dev.Alloc(ar.off + params + 5*256); err != nil {
		return err
	}
	actBytes := ar.off
	ar.off, ar.plan = 0, false
	e.a = carveActs(ar, e.cfg, e.B, e.T)
	e.p, e.g, e.m, e.v = ar.f32(e.n), ar.f32(e.n), ar.f32(e.n), ar.f32(e.n)
	e.pb = ar.bf16(e.n)
	if err = e.dev.Zero(e.m, 4*n); err != nil {
		return err
	}
	if err = e.dev.Zero(e.v, 4*n); err != nil {
		return err
	}
	if e.opts.Optimizer == train.OptimizerMuon {
		if e.muon, err = e.allocMuon(); err != nil {
			return err
		}
	}
	if e.host, err = e.dev.HostF32(e.n); err != nil {
		return err
	}
	hd := e.cfg.HeadDim()
	if e.attnTC {
		for _, part := range []string{"fwd", "bwd_dq", "bwd_dkdv"} {
			name, _ := cuda.AttnKernel(part, hd, true)
			if err := e.dev.SetMaxDynamicShared(name, cuda.AttnTCSmem(part, hd)); err != nil {
				return err
			}
		}
	}
	cos, sin := make([]float32, e.T*hd/2), make([]float32, e.T*hd/2)
	kernels.RoPETables(cos, sin, e.T, hd, e.cfg.RopeTheta)
	if err = cuda.Upload(e.dev, e.a.cos, cos); err != nil {
		return err
	}
	if err = cuda.Upload(e.dev, e.a.sin, sin); err != nil {
		return err
	}
	if e.timer, err = e.dev.NewTimer(); err != nil {
		return err
	}
	e.log.Info("engine ready", "params", e.n, "batch", e.B, "seq", e.T,
		"act_gib", float64(actBytes)/(1<<30), "param_state_gib", float64(params)/(1<<30))
	return e.dev.Sync()
}

// MemUsed returns the device memory the engine allocated, in bytes.
func (e *Engine) MemUsed() int64 { return e.dev.MemUsed() }

// Device returns the underlying device (for benchmarks and tests).
func (e *Engine) Device() *cuda.Device { return e.dev }

// StepCount returns the optimizer steps taken so far.
func (e *Engine) StepCount() int { return e.step }

// Options returns the engine's options.
func (e *Engine) Options() train.Options { return e.opts }

// Params downloads the parameters into the pinned host mirror and returns it
// (see Engine for the aliasing contract).
func (e *Engine) Params() []float32 {
	if e.closed {
		return nil
	}
	if err := e.dev.Do(e.pullParams); err != nil {
		e.log.Error("download parameters", "err", err)
		return nil
	}
	e.dirty = true
	return e.host
}

func (e *Engine) pullParams() error {
	if e.dirty {
		return nil // the mirror is newer than the device (or equal)
	}
	return cuda.Download(e.dev, e.host, e.p)
}

// SetParams copies p to the device parameters and refreshes the bf16 copy.
func (e *Engine) SetParams(p []float32) error {
	if e.closed {
		return ErrClosed
	}
	if len(p) != e.n {
		return fmt.Errorf("gpu: SetParams: %d values, want %d", len(p), e.n)
	}
	return e.dev.Do(func() error {
		if err := cuda.Upload(e.dev, e.p, p); err != nil {
			return err
		}
		if err := e.castParams(); err != nil {
			return err
		}
		if &p[0] != &e.host[0] {
			copy(e.host, p)
		}
		e.dirty = false
		return e.dev.Sync()
	})
}

func (e *Engine) castParams() error {
	var a cuda.Args
	return e.dev.Launch("cast_f32_bf16", cuda.Dim3{X: cuda.Grid1D(int64(e.n), ewBlock, maxBlocks)}, cuda.Dim3{X: ewBlock}, 0,
		a.P(e.pb).P(e.p).L(int64(e.n)))
}

// push uploads the host mirror if it was handed out (inside Do).
func (e *Engine) push() error {
	if !e.dirty {
		return nil
	}
	if err := cuda.Upload(e.dev, e.p, e.host); err != nil {
		return err
	}
	e.dirty = false
	return e.castParams()
}

// loadBatch splits rows (B, T+1) into inputs and targets, checks them against
// the vocabulary and uploads them (inside Do).
func (e *Engine) loadBatch() error {
	B, T, V := e.B, e.T, int32(e.cfg.Vocab)
	for b := 0; b < B; b++ {
		row := e.rows[b*(T+1) : (b+1)*(T+1)]
		for _, tok := range row {
			if tok < 0 || tok >= V {
				return fmt.Errorf("%w: token %d outside vocabulary [0, %d)", train.ErrData, tok, V)
			}
		}
		copy(e.inputs[b*T:(b+1)*T], row[:T])
		copy(e.targets[b*T:(b+1)*T], row[1:])
	}
	if err := cuda.Upload(e.dev, e.a.in, e.inputs); err != nil {
		return err
	}
	if err := cuda.Upload(e.dev, e.a.tgt, e.targets); err != nil {
		return err
	}
	return e.dev.Sync() // inputs/targets are reused by the next micro-batch
}

// Step runs one optimizer step: GradAccum micro-batches of forward and
// backward, global-norm clipping, then AdamW (or Muon on the hidden
// matrices, Options.Optimizer) at the scheduled learning rate.
func (e *Engine) Step() (train.StepStats, error) {
	if e.closed {
		return train.StepStats{}, ErrClosed
	}
	start := time.Now()
	var st train.StepStats
	err := e.dev.Do(func() error {
		var err error
		st, err = e.stepLocked()
		return err
	})
	if err != nil {
		return train.StepStats{}, fmt.Errorf("gpu: step %d: %w", e.step, err)
	}
	st.Compute = time.Since(start)
	return st, nil
}

func (e *Engine) stepLocked() (train.StepStats, error) {
	o := e.opts
	if err := e.push(); err != nil {
		return train.StepStats{}, err
	}
	if err := e.dev.Zero(e.g, 4*int64(e.n)); err != nil {
		return train.StepStats{}, err
	}
	if err := e.dev.Zero(e.a.scalars, 32); err != nil {
		return train.StepStats{}, err
	}
	scale := float32(1 / float64(o.Batch*o.Seq*o.GradAccum))
	for micro := 0; micro < o.GradAccum; micro++ {
		key := train.Key{Seed: o.Seed, Worker: o.Worker, Step: e.step, Micro: micro}
		if err := e.data.Train(e.rows, o.Batch, o.Seq+1, key); err != nil {
			return train.StepStats{}, err
		}
		if err := e.loadBatch(); err != nil {
			return train.StepStats{}, err
		}
		if err := e.forward(true, scale); err != nil {
			return train.StepStats{}, err
		}
		if err := e.backward(); err != nil {
			return train.StepStats{}, err
		}
	}
	var a cuda.Args // gradient norm: fixed grid, fixed order, no atomics
	if err := e.dev.Launch("sumsq_partial", cuda.Dim3{X: cuda.NormBlocks}, cuda.Dim3{X: ewBlock}, 0,
		a.P(e.a.partials).P(e.g).L(int64(e.n))); err != nil {
		return train.StepStats{}, err
	}
	if err := e.dev.Launch("sum_f64", cuda.Dim3{X: 1}, cuda.Dim3{X: 1024}, 0,
		a.Reset().P(e.a.scalars+8).P(e.a.partials).I(cuda.NormBlocks)); err != nil {
		return train.StepStats{}, err
	}
	if err := cuda.Download(e.dev, e.scal[:2], e.a.scalars); err != nil {
		return train.StepStats{}, err
	}
	loss := e.scal[0] / float64(o.Batch*o.Seq*o.GradAccum)
	norm := math.Sqrt(e.scal[1])
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return train.StepStats{}, fmt.Errorf("gradient norm is %v", norm)
	}
	gscale := float32(1)
	if o.ClipNorm > 0 && norm > o.ClipNorm {
		gscale = float32(o.ClipNorm / norm)
	}
	lr := o.LRAt(e.step)
	e.step++
	update := e.adamw
	if e.muon != nil {
		update = e.muonStep
	}
	if err := update(lr, gscale); err != nil {
		return train.StepStats{}, err
	}
	if err := e.dev.Sync(); err != nil {
		return train.StepStats{}, err
	}
	return train.StepStats{Step: e.step, Loss: loss, Tokens: o.Batch * o.Seq * o.GradAccum, LR: lr, GradNorm: norm}, nil
}

// adamw updates every tensor (norm gains without weight decay) and refreshes
// the bf16 copy, with the CPU trainer's float32 constants (kernels.AdamW).
func (e *Engine) adamw(lr float64, gscale float32) error {
	for _, t := range e.lay.all {
		if err := e.adamwTensor(t, lr, gscale); err != nil {
			return err
		}
	}
	return nil
}

// adamwTensor is adamw's step on one tensor.
func (e *Engine) adamwTensor(t tensor, lr float64, gscale float32) error {
	o := e.opts
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	ib1 := 1 / float32(1-math.Pow(float64(b1), float64(e.step)))
	ib2 := 1 / float32(1-math.Pow(float64(b2), float64(e.step)))
	wd := float32(o.WeightDecay)
	if t.norm {
		wd = 0
	}
	var a cuda.Args
	a.P(at(e.p, t.off)).P(e.pb + cuda.DevicePtr(2*t.off)).P(at(e.g, t.off)).P(at(e.m, t.off)).P(at(e.v, t.off)).
		L(int64(t.size)).F(float32(lr)).F(b1).F(1 - b1).F(b2).F(1 - b2).F(ib1).F(ib2).F(float32(o.Eps)).F(wd).F(gscale)
	return e.dev.Launch("adamw", cuda.Dim3{X: cuda.Grid1D(int64(t.size), ewBlock, maxBlocks)}, cuda.Dim3{X: ewBlock}, 0, &a)
}

// Eval returns the mean cross-entropy over EvalBatches fixed held-out batches.
func (e *Engine) Eval() (float64, error) {
	if e.closed {
		return 0, ErrClosed
	}
	o := e.opts
	var sum float64
	err := e.dev.Do(func() error {
		if err := e.push(); err != nil {
			return err
		}
		for i := 0; i < o.EvalBatches; i++ {
			ce, err := e.lossOf(func(dst []int32) error { return e.data.Eval(dst, o.Batch, o.Seq+1, i) })
			if err != nil {
				return fmt.Errorf("eval batch %d: %w", i, err)
			}
			sum += ce
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("gpu: %w", err)
	}
	return sum / float64(o.EvalBatches), nil
}

// lossOf runs the forward pass on the rows fill writes and returns the mean
// cross-entropy (inside Do).
func (e *Engine) lossOf(fill func([]int32) error) (float64, error) {
	if err := fill(e.rows); err != nil {
		return 0, err
	}
	if err := e.loadBatch(); err != nil {
		return 0, err
	}
	if err := e.dev.Zero(e.a.scalars, 32); err != nil {
		return 0, err
	}
	if err := e.forward(false, 0); err != nil {
		return 0, err
	}
	if err := cuda.Download(e.dev, e.scal[:1], e.a.scalars); err != nil {
		return 0, err
	}
	return e.scal[0] / float64(e.B*e.T), nil
}

// Forward runs the model on rows (Batch × (Seq+1) tokens: inputs and the
// next-token targets) and returns the mean cross-entropy and, when logits is
// not nil, the (Batch·Seq, Vocab) fp32 logits. For checks against the CPU
// trainer and PyTorch.
func (e *Engine) Forward(rows []int32, logits []float32) (float64, error) {
	if e.closed {
		return 0, ErrClosed
	}
	if len(rows) != len(e.rows) {
		return 0, fmt.Errorf("gpu: Forward: %d tokens, want %d", len(rows), len(e.rows))
	}
	if logits != nil && len(logits) != e.B*e.T*e.cfg.Vocab {
		return 0, fmt.Errorf("gpu: Forward: logits has %d values, want %d", len(logits), e.B*e.T*e.cfg.Vocab)
	}
	var ce float64
	err := e.dev.Do(func() error {
		if err := e.push(); err != nil {
			return err
		}
		var err error
		if ce, err = e.lossOf(func(dst []int32) error { copy(dst, rows); return nil }); err != nil {
			return err
		}
		if logits != nil {
			return cuda.Download(e.dev, logits, e.a.logits)
		}
		return nil
	})
	return ce, err
}

// Close frees the device memory and releases the GPU.
func (e *Engine) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.dev.Do(func() error {
		if e.timer != nil {
			e.timer.Close()
		}
		return e.dev.FreeHost(e.host)
	})
	e.host = nil
	return errors.Join(err, e.dev.Close())
}
