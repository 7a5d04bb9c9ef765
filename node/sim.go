package node

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/intellect-node/intellect-node/train"
)

// simEngine is the "sim" device: inner steps are a calibrated sleep instead of
// compute, over a real-size parameter vector, so that many nodes can run the
// real membership protocol and the real all-reduce on a small machine (the
// WAN benchmark emulates 16–32 nodes on 2 cores with it). Its "training"
// pulls the parameters towards a fixed target, with worker-specific noise, so
// that pseudo-gradients are non-trivial, differ between workers, and the held-
// out loss (mean squared distance to the target) falls.
type simEngine struct {
	params []float32
	seed   uint64
	worker uint64
	step   int
	dur    time.Duration
	tokens int
	lr     float32
}

// simStride: each inner step updates one parameter in simStride, so a step
// costs little CPU however large the vector is.
const simStride = 8

func newSimEngine(opts train.Options, dur time.Duration) (*simEngine, error) {
	if dur <= 0 {
		return nil, fmt.Errorf("%w: the sim device needs --sim-step > 0", ErrBadConfig)
	}
	e := &simEngine{params: make([]float32, opts.Model.NumParams()), seed: opts.Seed, worker: opts.Worker,
		dur: dur, tokens: opts.Batch * opts.Seq * opts.GradAccum, lr: 0.05}
	for i := range e.params {
		e.params[i] = simNoise(e.seed, uint64(i)) // the same on every member: the run's seed
	}
	return e, nil
}

// simNoise is a deterministic value in [-1, 1) for (key, i).
func simNoise(key, i uint64) float32 {
	x := key ^ (i * 0x9e3779b97f4a7c15)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float32(x>>40)/float32(1<<23) - 1
}

func (e *simEngine) target(i int) float32 { return 0.5 * simNoise(e.seed^0x7a, uint64(i)) }

func (e *simEngine) Step() (train.StepStats, error) {
	start := time.Now()
	time.Sleep(e.dur)
	key := e.seed ^ e.worker*0x2545f4914f6cdd1d ^ uint64(e.step)
	for i := e.step % simStride; i < len(e.params); i += simStride {
		g := e.params[i] - e.target(i) + 0.2*simNoise(key, uint64(i))
		e.params[i] -= e.lr * g
	}
	e.step++
	loss, _ := e.Eval()
	return train.StepStats{Step: e.step, Loss: loss, Tokens: e.tokens, LR: float64(e.lr), Compute: time.Since(start)}, nil
}

// Eval is the mean squared distance to the target over a fixed sample.
func (e *simEngine) Eval() (float64, error) {
	var s float64
	var n int
	for i := 0; i < len(e.params); i += 97 {
		d := float64(e.params[i] - e.target(i))
		s += d * d
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return s / float64(n), nil
}

func (e *simEngine) Params() []float32 { return e.params }

func (e *simEngine) SetParams(p []float32) error {
	if len(p) != len(e.params) {
		return fmt.Errorf("node: sim engine has %d params, got %d", len(e.params), len(p))
	}
	copy(e.params, p)
	return nil
}

func (e *simEngine) StepCount() int { return e.step }

func (e *simEngine) Save(dir string) error {
	dir = filepath.Clean(dir)
	return train.WriteDirAtomic(filepath.Dir(dir), filepath.Base(dir), func(tmp string) error {
		return train.WriteSafetensors(filepath.Join(tmp, "model.safetensors"),
			[]train.Tensor{{Name: "params", Shape: []int{len(e.params)}, Data: e.params}},
			map[string]string{"device": "sim", "step": fmt.Sprint(e.step)})
	}, 0)
}

func (e *simEngine) Close() error { return nil }

var _ train.Engine = (*simEngine)(nil)
