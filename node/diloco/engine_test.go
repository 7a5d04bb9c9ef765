package diloco

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/intellect-node/intellect-node/train"
)

// testEngine is a small deterministic train.Engine: each inner step pulls
// one parameter in testStride towards a fixed target, with noise that
// depends on the worker, so pseudo-gradients are non-trivial and differ
// between members; Eval is the mean squared distance to the target. dur,
// if set, is the time a step takes.
type testEngine struct {
	params []float32
	seed   uint64
	worker uint64
	step   int
	dur    time.Duration
	evals  int
}

// testStride: each inner step updates one parameter in testStride.
const testStride = 8

func newTestEngine(n int, seed, worker uint64, dur time.Duration) *testEngine {
	e := &testEngine{params: make([]float32, n), seed: seed, worker: worker, dur: dur}
	for i := range e.params {
		e.params[i] = testNoise(seed, uint64(i)) // the same on every member
	}
	return e
}

// testNoise is a deterministic value in [-1, 1) for (key, i).
func testNoise(key, i uint64) float32 {
	x := key ^ (i * 0x9e3779b97f4a7c15)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float32(x>>40)/float32(1<<23) - 1
}

func (e *testEngine) target(i int) float32 { return 0.5 * testNoise(e.seed^0x7a, uint64(i)) }

func (e *testEngine) Step() (train.StepStats, error) {
	start := time.Now()
	if e.dur > 0 {
		time.Sleep(e.dur) // the step's compute
	}
	key := e.seed ^ e.worker*0x2545f4914f6cdd1d ^ uint64(e.step)
	for i := e.step % testStride; i < len(e.params); i += testStride {
		g := e.params[i] - e.target(i) + 0.2*testNoise(key, uint64(i))
		e.params[i] -= 0.05 * g
	}
	e.step++
	return train.StepStats{Step: e.step, Loss: 1, Tokens: 16, Compute: time.Since(start)}, nil
}

// Eval is the mean squared distance to the target.
func (e *testEngine) Eval() (float64, error) {
	e.evals++
	var s float64
	for i, p := range e.params {
		d := float64(p - e.target(i))
		s += d * d
	}
	return s / float64(len(e.params)), nil
}

func (e *testEngine) Params() []float32 { return e.params }

func (e *testEngine) SetParams(p []float32) error {
	if len(p) != len(e.params) {
		return fmt.Errorf("test engine has %d params, got %d", len(e.params), len(p))
	}
	copy(e.params, p)
	return nil
}

func (e *testEngine) StepCount() int    { return e.step }
func (e *testEngine) Save(string) error { return nil }
func (e *testEngine) Close() error      { return nil }

var _ train.Engine = (*testEngine)(nil)

// testVec returns n deterministic values in [-scale, scale).
func testVec(seed uint64, n int, scale float32) []float32 {
	rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * (2*rng.Float32() - 1)
	}
	return v
}
