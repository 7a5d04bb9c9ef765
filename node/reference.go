package node

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The in-process reference of a network run: what a ring of members running
// cfg computes, without processes or network (diloco.RunLocal). Tests check
// the network against it bit for bit, and convergence sweeps use it.

// ReferenceDiLoCo returns the in-process DiLoCo run that a network of members
// (in ring order, as `--ring-order sorted` orders them), each started with
// cfg, performs in its first outer steps while the ring holds all of them,
// blocking or overlapped with fixed cfg.OverlapSteps.
// cfg is validated (defaults filled) first.
func ReferenceDiLoCo(cfg Config, members []peer.ID) (diloco.LocalConfig, error) {
	if err := cfg.Validate(); err != nil {
		return diloco.LocalConfig{}, err
	}
	opts, err := trainOptions(cfg, "")
	if err != nil {
		return diloco.LocalConfig{}, err
	}
	if opts.Model, err = dataVocab(cfg, opts.Model); err != nil {
		return diloco.LocalConfig{}, err
	}
	d := diloco.LocalConfig{Options: opts, Inner: cfg.InnerSteps, Outer: int(cfg.MaxOuterSteps),
		OuterLR: cfg.OuterLR, OuterMomentum: *cfg.OuterMomentum}
	if cfg.Averaging == AveragingRobust {
		sc := cfg.scatterConfig()
		d.Averaging = diloco.Averaging{Scatter: &sc, Judge: ScatterJudge(sc, nil)}
	} else {
		ar := cfg.allReduceConfig()
		d.Averaging = diloco.Averaging{Ring: &ar}
	}
	if cfg.Overlap {
		if cfg.OverlapSteps == 0 {
			return diloco.LocalConfig{}, fmt.Errorf("%w: the reference of an overlapped run needs a fixed --overlap-steps", ErrBadConfig)
		}
		d.Lag = cfg.OverlapSteps
	}
	for _, id := range members {
		d.Workers = append(d.Workers, workerID(id))
	}
	return d, nil
}

// OwnerView is what one in-memory owner's segments saw at one reduction
// of an in-process run: per ring rank the cosine of its member's
// contribution with the others' coordinate-wise median (offence.go; 0 for
// the owner itself and for a member taking no part), and the members (by
// index in the run) it convicted, with the evidence.
type OwnerView struct {
	Step     uint64 // the outer step the reduction makes
	Owner    int    // the owner's index in the run
	Cos      []float64
	Excluded map[int]string
}

// ScatterJudge returns the exclusion rule of robust averaging for an
// in-process run of the direct scatter with cfg: like the network's nodes,
// every owner still taking part applies it (offence.go) to its segments,
// from one reduction to the next. watch, if not nil, gets every owner's
// view after each reduction, owners in ring order.
func ScatterJudge(cfg collective.ScatterConfig, watch func(OwnerView)) diloco.Judge {
	h := math.MaxInt32 // no H known: no weight conviction (the rule caps weights anyway)
	if cfg.Robust.MaxWeight > 0 {
		h = int(cfg.Robust.MaxWeight)
	}
	return &memJudge{h: h, watch: watch, books: map[int]*offenceBook{}, excluded: map[int]bool{}}
}

// memJudge is the in-memory owners' offence books.
type memJudge struct {
	h        int
	watch    func(OwnerView)
	books    map[int]*offenceBook // by owner
	excluded map[int]bool
}

// Judge applies the rule of every owner of one reduction still taking part
// to its segments, in ring order, and returns the members convicted.
func (j *memJudge) Judge(step uint64, members []int, w []float32, results []collective.ScatterResult) []int {
	ids := make([]mesh.PeerID, len(members))
	for r, i := range members {
		ids[r] = mesh.PeerID(strconv.Itoa(i))
	}
	var convicted []int
	for r, res := range results {
		owner := members[r]
		if j.excluded[owner] || len(res.Owned) == 0 {
			continue
		}
		if j.books[owner] == nil {
			j.books[owner] = &offenceBook{}
		}
		sums, offs := j.books[owner].note(ids, r, w, j.h, step, res.Owned[0].Segment, res.Owned)
		view := OwnerView{Step: step, Owner: owner, Cos: make([]float64, len(sums)), Excluded: map[int]string{}}
		for k, s := range sums {
			if k != r && w[k] > 0 {
				view.Cos[k] = s.Cos()
			}
		}
		for _, o := range offs {
			m := members[o.member]
			j.excluded[m] = true
			convicted = append(convicted, m)
			view.Excluded[m] = o.evidence
		}
		if j.watch != nil {
			j.watch(view)
		}
	}
	return convicted
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
