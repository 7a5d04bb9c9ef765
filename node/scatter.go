package node

import (
	"context"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p/scatter"
)

// scatterReducer is the reducer of a node with --averaging robust (the
// default): one
// attempt of the direct scatter (p2p/scatter), each segment owner clipping
// and combining every member's whole contribution (docs/robust.md).
type scatterReducer struct{ n *Node }

// Attempt runs one attempt of the direct scatter over rg and carries out
// the accountability of its result: verdicts, report, spot check.
func (r scatterReducer) Attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers) (diloco.Stats, error) {
	n := r.n
	rs, err := n.ringSpec(rg)
	if err != nil {
		return diloco.Stats{}, err
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
	cfg := n.cfg.scatterConfig()
	cfg.Owners = rg.Owners
	if err := cfg.Validate(); err != nil { // defaults filled in, for spotCheck
		return diloco.Stats{}, err
	}
	res, st, err := scatter.AllReduce(actx, n.sc, spec, rg.Weights, b, cfg)
	stats := diloco.Stats{BytesSent: st.Sent, BytesRecv: st.Received}
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

// Failed counts and logs a failed attempt and names its culprit.
func (r scatterReducer) Failed(rg *mesh.Ring, err error) mesh.PeerID {
	return ringReducer(r).Failed(rg, err)
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

// noteVerdicts counts, in the metrics, the contributions this node's
// segments clipped hard, rejected or found opposing the others, logs each
// member so flagged with the evidence, and excludes from the run those the
// offence rule (offence.go) convicts.
func (n *Node) noteVerdicts(rg *mesh.Ring, res collective.ScatterResult) {
	seg := -1 // the segment this node owns (-1: a client)
	for _, rep := range res.Owned {
		seg = rep.Segment
	}
	self := rg.Rank(n.self)
	sums, offences := n.offences.note(rg.Members, self, rg.Weights, n.cfg.InnerSteps, rg.Step+1, seg, res.Owned)
	for i, id := range rg.Members {
		s := sums[i]
		if i == self || (s.Hard == 0 && s.Rejected == 0 && !s.opposed()) {
			continue
		}
		n.met.robustFlags.WithLabelValues("clipped").Add(float64(s.Hard))
		n.met.robustFlags.WithLabelValues("rejected").Add(float64(s.Rejected))
		if s.opposed() {
			n.met.robustFlags.WithLabelValues("opposed").Inc()
		}
		n.log.Warn("robust averaging flagged a contribution", "step", rg.Step+1, "member", id,
			"chunks_clipped_hard", s.Hard, "chunks_rejected", s.Rejected, "cosine", s.Cos(), "segment", seg)
	}
	for _, o := range offences {
		n.exclude(rg.Members[o.member], o.evidence)
	}
}

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
