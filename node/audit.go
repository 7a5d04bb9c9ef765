package node

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"

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

// auditRate is the probability that a member audits after a step of k
// members: about one audit per step in the whole network.
func auditRate(k int) float64 { return 1 / float64(max(k, 1)) }

// spotCheck runs, in the background, this node's audit of attempt rg if
// its dice say so. cfg is the attempt's configuration, res its result.
func (n *Node) spotCheck(ctx context.Context, rg *mesh.Ring, cfg collective.ScatterConfig, res collective.ScatterResult) {
	self := rg.Rank(n.self)
	owners := cfg.Owners
	if owners == nil {
		owners = make([]int, len(rg.Members))
		for i := range owners {
			owners[i] = i
		}
	}
	var others []int // segments owned by another member
	for seg, o := range owners {
		if o != self {
			others = append(others, seg)
		}
	}
	if len(others) == 0 || len(res.GotChunks) != cfg.Shards*len(owners) {
		return
	}
	if n.auditAlways { // tests: every other owner, every step
		for _, seg := range others {
			n.auditSegment(ctx, rg, cfg, res, owners, seg)
		}
		return
	}
	if rand.Float64() < auditRate(len(rg.Members)) {
		n.auditSegment(ctx, rg, cfg, res, owners, others[rand.IntN(len(others))])
	}
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
