package node

import (
	"fmt"
	"io"

	"github.com/intellect-node/intellect-node/mesh/account"
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
// blocking or overlapped with fixed cfg.OverlapSteps, and whole phases: a
// run under the close rule (--close-fraction) matches it while no member's
// phase is cut short, which timing decides (run with --close-fraction 0 to
// compare bit for bit).
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
		OuterLR: cfg.OuterLR, OuterMomentum: *cfg.OuterMomentum, WorkerMomentum: *cfg.WorkerMomentum}
	if cfg.Averaging == AveragingRobust {
		sc := cfg.scatterConfig()
		j, err := account.NewJudge(sc, nil)
		if err != nil {
			return diloco.LocalConfig{}, err
		}
		d.Averaging = diloco.Averaging{Scatter: &sc, Judge: j}
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
