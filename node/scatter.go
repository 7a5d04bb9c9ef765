package node

import (
	"context"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/scatter"
)

// scatterReducer is the reducer of a node with --averaging robust (the
// default): one attempt of the direct scatter (p2p/scatter), each segment
// owner clipping and combining every member's whole contribution
// (docs/robust.md).
type scatterReducer struct{ n *Node }

// Attempt runs one attempt of the direct scatter over rg and carries out
// the accountability of its result: verdicts, report, spot check.
func (r scatterReducer) Attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers) (st diloco.Stats, err error) {
	p2p.DoPart(ctx, partAveraging, func(ctx context.Context) { st, err = r.attempt(ctx, rg, b, nil) })
	return st, err
}

// attempt is Attempt over the scatter's transport, wrapped by wrap if not
// nil (scatter.Spec.Wrap: the node tests' forging owner).
func (r scatterReducer) attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers,
	wrap func(collective.MeshTransport) collective.MeshTransport) (diloco.Stats, error) {
	n := r.n
	rs, err := n.ringSpec(rg)
	if err != nil {
		return diloco.Stats{}, err
	}
	spec := scatter.Spec{ID: rs.ID, Step: rs.Step, Members: rs.Members, Self: rs.Self, SendRate: rs.SendRate, Wrap: wrap}
	n.log.Info("all-reduce start", "step", rg.Step+1, "ring", rg.ID, "members", len(rg.Members), "owners", segmentOwners(rg),
		"rank", spec.Self, "averaging", "robust")
	actx, end := n.beginAttempt(ctx, rg)
	defer end()
	cfg := n.cfg.scatterConfig()
	cfg.Owners = rg.Owners
	if err := cfg.Validate(); err != nil { // defaults filled in, for the accountability
		return diloco.Stats{}, err
	}
	res, st, err := scatter.AllReduce(actx, n.sc, spec, rg.Weights, b, cfg)
	stats := diloco.Stats{BytesSent: st.Sent, BytesRecv: st.Received}
	if err != nil {
		return stats, attemptErr(actx, err)
	}
	n.sc.Keep(rg.ID, res.Owned)
	n.settle(ctx, rg, cfg, res)
	return stats, nil
}

// Failed counts and logs a failed attempt and names its culprit.
func (r scatterReducer) Failed(rg *mesh.Ring, err error) mesh.PeerID {
	return ringReducer(r).Failed(rg, err)
}

// exclude blocks id (p2p.Host.Block) with the evidence, counting it by
// reason.
func (n *Node) exclude(id mesh.PeerID, reason, evidence string) {
	pid, err := peerID(id)
	if err != nil {
		return
	}
	if n.host.Block(pid, evidence) {
		n.met.exclusions.WithLabelValues(reason).Inc()
	}
}

// segmentOwners is how many members of a direct-scatter ring own a segment:
// all of them, unless some do not reach every other directly.
func segmentOwners(rg *mesh.Ring) int {
	if rg.Owners == nil {
		return len(rg.Members)
	}
	return len(rg.Owners)
}
