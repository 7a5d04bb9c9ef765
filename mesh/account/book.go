package account

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/intellect-node/intellect-node/mesh"
)

// book holds what a member needs to check the reports of its last
// attempts, and what the owners reported of its contributions.
type book struct {
	attempts []sentAttempt // the last keepAttempts, newest last
	pending  []heldReport  // reports of attempts this member has not noted yet
}

// keepAttempts is how many of its last attempts a member checks reports of.
const keepAttempts = 2

// maxHeldReports bounds the reports held for attempts not noted yet.
const maxHeldReports = 2 * mesh.MaxMembers

// heldReport is a report that arrived before this member noted its
// attempt.
type heldReport struct {
	from mesh.PeerID
	r    Report
}

// sentAttempt is what this member sent in one attempt.
type sentAttempt struct {
	ring    string
	step    uint64
	members []mesh.PeerID
	owners  []int // segment → member index
	rank    int
	norms   [][]float32 // ScatterResult.SentNorms
	seen    map[mesh.PeerID]bool
	got     []OwnerReport // what the owners reported so far, by owner
}

// outcome is the result of checking one owner's report: the evidence of a
// lie, or the owner's entry.
type outcome struct {
	from     mesh.PeerID
	evidence string // "" if the report is consistent
	entry    Confirmation
}

// Contribution is what the owners of one step reported of this member's
// contribution (/v1/status).
type Contribution struct {
	Step   uint64        `json:"step"`
	Owners []OwnerReport `json:"owners"`
}

// OwnerReport is one owner's word on this member's contribution to its
// segments: the contribution's norm, the smallest clip scale and
// CenteredClip factor the rule applied, and the chunks flagged.
type OwnerReport struct {
	Owner     string  `json:"owner"`
	Segments  int     `json:"segments"`
	Norm      float64 `json:"norm"`
	MinClip   float32 `json:"min_clip"`
	MinFactor float32 `json:"min_factor"`
	// Cosine of the update with the members' coordinate-wise median over
	// the owner's segments, the owner's word (below OpposeCos in
	// OpposeAfter of OpposeWindow steps, an owner excludes the member).
	Cosine   float64 `json:"cosine"`
	Hard     uint32  `json:"chunks_clipped_hard"`
	Rejected uint32  `json:"chunks_rejected"`
}

// Confirmation is an owner's consistent report of this member's
// contribution to the attempt of one step.
type Confirmation struct {
	Step uint64
	OwnerReport
}

// noteSent records an attempt and checks the reports of it that arrived
// before; it drops the held reports of earlier steps, which no attempt of
// this member can match any more.
func (b *book) noteSent(a sentAttempt) []outcome {
	a.seen = make(map[mesh.PeerID]bool)
	b.attempts = append(b.attempts, a)
	if len(b.attempts) > keepAttempts {
		b.attempts = slices.Delete(b.attempts, 0, len(b.attempts)-keepAttempts)
	}
	var out []outcome
	b.pending = slices.DeleteFunc(b.pending, func(h heldReport) bool {
		if h.r.Ring != a.ring || h.r.Step != a.step {
			return h.r.Step < a.step
		}
		if o, mine := b.checkAttempt(&b.attempts[len(b.attempts)-1], h.from, h.r); mine {
			out = append(out, o)
		}
		return true
	})
	return out
}

// check compares owner from's report with what this member sent. It
// returns the outcome, and whether the report was about an attempt of this
// member (else it is ignored, or held until the attempt is noted).
func (b *book) check(from mesh.PeerID, r Report) (out outcome, mine bool) {
	i := slices.IndexFunc(b.attempts, func(a sentAttempt) bool { return a.ring == r.Ring && a.step == r.Step })
	if i < 0 {
		if len(b.pending) < maxHeldReports {
			b.pending = append(b.pending, heldReport{from, r})
		}
		return outcome{}, false
	}
	return b.checkAttempt(&b.attempts[i], from, r)
}

// checkAttempt is check of a report of attempt a. The owner's entry is
// also kept in a.got.
func (b *book) checkAttempt(a *sentAttempt, from mesh.PeerID, r Report) (outcome, bool) {
	ow := slices.Index(a.members, from)
	if ow < 0 || a.seen[from] || ow == a.rank {
		return outcome{}, false // not a member, a second report, or this member's own
	}
	a.seen[from] = true
	entry, evidence := a.judge(ow, r)
	if evidence != "" {
		return outcome{from: from, evidence: evidence}, true
	}
	entry.Owner = string(from)
	// Kept with its attempt: a late report of an earlier step must not
	// displace the last step's.
	a.got = append(a.got, entry)
	slices.SortFunc(a.got, func(x, y OwnerReport) int { return strings.Compare(x.Owner, y.Owner) })
	return outcome{from: from, entry: Confirmation{Step: r.Step, OwnerReport: entry}}, true
}

// judge checks the report of owner (a member index) against what this
// member sent: the owner's entry, or the evidence of its lie.
func (a *sentAttempt) judge(owner int, r Report) (OwnerReport, string) {
	lie := func(format string, args ...any) (OwnerReport, string) {
		return OwnerReport{}, fmt.Sprintf("its verdict report of step %d ", r.Step) + fmt.Sprintf(format, args...)
	}
	o := len(a.owners)
	entry := OwnerReport{MinClip: 1, MinFactor: 1}
	var normSq, dot, median float64
	for _, s := range r.Segments {
		idx := int(s.Shard)*o + int(s.Segment)
		if int(s.Segment) >= o || a.owners[s.Segment] != owner || idx >= len(a.norms) {
			return lie("names segment %d of shard %d, which it does not own", s.Segment, s.Shard)
		}
		if len(s.Members) != len(a.members) || int(s.Chunks) != len(a.norms[idx]) {
			return lie("has %d members and %d chunks for segment %d of shard %d; the ring has %d members and the segment %d chunks",
				len(s.Members), s.Chunks, s.Segment, s.Shard, len(a.members), len(a.norms[idx]))
		}
		me, want := s.Members[a.rank], sentNormSq(a.norms[idx])
		if math.Float64bits(me.NormSq) != math.Float64bits(want) {
			return lie("states a norm² of %g for this member's contribution to segment %d of shard %d; this member sent %g",
				me.NormSq, s.Segment, s.Shard, want)
		}
		if me.Rejected > 0 && !math.IsInf(want, 1) {
			return lie("rejects %d chunks of this member's finite contribution to segment %d of shard %d",
				me.Rejected, s.Segment, s.Shard)
		}
		entry.Segments++
		normSq, dot, median = normSq+me.NormSq, dot+me.Dot, median+s.MedianNormSq
		entry.MinClip, entry.MinFactor = min(entry.MinClip, me.MinClip), min(entry.MinFactor, me.MinFactor)
		entry.Hard += me.Hard
		entry.Rejected += me.Rejected
	}
	entry.Cosine = Sums{NormSq: normSq, Dot: dot, MedianNormSq: median}.Cos()
	entry.Norm = math.Sqrt(normSq)
	return entry, ""
}

// attempted reports whether this member noted an attempt.
func (b *book) attempted() bool { return len(b.attempts) > 0 }

// outstanding is how many owners of this member's last attempt have not
// reported on it yet.
func (b *book) outstanding() int {
	if len(b.attempts) == 0 {
		return 0
	}
	a := &b.attempts[len(b.attempts)-1]
	owners := make(map[int]bool)
	for _, o := range a.owners {
		if o != a.rank && !a.seen[a.members[o]] {
			owners[o] = true
		}
	}
	return len(owners)
}

// contribution returns a copy of what the owners reported of the newest
// attempt any of them reported on.
func (b *book) contribution() *Contribution {
	for i := len(b.attempts) - 1; i >= 0; i-- {
		if a := &b.attempts[i]; len(a.got) > 0 {
			return &Contribution{Step: a.step, Owners: slices.Clone(a.got)}
		}
	}
	return nil
}
