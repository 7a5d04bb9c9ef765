package node

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p/scatter"
)

// Spot checks of segment owners (docs/robust.md, "Audit"). After each
// robust all-reduce a member audits, with probability auditRate(k), one
// chunk of one other owner's segment, chosen with its own private
// randomness so that no owner knows whether or where it will be checked:
// it asks the owner for the k inputs of that chunk as the owner combined
// them, checks that its own is the one it sent, recomputes the owner's
// result with the owner's code (collective.AuditChunk) and compares it
// with what it received. A mismatch is proof that the owner forged its
// result or the inputs it shows: the owner is excluded from the run.
//
// An owner that cheats on a fraction q of its chunks is caught by one
// audit of its segment with probability q; one that replaces other
// members' inputs must replace most of them to move the robust result
// further than that many attackers could, and then shows the auditor an
// input that is not the auditor's own with probability above 1/2.

// auditRate is the probability that a member audits a settled owner (see
// onProbation) after a step of k members: about one such audit per step in
// the whole network.
func auditRate(k int) float64 { return 1 / float64(max(k, 1)) }

// spotCheck runs, in the background, this node's audit of attempt rg if
// its dice say so. cfg is the attempt's configuration, res its result.
func (n *Node) spotCheck(ctx context.Context, rg *mesh.Ring, cfg collective.ScatterConfig, res collective.ScatterResult) {
	self := rg.Rank(n.self)
	owners := segmentOwners(rg)
	var others []int // segments owned by another member
	for seg, o := range owners {
		if o != self {
			others = append(others, seg)
		}
	}
	if len(others) == 0 || len(res.GotChunks) != cfg.Shards*len(owners) {
		return
	}
	var probation, settled []int // segments of owners new to this node, of the others
	for _, seg := range others {
		if n.auditAlways || n.onProbation(rg.Members[owners[seg]], rg.Step) {
			probation = append(probation, seg)
		} else {
			settled = append(settled, seg)
		}
	}
	for _, seg := range probation {
		n.auditSegment(ctx, rg, cfg, res, owners, seg)
	}
	if len(settled) > 0 && rand.Float64() < auditRate(len(rg.Members)) {
		n.auditSegment(ctx, rg, cfg, res, owners, settled[rand.IntN(len(settled))])
	}
}

// probationSteps is how many outer steps after this node first shared a
// ring with a member it audits that member's segment every step.
const probationSteps = 10

// onProbation reports whether id first shared a ring with this node less
// than probationSteps steps before step, later than this node's own first
// ring (the members already there then are not newcomers to it), recording
// step if it is the first. A newcomer is audited each step until then: an
// attacker cannot join, forge at once and count on the 1/k dice.
func (n *Node) onProbation(id mesh.PeerID, step uint64) bool {
	n.probation.mu.Lock()
	defer n.probation.mu.Unlock()
	if n.probation.first == nil {
		n.probation.first = make(map[mesh.PeerID]uint64)
		n.probation.start = step
	}
	first, ok := n.probation.first[id]
	if !ok {
		if len(n.probation.first) >= maxProbationPeers {
			clear(n.probation.first) // bounded: everyone starts over as a newcomer
			n.probation.start = 0
		}
		first = step
		n.probation.first[id] = step
	}
	return first > n.probation.start && step < first+probationSteps
}

// maxProbationPeers bounds the first-seen table.
const maxProbationPeers = 4096

// probationLog remembers the step at which each owner was first in a ring
// with this node.
type probationLog struct {
	mu    sync.Mutex
	start uint64 // the step of this node's first audited ring
	first map[mesh.PeerID]uint64
}

// auditSegment audits, in the background, a random chunk of a random
// shard of segment seg.
func (n *Node) auditSegment(ctx context.Context, rg *mesh.Ring, cfg collective.ScatterConfig, res collective.ScatterResult, owners []int, seg int) {
	shard := rand.IntN(cfg.Shards)
	idx := shard*len(owners) + seg
	if len(res.GotChunks[idx]) == 0 {
		return
	}
	chunk := rand.IntN(len(res.GotChunks[idx]))
	owner := rg.Members[owners[seg]]
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		err := n.audit(ctx, rg, cfg, owner, shard, seg, chunk, res.SentChunks[idx][chunk], res.GotChunks[idx][chunk])
		var forged *forgedError
		switch {
		case err == nil:
			n.met.audits.WithLabelValues("passed").Inc()
			n.log.Debug("audit passed", "step", rg.Step+1, "owner", owner, "shard", shard, "segment", seg, "chunk", chunk)
		case errors.As(err, &forged):
			n.met.audits.WithLabelValues("failed").Inc()
			n.exclude(owner, fmt.Sprintf("failed an audit of step %d (shard %d, segment %d, chunk %d): %v", rg.Step+1, shard, seg, chunk, forged))
		case ctx.Err() != nil:
		default:
			n.met.audits.WithLabelValues("unanswered").Inc()
			n.log.Info("audit not answered", "step", rg.Step+1, "owner", owner, "err", err)
		}
	}()
}

// forgedError is an audit's proof of an owner's lie.
type forgedError struct{ what string }

func (e *forgedError) Error() string { return e.what }

// audit checks one chunk of owner's segment: nil if it checks out, a
// *forgedError if the owner lied, another error if it could not be asked.
func (n *Node) audit(ctx context.Context, rg *mesh.Ring, cfg collective.ScatterConfig, owner mesh.PeerID,
	shard, seg, chunk int, sent, got collective.Commitment) error {
	pid, err := peerID(owner)
	if err != nil {
		return err
	}
	msgs, err := n.sc.Audit(ctx, pid, rg.ID, shard, seg, chunk, len(rg.Members))
	if errors.Is(err, scatter.ErrProtocol) {
		return &forgedError{fmt.Sprintf("its answer is malformed: %v", err)}
	}
	if err != nil {
		return err
	}
	self := rg.Rank(n.self)
	if sha256.Sum256(msgs[self]) != sent {
		return &forgedError{"the input it shows as this node's is not the one this node sent"}
	}
	out, _, err := collective.AuditChunk(cfg, rg.Weights, seg, chunk, msgs)
	if err != nil {
		return &forgedError{fmt.Sprintf("the inputs it shows do not decode: %v", err)}
	}
	if sha256.Sum256(out) != got {
		return &forgedError{"its result differs from the robust rule applied to the inputs it shows"}
	}
	return nil
}
