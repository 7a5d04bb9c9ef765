package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ringReducer is the diloco.Reducer of a running node with --averaging
// mean: one attempt of the ring all-reduce over libp2p streams
// (ring.Service).
type ringReducer struct{ n *Node }

// Attempt runs one attempt over rg (allReduce).
func (r ringReducer) Attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers) (st diloco.Stats, err error) {
	p2p.DoPart(ctx, partAveraging, func(ctx context.Context) {
		var rs ring.Stats
		rs, err = r.n.allReduce(ctx, rg, b)
		st = diloco.Stats{BytesSent: rs.BytesSent, BytesRecv: rs.BytesRecv}
	})
	return st, err
}

// Failed counts and logs a failed attempt and names its culprit.
func (r ringReducer) Failed(rg *mesh.Ring, err error) mesh.PeerID {
	bad := r.n.culprit(rg, err)
	r.n.met.arFailures.WithLabelValues(failureCause(err)).Inc()
	r.n.log.Warn("all-reduce failed", "step", rg.Step+1, "ring", rg.ID, "members", len(rg.Members), "culprit", bad, "err", err)
	return bad
}

// allReduce runs one attempt over ring r: b.Dst ← weighted mean of the
// members' pseudo-gradients, this member's being b.Src. The attempt is
// ring.AllReduce's; the node adds the abort on a dead member (inflight).
func (n *Node) allReduce(ctx context.Context, r *mesh.Ring, b collective.Buffers) (ring.Stats, error) {
	spec, err := n.ringSpec(r)
	if err != nil {
		return ring.Stats{}, err
	}
	n.log.Info("all-reduce start", "step", r.Step+1, "ring", r.ID, "members", len(r.Members), "rank", spec.Self)
	actx, end := n.beginAttempt(ctx, r)
	defer end()
	_, stats, err := ring.AllReduce(actx, n.ar, spec, r.Weights, b, n.cfg.allReduceConfig())
	return stats, attemptErr(actx, err)
}

// beginAttempt bounds an attempt over r by AllReduceTimeout, registers it
// as in flight (the mesh aborts it when it declares a member dead) and slows
// this node's donor meanwhile; end undoes all three.
func (n *Node) beginAttempt(ctx context.Context, r *mesh.Ring) (actx context.Context, end func()) {
	actx, cancel := context.WithTimeout(ctx, n.cfg.AllReduceTimeout)
	actx = n.inflight.begin(actx, r)
	restore := n.yieldDonor()
	return actx, func() { restore(); n.inflight.end(); cancel() }
}

// attemptErr is err, or the member the mesh declared dead when that is why
// actx ended.
func attemptErr(actx context.Context, err error) error {
	var dead *deadMemberError
	if err != nil && errors.As(context.Cause(actx), &dead) {
		return dead
	}
	return err
}

// ringSpec describes the attempt over ring r for p2p (Shards is filled in
// by ring.AllReduce from the all-reduce config).
func (n *Node) ringSpec(r *mesh.Ring) (ring.Spec, error) {
	rank := r.Rank(n.self)
	if rank < 0 {
		return ring.Spec{}, fmt.Errorf("node: not a member of ring %s", r.ID)
	}
	members := make([]peer.ID, len(r.Members))
	for i, id := range r.Members {
		pid, err := peerID(id)
		if err != nil {
			return ring.Spec{}, err
		}
		members[i] = pid
	}
	return ring.Spec{ID: r.ID, Step: r.Step, Members: members, Self: rank, SendRate: n.sendRate}, nil
}

// culprit names the ring member to report for a failed attempt: the member
// the all-reduce named, else the left neighbour, whose data never came.
func (n *Node) culprit(r *mesh.Ring, err error) mesh.PeerID {
	k := len(r.Members)
	rank := r.Rank(n.self)
	bad := (rank - 1 + k) % k
	var pe *collective.PeerError
	var rpe *ring.PeerError
	var dead *deadMemberError
	switch {
	case errors.As(err, &dead):
		return dead.peer
	case errors.As(err, &rpe) && rpe.Rank >= 0 && rpe.Rank < k:
		bad = rpe.Rank
	case errors.As(err, &pe) && pe.Rank >= 0 && pe.Rank < k:
		bad = pe.Rank
	}
	if bad == rank {
		bad = (rank + 1) % k
	}
	return r.Members[bad]
}

// yieldDonor slows this node's checkpoint serving while an all-reduce
// attempt runs (a joiner's download must not starve it on a shared uplink)
// and returns the func that restores it.
func (n *Node) yieldDonor() func() {
	if n.ckpt == nil {
		return func() {}
	}
	n.ckpt.Yield(true)
	return func() { n.ckpt.Yield(false) }
}

func peerID(id mesh.PeerID) (peer.ID, error) {
	p, err := peer.Decode(string(id))
	if err != nil {
		return "", fmt.Errorf("node: bad peer id %q: %w", id, err)
	}
	return p, nil
}
