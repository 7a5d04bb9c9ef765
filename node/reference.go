package node

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The in-process reference of a network run: what a ring of members running
// cfg computes, without processes or network (train.RunDiLoCo). Tests check
// the network against it bit for bit, and convergence sweeps use it.

// ReferenceDiLoCo returns the in-process DiLoCo run that a network of members
// (in ring order, as `--ring-order sorted` orders them), each started with
// cfg, performs in its first outer steps while the ring holds all of them,
// blocking or overlapped with fixed cfg.OverlapSteps.
// cfg is validated (defaults filled) first.
func ReferenceDiLoCo(cfg Config, members []peer.ID) (train.DiLoCoConfig, error) {
	if err := cfg.Validate(); err != nil {
		return train.DiLoCoConfig{}, err
	}
	opts, err := trainOptions(cfg, "")
	if err != nil {
		return train.DiLoCoConfig{}, err
	}
	if opts.Model, err = dataVocab(cfg, opts.Model); err != nil {
		return train.DiLoCoConfig{}, err
	}
	d := train.DiLoCoConfig{Options: opts, Inner: cfg.InnerSteps, Outer: int(cfg.MaxOuterSteps),
		OuterLR: cfg.OuterLR, OuterMomentum: *cfg.OuterMomentum, Reduce: MeshReducer(allReduceConfig(cfg))}
	if cfg.Averaging == AveragingRobust {
		d.Reduce = ScatterReducer(scatterConfig(cfg))
	}
	if cfg.Overlap {
		if cfg.OverlapSteps == 0 {
			return train.DiLoCoConfig{}, fmt.Errorf("%w: the reference of an overlapped run needs a fixed --overlap-steps", ErrBadConfig)
		}
		d.OverlapSteps = cfg.OverlapSteps
	}
	for _, id := range members {
		d.Workers = append(d.Workers, workerID(id))
	}
	return d, nil
}

// MeshReducer returns a train.Reducer that runs collective.AllReduce with cfg over
// an in-memory ring, member i at rank i: the bits a network ring of the same
// order computes. With cfg.ErrorFeedback it keeps each member's residual
// from one call to the next, as a node does.
func MeshReducer(cfg collective.AllReduceConfig) train.Reducer {
	var residuals [][]float32
	return func(ctx context.Context, deltas [][]float32, weights []float32, out []float32) error {
		k := len(deltas)
		if cfg.ErrorFeedback && residuals == nil {
			residuals = make([][]float32, k)
			for i := range residuals {
				residuals[i] = make([]float32, len(out))
			}
		}
		ring := collective.NewMemRing(k, max(cfg.Shards, 1))
		errs := make([]error, k)
		vecs := make([][]float32, k)
		var wg sync.WaitGroup
		for i := range k {
			vecs[i] = append([]float32(nil), deltas[i]...)
			var res []float32
			if residuals != nil {
				res = residuals[i]
			}
			wg.Go(func() { _, errs[i] = collective.AllReduce(ctx, ring[i], i, weights, vecs[i], res, cfg) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("node: in-memory all-reduce, member %d: %w", i, err)
			}
		}
		copy(out, vecs[0])
		return nil
	}
}

// ScatterReducer is MeshReducer for --averaging robust: the direct scatter
// with robust owners (collective.ScatterAllReduce) over an in-memory mesh,
// member i at rank i, keeping residuals with cfg.ErrorFeedback.
func ScatterReducer(cfg collective.ScatterConfig) train.Reducer {
	var residuals [][]float32
	return func(ctx context.Context, deltas [][]float32, weights []float32, out []float32) error {
		k := len(deltas)
		if cfg.ErrorFeedback && residuals == nil {
			residuals = make([][]float32, k)
			for i := range residuals {
				residuals[i] = make([]float32, len(out))
			}
		}
		mesh := collective.NewMemMesh(k, 2*max(cfg.Shards, 1))
		errs := make([]error, k)
		outs := make([][]float32, k)
		var wg sync.WaitGroup
		for i := range k {
			outs[i] = make([]float32, len(out))
			b := collective.Buffers{Src: deltas[i], Dst: outs[i]}
			if residuals != nil {
				b.ResIn, b.ResOut = residuals[i], make([]float32, len(out))
			}
			wg.Go(func() {
				_, errs[i] = collective.ScatterAllReduce(ctx, mesh[i], i, weights, b, cfg)
				if errs[i] == nil && residuals != nil {
					residuals[i] = b.ResOut
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("node: in-memory scatter, member %d: %w", i, err)
			}
		}
		copy(out, outs[0])
		return nil
	}
}

// allReduceConfig is the all-reduce configuration of a node running cfg.
func allReduceConfig(cfg Config) collective.AllReduceConfig {
	c := collective.AllReduceConfig{Shards: cfg.Shards, ErrorFeedback: cfg.ErrorFeedback}
	if cfg.FP32 {
		c.Codec = collective.CodecFP32
	}
	return c
}

// dataVocab fits the model's vocabulary to cfg.Data's, as a node does.
func dataVocab(cfg Config, m train.Config) (train.Config, error) {
	if cfg.Data == "" {
		return m, nil
	}
	src, err := train.OpenSource(cfg.Data)
	if err != nil {
		return m, err
	}
	if c, ok := src.(io.Closer); ok {
		defer c.Close()
	}
	return train.FitVocab(m, src, cfg.ConfigFile == "")
}
