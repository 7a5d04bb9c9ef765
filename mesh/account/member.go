package account

import (
	"errors"
	"math/rand/v2"
	"slices"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// Config configures a Member.
type Config struct {
	// Self is this member's id. Required.
	Self mesh.PeerID
	// AuditAll audits every other owner after every attempt, instead of
	// the owners on probation and, with probability 1/k, one other. Every
	// attempt then costs about k × 66 KiB more per member; a network of
	// tests uses it to catch a forging owner at its first step.
	AuditAll bool
	// Rand draws the audits: which owner, shard and chunk, and whether at
	// all. It must be this member's private randomness. Default (nil):
	// math/rand/v2's top-level functions, randomly seeded.
	Rand *rand.Rand
}

// Member is the accountability of one member of a run with robust
// averaging: its offence rule over the segments it owns, its checks of the
// owners' verdict reports on its own contributions, and its choice of
// audits. It is a pure state machine: the driver feeds it the results of
// attempts and the reports that arrive, and carries out the Actions it
// returns. It is not safe for concurrent use.
type Member struct {
	cfg       Config
	offences  Offences
	book      book
	probation probation
}

// Actions is what the driver must carry out after an event.
type Actions struct {
	// Publish, if not nil, is this owner's encoded verdict report of the
	// attempt, to publish on Topic.
	Publish []byte
	// Exclude lists the members to exclude from the run, with the
	// evidence.
	Exclude []Exclusion
	// Audit lists the chunks to audit.
	Audit []Audit
	// Flagged lists the members whose contributions this member's
	// segments flagged in the attempt (Sums.Flagged), with their sums.
	Flagged []Flag
	// Confirmed lists the owners' consistent reports of this member's
	// contributions (Contribution has them by step).
	Confirmed []Confirmation
}

// Flag is a member whose contribution this member's segments flagged.
type Flag struct {
	Member mesh.PeerID
	Sums   Sums
}

// ErrNotMember is the error of Observe for a ring without this member.
var ErrNotMember = errors.New("account: not a member of the ring")

// New returns the accountability of member cfg.Self.
func New(cfg Config) *Member { return &Member{cfg: cfg} }

// Observe takes the result of this member's successful attempt of the
// direct scatter over rg with cfg (defaults filled in): it judges the
// members by the segments it owned, writes its verdict report of them,
// notes what it sent (for the owners' reports), and picks the audits. err
// is ErrNotMember for a ring without this member, or says why the report
// cannot be encoded (Publish is then nil; the other actions stand).
func (m *Member) Observe(rg *mesh.Ring, cfg collective.ScatterConfig, res collective.ScatterResult) (acts Actions, err error) {
	self := rg.Rank(m.cfg.Self)
	if self < 0 {
		return Actions{}, ErrNotMember
	}
	sums, convs := m.offences.Note(Verdicts{Step: rg.Step + 1, Members: rg.Members, Self: self, Weights: rg.Weights,
		Owned: res.Owned, Robust: cfg.Robust})
	for i, s := range sums {
		if i != self && s.Flagged() {
			acts.Flagged = append(acts.Flagged, Flag{rg.Members[i], s})
		}
	}
	for _, c := range convs {
		acts.Exclude = append(acts.Exclude, Exclusion{rg.Members[c.Rank], c.Reason, c.Evidence})
	}
	if len(res.Owned) > 0 { // a client owns nothing and reports nothing
		acts.Publish, err = NewReport(rg, res.Owned).Encode()
	}
	owners := segmentOwners(rg)
	acts.add(m.book.noteSent(sentAttempt{ring: rg.ID, step: rg.Step + 1, members: slices.Clone(rg.Members),
		owners: owners, rank: self, norms: res.SentNorms}))
	acts.Audit = m.audits(rg, cfg, res, owners, self)
	return acts, err
}

// Receive checks a verdict report that arrived on Topic, signed by from:
// a peer's bytes. A report about another member's attempt is ignored (or
// held until this member notes its own attempt of that ring); one about
// this member's is confirmed, or its owner excluded.
func (m *Member) Receive(from mesh.PeerID, data []byte) (Actions, error) {
	r, err := Decode(data)
	if err != nil {
		return Actions{}, err
	}
	var acts Actions
	if o, mine := m.book.check(from, r); mine {
		acts.add([]outcome{o})
	}
	return acts, nil
}

// add turns report outcomes into actions.
func (a *Actions) add(outs []outcome) {
	for _, o := range outs {
		if o.evidence != "" {
			a.Exclude = append(a.Exclude, Exclusion{o.from, ReasonFalseReport, o.evidence})
		} else {
			a.Confirmed = append(a.Confirmed, o.entry)
		}
	}
}

// Attempted reports whether this member noted an attempt.
func (m *Member) Attempted() bool { return m.book.attempted() }

// Outstanding is how many owners of this member's last attempt have not
// reported on it yet.
func (m *Member) Outstanding() int { return m.book.outstanding() }

// Contribution returns what the owners reported of this member's
// contribution to the newest attempt any of them reported on; nil if none.
func (m *Member) Contribution() *Contribution { return m.book.contribution() }

// audits picks this member's audits of attempt rg.
func (m *Member) audits(rg *mesh.Ring, cfg collective.ScatterConfig, res collective.ScatterResult, owners []int, self int) []Audit {
	var others []int // segments owned by another member
	for seg, o := range owners {
		if o != self {
			others = append(others, seg)
		}
	}
	if len(others) == 0 || len(res.GotChunks) != cfg.Shards*len(owners) {
		return nil
	}
	var out []Audit
	var settled []int
	for _, seg := range others {
		if m.cfg.AuditAll || m.probation.on(rg.Members[owners[seg]], rg.Step) {
			out = m.audit(out, rg, cfg, res, owners, self, seg)
		} else {
			settled = append(settled, seg)
		}
	}
	if len(settled) > 0 && m.float64() < auditRate(len(rg.Members)) {
		out = m.audit(out, rg, cfg, res, owners, self, settled[m.intN(len(settled))])
	}
	return out
}

// audit appends an audit of a random chunk of a random shard of segment
// seg to out.
func (m *Member) audit(out []Audit, rg *mesh.Ring, cfg collective.ScatterConfig, res collective.ScatterResult, owners []int, self, seg int) []Audit {
	shard := m.intN(cfg.Shards)
	idx := shard*len(owners) + seg
	if len(res.GotChunks[idx]) == 0 {
		return out
	}
	chunk := m.intN(len(res.GotChunks[idx]))
	return append(out, Audit{Owner: rg.Members[owners[seg]], Ring: rg, Config: cfg, Shard: shard, Segment: seg, Chunk: chunk,
		Sent: res.SentChunks[idx][chunk], Got: res.GotChunks[idx][chunk], self: self})
}

func (m *Member) intN(n int) int {
	if m.cfg.Rand != nil {
		return m.cfg.Rand.IntN(n)
	}
	return rand.IntN(n)
}

func (m *Member) float64() float64 {
	if m.cfg.Rand != nil {
		return m.cfg.Rand.Float64()
	}
	return rand.Float64()
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
