package node

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/intellect-node/intellect-node/mesh"
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
	var res memResiduals
	return func(ctx context.Context, deltas [][]float32, weights []float32, out []float32) error {
		k := len(deltas)
		residuals := res.get(cfg.ErrorFeedback, k, len(out))
		ring := collective.NewMemRing(k, max(cfg.Shards, 1))
		vecs := make([][]float32, k)
		for i := range k {
			vecs[i] = append([]float32(nil), deltas[i]...)
		}
		err := runMembers(k, "all-reduce", func(i int) error {
			_, err := collective.AllReduce(ctx, ring[i], i, weights, vecs[i], residuals[i], cfg)
			return err
		})
		if err == nil {
			copy(out, vecs[0])
		}
		return err
	}
}

// ScatterReducer is MeshReducer for --averaging robust: the direct scatter
// with robust owners (collective.ScatterAllReduce) over an in-memory mesh,
// member i at rank i, keeping residuals with cfg.ErrorFeedback. Like the
// network's nodes, every owner applies the exclusion rule (offence.go) to
// its segments from one call to the next; a member some owner convicted
// takes part with weight 0 from the next call on, as the network leaves it
// out of its rings (its rank kept, so residuals keep their places).
func ScatterReducer(cfg collective.ScatterConfig) train.Reducer {
	return ScatterReducerWatched(cfg, nil)
}

// OwnerView is what one in-memory owner's segments saw at one call of a
// ScatterReducer: per member (by rank) the cosine of its contribution with
// the others' coordinate-wise median (offence.go; 0 for itself and for a
// member taking no part), and the members it convicted, with the evidence.
type OwnerView struct {
	Step     uint64 // calls so far, this one included
	Owner    int
	Cos      []float64
	Excluded map[int]string
}

// ScatterReducerWatched is ScatterReducer calling watch (if not nil) with
// every owner's view after each call.
func ScatterReducerWatched(cfg collective.ScatterConfig, watch func(OwnerView)) train.Reducer {
	var res memResiduals
	var books []offenceBook
	var excluded []bool
	var step uint64
	return func(ctx context.Context, deltas [][]float32, weights []float32, out []float32) error {
		k := len(deltas)
		if books == nil || len(books) != k {
			books, excluded = make([]offenceBook, k), make([]bool, k)
		}
		step++
		w := slices.Clone(weights)
		for i := range w {
			if excluded[i] {
				w[i] = 0
			}
		}
		residuals := res.get(cfg.ErrorFeedback, k, len(out))
		mm := collective.NewMemMesh(k, 2*max(cfg.Shards, 1))
		outs := make([][]float32, k)
		results := make([]collective.ScatterResult, k)
		err := runMembers(k, "scatter", func(i int) error {
			outs[i] = make([]float32, len(out))
			b := collective.Buffers{Src: deltas[i], Dst: outs[i]}
			if residuals[i] != nil {
				b.ResIn, b.ResOut = residuals[i], make([]float32, len(out))
			}
			var err error
			results[i], err = collective.ScatterAllReduce(ctx, mm[i], i, w, b, cfg)
			if err == nil && residuals[i] != nil {
				residuals[i] = b.ResOut
			}
			return err
		})
		if err != nil {
			return err
		}
		copy(out, outs[0])
		noteMemOffences(books, excluded, w, cfg, step, results, watch)
		return nil
	}
}

// noteMemOffences applies the exclusion rule of every in-memory owner
// still taking part (member i named by its rank) to its segments of one
// reduction, marking the members convicted.
func noteMemOffences(books []offenceBook, excluded []bool, w []float32, cfg collective.ScatterConfig, step uint64, results []collective.ScatterResult, watch func(OwnerView)) {
	ids := make([]mesh.PeerID, len(books))
	for i := range ids {
		ids[i] = mesh.PeerID(strconv.Itoa(i))
	}
	h := math.MaxInt32 // no H known: no weight conviction (the rule caps weights anyway)
	if cfg.Robust.MaxWeight > 0 {
		h = int(cfg.Robust.MaxWeight)
	}
	for i, r := range results {
		if excluded[i] || len(r.Owned) == 0 {
			continue
		}
		sums, offs := books[i].note(ids, i, w, h, step, r.Owned[0].Segment, r.Owned)
		view := OwnerView{Step: step, Owner: i, Cos: make([]float64, len(sums)), Excluded: map[int]string{}}
		for j, s := range sums {
			if j != i && w[j] > 0 {
				view.Cos[j] = s.Cos()
			}
		}
		for _, o := range offs {
			excluded[o.member] = true
			view.Excluded[o.member] = o.evidence
		}
		if watch != nil {
			watch(view)
		}
	}
}

// memResiduals holds the in-memory members' error-feedback residuals from
// one reduction to the next.
type memResiduals struct{ bufs [][]float32 }

// get returns k residuals of n values, made (zero) on first use, when on;
// k nil slices otherwise. Members write their new residual into their slot.
func (r *memResiduals) get(on bool, k, n int) [][]float32 {
	if !on {
		return make([][]float32, k)
	}
	if r.bufs == nil {
		r.bufs = make([][]float32, k)
		for i := range r.bufs {
			r.bufs[i] = make([]float32, n)
		}
	}
	return r.bufs
}

// runMembers runs member(i) for the k members at once and returns the
// first error, naming its member.
func runMembers(k int, what string, member func(i int) error) error {
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { errs[i] = member(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("node: in-memory %s, member %d: %w", what, i, err)
		}
	}
	return nil
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
