package node

import (
	"context"
	"fmt"
	"sync"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/intellect-node/intellect-node/p2p/scatter"
)

// scatterReducer is the reducer of a node with --averaging robust (the
// default): one
// attempt of the direct scatter (p2p/scatter), each segment owner clipping
// and combining every member's whole contribution (docs/robust.md).
type scatterReducer struct{ n *Node }

func (r scatterReducer) attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers) (ring.Stats, error) {
	n := r.n
	rs, err := n.ringSpec(rg)
	if err != nil {
		return ring.Stats{}, err
	}
	spec := scatter.Spec{ID: rs.ID, Step: rs.Step, Members: rs.Members, Self: rs.Self, SendRate: rs.SendRate, Wrap: n.scatterWrap}
	owners := len(rg.Owners)
	if rg.Owners == nil {
		owners = len(rg.Members)
	}
	n.log.Info("all-reduce start", "step", rg.Step+1, "ring", rg.ID, "members", len(rg.Members), "owners", owners,
		"rank", spec.Self, "averaging", "robust")
	actx, end := n.beginAttempt(ctx, rg)
	defer end()
	cfg := scatterConfig(n.cfg)
	cfg.Owners = rg.Owners
	if err := cfg.Validate(); err != nil { // defaults filled in, for spotCheck
		return ring.Stats{}, err
	}
	res, st, err := scatter.AllReduce(actx, n.sc, spec, rg.Weights, b, cfg)
	stats := ring.Stats{BytesSent: st.Sent, BytesRecv: st.Received}
	if err != nil {
		return stats, attemptErr(actx, err)
	}
	n.noteVerdicts(rg, res)
	n.publishReport(rg, res.Owned)
	n.noteSent(rg, segmentOwners(rg), res)
	n.sc.Keep(rg.ID, res.Owned)
	n.spotCheck(ctx, rg, cfg, res)
	return stats, nil
}

func (r scatterReducer) failed(rg *mesh.Ring, err error) mesh.PeerID {
	return ringReducer(r).failed(rg, err)
}

// segmentOwners returns the member index owning each segment of rg.
func segmentOwners(rg *mesh.Ring) []int {
	if rg.Owners != nil {
		return rg.Owners
	}
	owners := make([]int, len(rg.Members))
	for i := range owners {
		owners[i] = i
	}
	return owners
}

// scatterConfig is the direct scatter's configuration of a node running
// cfg: weights (inner steps claimed) capped at the run's H.
func scatterConfig(cfg Config) collective.ScatterConfig {
	return collective.ScatterConfig{Shards: cfg.Shards, ErrorFeedback: cfg.ErrorFeedback, Audit: true,
		Robust: collective.RobustConfig{MaxWeight: float32(cfg.InnerSteps)}}
}

// noteVerdicts counts, in the metrics, the contributions this node's
// segments clipped hard or rejected, logs each member so flagged with the
// evidence, and excludes from the run a member flagged in excludeAfter
// steps in a row, or one whose claimed weight exceeds H (its own signed
// Ready said so): provable misbehaviour, not an honest outlier.
func (n *Node) noteVerdicts(rg *mesh.Ring, res collective.ScatterResult) {
	hard, rejected := verdictCounts(len(rg.Members), res)
	seg := -1 // the segment this node owns (-1: a client)
	for _, rep := range res.Owned {
		seg = rep.Segment
	}
	for i, id := range rg.Members {
		if id == n.self {
			continue
		}
		if w := rg.Weights[i]; w > float32(n.cfg.InnerSteps) {
			n.exclude(id, fmt.Sprintf("claimed a weight of %g inner steps at step %d; the run's H is %d", w, rg.Step+1, n.cfg.InnerSteps))
			continue
		}
		flagged := hard[i] > 0 || rejected[i] > 0
		steps := n.offences.note(id, rg.Step+1, flagged)
		if !flagged {
			continue
		}
		n.met.robustFlags.WithLabelValues("clipped").Add(float64(hard[i]))
		n.met.robustFlags.WithLabelValues("rejected").Add(float64(rejected[i]))
		n.log.Warn("robust averaging flagged a contribution", "step", rg.Step+1, "member", id,
			"chunks_clipped_hard", hard[i], "chunks_rejected", rejected[i], "segment", seg)
		if len(steps) >= excludeAfter {
			n.exclude(id, fmt.Sprintf("its contributions to segment %d were flagged at steps %v (norm above %gx the median, or not finite)",
				seg, steps, flagNorm))
		}
	}
}

// verdictCounts counts, per member, the chunks of this node's segments
// that clipped its contribution hard or rejected it.
func verdictCounts(k int, res collective.ScatterResult) (hard, rejected []int) {
	hard, rejected = make([]int, k), make([]int, k)
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
	return hard, rejected
}

// excludeAfter is how many outer steps in a row a member's contributions
// must be flagged before it is excluded.
const excludeAfter = 3

// exclude blocks id (p2p.Host.Block) with the evidence.
func (n *Node) exclude(id mesh.PeerID, evidence string) {
	pid, err := peerID(id)
	if err != nil {
		return
	}
	if n.host.Block(pid, evidence) {
		n.met.exclusions.Inc()
	}
}

// offenceLog remembers, per member, the run of consecutive outer steps in
// which its contributions were flagged.
type offenceLog struct {
	mu    sync.Mutex
	steps map[mesh.PeerID][]uint64
}

// note records whether id was flagged at step and returns its current run
// of consecutive flagged steps.
func (l *offenceLog) note(id mesh.PeerID, step uint64, flagged bool) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.steps == nil {
		l.steps = make(map[mesh.PeerID][]uint64)
	}
	run := l.steps[id]
	if !flagged || (len(run) > 0 && run[len(run)-1]+1 != step) {
		run = run[:0]
	}
	if flagged {
		run = append(run, step)
	}
	if len(run) == 0 {
		delete(l.steps, id)
		return nil
	}
	l.steps[id] = run
	return append([]uint64(nil), run...)
}

// flagNorm is the norm ratio to the median above which a contribution is
// flagged (collective.RobustConfig's ClipFactor × FlagFactor defaults).
var flagNorm = func() float64 {
	c := collective.RobustConfig{}
	c.Validate()
	return c.ClipFactor * c.FlagFactor
}()
