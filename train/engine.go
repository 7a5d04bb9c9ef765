package train

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// StepStats describes one optimizer step.
type StepStats struct {
	Step     int           // optimizer steps completed, this one included
	Loss     float64       // mean cross-entropy over the step's tokens (nats/token, z-loss excluded)
	Tokens   int           // tokens processed in this step
	LR       float64       // learning rate used
	GradNorm float64       // global gradient norm before clipping
	Compute  time.Duration // wall time of the step
}

// Engine is what a DiLoCo worker drives; the CPU Trainer implements it, a
// CUDA engine will too. An Engine is not safe for concurrent use.
type Engine interface {
	// Step runs one optimizer step (GradAccum micro-batches) on this worker's data.
	Step() (StepStats, error)
	// Eval returns the mean cross-entropy on the fixed held-out set; identical
	// parameters give identical results on machines running the same kernels.
	Eval() (float64, error)
	// Params returns the live flat parameter vector (aliased, laid out as
	// Config.Layout()); the caller may overwrite it between steps.
	Params() []float32
	// SetParams copies p into the parameters.
	SetParams(p []float32) error
	// StepCount returns the optimizer steps taken so far.
	StepCount() int
	// Save writes the engine's full state (model, AdamW moments, data position)
	// as a checkpoint directory at dir, atomically.
	Save(dir string) error
	// Close releases the engine's resources.
	Close() error
}

var engines = struct {
	sync.Mutex
	m map[string]func(Options, Source) (Engine, error)
}{m: map[string]func(Options, Source) (Engine, error){}}

// RegisterEngine makes an engine constructor available under a device name
// ("cpu" is registered by this package). It panics if the name is taken.
func RegisterEngine(device string, f func(Options, Source) (Engine, error)) {
	engines.Lock()
	defer engines.Unlock()
	if _, dup := engines.m[device]; dup {
		panic("train: engine registered twice: " + device)
	}
	engines.m[device] = f
}

// Devices returns the registered engine names, sorted.
func Devices() []string {
	engines.Lock()
	defer engines.Unlock()
	var ds []string
	for d := range engines.m {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// NewEngine builds the engine registered for device.
func NewEngine(device string, opts Options, data Source) (Engine, error) {
	engines.Lock()
	f, ok := engines.m[device]
	engines.Unlock()
	if !ok {
		return nil, fmt.Errorf("train: no engine for device %q (have %v)", device, Devices())
	}
	return f(opts, data)
}

func init() {
	RegisterEngine("cpu", func(o Options, s Source) (Engine, error) { return NewTrainer(o, s) })
}

// Hash returns the hex SHA-256 of the little-endian bytes of params.
func Hash(params []float32) string {
	h := sha256.New()
	var buf [4096]byte
	for len(params) > 0 {
		n := min(len(params), len(buf)/4)
		for i, v := range params[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		h.Write(buf[:4*n])
		params = params[n:]
	}
	return hex.EncodeToString(h.Sum(nil))
}
