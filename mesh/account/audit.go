package account

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
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
// probation) after a step of k members: about one such audit per step in
// the whole network.
func auditRate(k int) float64 { return 1 / float64(max(k, 1)) }

// ProbationSteps is how many outer steps after a member first shared a ring
// with an owner it audits that owner's segment every step.
const ProbationSteps = 10

// maxProbationPeers bounds the first-seen table.
const maxProbationPeers = 4096

// probation remembers the step at which each owner was first in a ring
// with this member.
type probation struct {
	start uint64 // the step of this member's first audited ring
	first map[mesh.PeerID]uint64
}

// on reports whether id first shared a ring with this member less than
// ProbationSteps steps before step, later than this member's own first
// ring (the members already there then are not newcomers to it),
// recording step if it is the first. A newcomer is audited each step until
// then: an attacker cannot join, forge at once and count on the 1/k dice.
func (p *probation) on(id mesh.PeerID, step uint64) bool {
	if p.first == nil {
		p.first = make(map[mesh.PeerID]uint64)
		p.start = step
	}
	first, ok := p.first[id]
	if !ok {
		if len(p.first) >= maxProbationPeers {
			clear(p.first) // bounded: everyone starts over as a newcomer
			p.start = 0
		}
		first = step
		p.first[id] = step
	}
	return first > p.start && step < first+ProbationSteps
}

// Audit is one chunk of one owner's segment to audit: the driver asks the
// owner for the chunk's inputs (p2p/scatter's audit protocol) and passes
// its answer to Check.
type Audit struct {
	Owner                 mesh.PeerID
	Ring                  *mesh.Ring
	Config                collective.ScatterConfig // the attempt's, defaults filled in
	Shard, Segment, Chunk int
	// Sent is the commitment to this member's input of the chunk, Got to
	// the result it received (ScatterResult.SentChunks, GotChunks).
	Sent, Got collective.Commitment
	self      int // this member's rank
}

// ErrForged is the error of an audit whose answer proves the owner lied
// (errors.Is); its message is the evidence.
var ErrForged = errors.New("account: the owner forged its result")

// forged is an audit's proof of an owner's lie.
type forged struct{ what string }

func (e *forged) Error() string        { return e.what }
func (e *forged) Is(target error) bool { return target == ErrForged }

// Malformed is the ErrForged of an owner whose answer to an audit does not
// parse (err says why).
func Malformed(err error) error { return &forged{fmt.Sprintf("its answer is malformed: %v", err)} }

// Check checks the owner's answer to the audit, the k inputs of the chunk
// as it combined them: nil if it checks out, an error matching ErrForged
// if the owner lied.
func (a Audit) Check(inputs [][]byte) error {
	if len(inputs) != len(a.Ring.Members) {
		return &forged{fmt.Sprintf("it shows %d inputs; the ring has %d members", len(inputs), len(a.Ring.Members))}
	}
	if sha256.Sum256(inputs[a.self]) != a.Sent {
		return &forged{"the input it shows as this member's is not the one this member sent"}
	}
	out, _, err := collective.AuditChunk(a.Config, a.Ring.Weights, a.Segment, a.Chunk, inputs)
	if err != nil {
		return &forged{fmt.Sprintf("the inputs it shows do not decode: %v", err)}
	}
	if sha256.Sum256(out) != a.Got {
		return &forged{"its result differs from the robust rule applied to the inputs it shows"}
	}
	return nil
}

// Exclusion is the exclusion of the owner that failed the audit with err
// (an ErrForged).
func (a Audit) Exclusion(err error) Exclusion {
	return Exclusion{Member: a.Owner, Reason: ReasonAudit, Evidence: fmt.Sprintf("failed an audit of step %d (shard %d, segment %d, chunk %d): %v",
		a.Ring.Step+1, a.Shard, a.Segment, a.Chunk, err)}
}
