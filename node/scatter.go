package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/intellect-node/intellect-node/p2p/scatter"
)

// scatterReducer is the reducer of a node with --averaging robust: one
// attempt of the direct scatter (p2p/scatter), each segment owner clipping
// and combining every member's whole contribution (docs/robust.md).
type scatterReducer struct{ n *Node }

func (r scatterReducer) attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers) (ring.Stats, error) {
	n := r.n
	rs, err := n.ringSpec(rg)
	if err != nil {
		return ring.Stats{}, err
	}
	spec := scatter.Spec{ID: rs.ID, Step: rs.Step, Members: rs.Members, Self: rs.Self, SendRate: rs.SendRate}
	n.log.Info("all-reduce start", "step", rg.Step+1, "ring", rg.ID, "members", len(rg.Members), "rank", spec.Self, "averaging", "robust")
	actx, cancel := context.WithTimeout(ctx, n.cfg.AllReduceTimeout)
	defer cancel()
	actx = n.inflight.begin(actx, rg)
	defer n.inflight.end()
	res, st, err := scatter.AllReduce(actx, n.sc, spec, rg.Weights, b, scatterConfig(n.cfg))
	stats := ring.Stats{BytesSent: st.Sent, BytesRecv: st.Received}
	if err != nil {
		var dead *deadMemberError
		if errors.As(context.Cause(actx), &dead) {
			err = dead
		}
		return stats, err
	}
	n.noteVerdicts(rg, res)
	return stats, nil
}

func (r scatterReducer) failed(rg *mesh.Ring, err error) mesh.PeerID {
	return ringReducer(r).failed(rg, err)
}

// scatterConfig is the direct scatter's configuration of a node running
// cfg: weights (inner steps claimed) capped at the run's H.
func scatterConfig(cfg Config) collective.ScatterConfig {
	return collective.ScatterConfig{Shards: cfg.Shards, ErrorFeedback: cfg.ErrorFeedback,
		Robust: collective.RobustConfig{MaxWeight: float32(cfg.InnerSteps)}}
}

// noteVerdicts counts, in the metrics, the contributions this node's
// segments clipped hard or rejected, and logs each member so flagged with
// the evidence (chunks flagged, largest norm against the median).
func (n *Node) noteVerdicts(rg *mesh.Ring, res collective.ScatterResult) {
	k := len(rg.Members)
	hard, rejected := make([]int, k), make([]int, k)
	for _, rep := range res.Owned {
		for _, chunk := range rep.Verdicts {
			for i, v := range chunk {
				switch {
				case i >= k:
				case v.Flag == collective.FlagHard:
					hard[i]++
				case v.Flag == collective.FlagRejected:
					rejected[i]++
				}
			}
		}
	}
	for i, id := range rg.Members {
		if hard[i] == 0 && rejected[i] == 0 {
			continue
		}
		n.met.robustFlags.WithLabelValues("clipped").Add(float64(hard[i]))
		n.met.robustFlags.WithLabelValues("rejected").Add(float64(rejected[i]))
		n.log.Warn("robust averaging flagged a contribution", "step", rg.Step+1, "member", id,
			"chunks_clipped_hard", hard[i], "chunks_rejected", rejected[i], "segment", rg.Rank(n.self),
			"evidence", fmt.Sprintf("norm above %gx the median (clipped), or not finite (rejected)", flagNorm))
	}
}

// flagNorm is the norm ratio to the median above which a contribution is
// flagged (collective.RobustConfig's ClipFactor × FlagFactor defaults).
var flagNorm = func() float64 {
	c := collective.RobustConfig{}
	c.Validate()
	return c.ClipFactor * c.FlagFactor
}()
