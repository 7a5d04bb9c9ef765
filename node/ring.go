package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The all-reduce of one outer step: wait for the ring the mesh decides, run
// an attempt over it, report the member at fault and retry on failure.

// reduceResult describes the all-reduce attempt that succeeded.
type reduceResult struct {
	ring  *mesh.Ring
	stats p2p.RingStats
}

// reduce waits for the ring of step t and runs the all-reduce of src into
// n.work, retrying with each new ring the mesh decides after a failure. If
// the mesh asks for a model fetch instead (this node was left out, or its
// side lost), reduce returns that event for the caller to carry out.
func (n *Node) reduce(ctx context.Context, t uint64, src []float32, attempts *int) (reduceResult, *meshEvent, error) {
	for {
		var ev meshEvent
		select {
		case <-ctx.Done():
			return reduceResult{}, nil, ctx.Err()
		case ev = <-n.events:
		}
		if ev.fetch != nil {
			return reduceResult{}, &ev, nil
		}
		r := ev.ring
		if r == nil || r.Step != t {
			continue
		}
		*attempts++
		stats, err := n.allReduce(ctx, r, src)
		if err == nil {
			return reduceResult{ring: r, stats: stats}, nil, nil
		}
		if ctx.Err() != nil {
			return reduceResult{}, nil, ctx.Err()
		}
		bad := n.culprit(r, err)
		n.met.arFailures.WithLabelValues(failureCause(err)).Inc()
		n.log.Warn("all-reduce failed", "step", t+1, "ring", r.ID, "members", len(r.Members), "culprit", bad, "err", err)
		n.mesh(func(m *mesh.Mesh) { m.ReportFailure(t, bad) })
	}
}

// allReduce runs one attempt over ring r: n.work ← weighted mean of the
// members' pseudo-gradients, this member's being src. The attempt is
// p2p.AllReduce's; the node adds the abort on a dead member (inflight).
func (n *Node) allReduce(ctx context.Context, r *mesh.Ring, src []float32) (p2p.RingStats, error) {
	spec, err := n.ringSpec(r)
	if err != nil {
		return p2p.RingStats{}, err
	}
	n.log.Info("all-reduce start", "step", r.Step+1, "ring", r.ID, "members", len(r.Members), "rank", spec.Self)
	actx, cancel := context.WithTimeout(ctx, n.cfg.AllReduceTimeout)
	defer cancel()
	actx = n.inflight.begin(actx, r)
	defer n.inflight.end()
	copy(n.work, src)
	var residual []float32
	if n.residual != nil {
		// AllReduce leaves the residual unspecified on failure: work on a copy.
		residual = append([]float32(nil), n.residual...)
	}
	_, stats, err := p2p.AllReduce(actx, n.ar, spec, r.Weights, n.work, residual, allReduceConfig(n.cfg))
	if err != nil {
		var dead *deadMemberError
		if errors.As(context.Cause(actx), &dead) {
			err = dead // aborted by the mesh: name the member it declared dead
		}
		return stats, err
	}
	if residual != nil {
		copy(n.residual, residual)
	}
	return stats, nil
}

// ringSpec describes the attempt over ring r for p2p (Shards is filled in
// by p2p.AllReduce from the all-reduce config).
func (n *Node) ringSpec(r *mesh.Ring) (p2p.RingSpec, error) {
	rank := r.Rank(n.self)
	if rank < 0 {
		return p2p.RingSpec{}, fmt.Errorf("node: not a member of ring %s", r.ID)
	}
	members := make([]peer.ID, len(r.Members))
	for i, id := range r.Members {
		pid, err := peerID(id)
		if err != nil {
			return p2p.RingSpec{}, err
		}
		members[i] = pid
	}
	return p2p.RingSpec{ID: r.ID, Step: r.Step, Members: members, Self: rank, SendRate: n.sendRate}, nil
}

// culprit names the ring member to report for a failed attempt: the member
// the all-reduce named, else the left neighbour, whose data never came.
func (n *Node) culprit(r *mesh.Ring, err error) mesh.PeerID {
	k := len(r.Members)
	rank := r.Rank(n.self)
	bad := (rank - 1 + k) % k
	var pe *mesh.PeerError
	var rpe *p2p.RingPeerError
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

func peerID(id mesh.PeerID) (peer.ID, error) {
	p, err := peer.Decode(string(id))
	if err != nil {
		return "", fmt.Errorf("node: bad peer id %q: %w", id, err)
	}
	return p, nil
}
