package mesh

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Made is one step of a line's membership history: the members of the ring
// whose all-reduce made the model of Step (θ₀(Step)), sorted.
type Made struct {
	Step    uint64   `json:"step"`
	Members []PeerID `json:"members"`
}

// MadeWindow is how many steps of its line's history a node keeps: a peer
// that made one of the last MadeWindow models of the line is established;
// any other is a newcomer, admitted a few per step (Config.AdmitRate).
const MadeWindow = 8

// History returns the membership history of the line of this node's model,
// oldest first: what a donor hands a joiner with the model, and what a
// checkpoint keeps (Config.History). It shares nothing with the Mesh.
func (m *Mesh) History() []Made {
	out := make([]Made, len(m.history))
	for i, h := range m.history {
		out[i] = Made{Step: h.Step, Members: slices.Clone(h.Members)}
	}
	return out
}

// ValidateHistory checks a history received with the model of step (a
// donor's bytes): at most MadeWindow entries, steps increasing and at most
// step, members sorted, unique, valid ids, at most MaxMembers.
func ValidateHistory(step uint64, h []Made) error {
	if len(h) > MadeWindow {
		return fmt.Errorf("%w: %d history entries > %d", ErrInvalid, len(h), MadeWindow)
	}
	for i, e := range h {
		if e.Step > step || e.Step == 0 || i > 0 && e.Step <= h[i-1].Step {
			return fmt.Errorf("%w: history entry %d is of step %d (model at step %d)", ErrInvalid, i, e.Step, step)
		}
		if len(e.Members) == 0 || len(e.Members) > MaxMembers {
			return fmt.Errorf("%w: history of step %d has %d members", ErrInvalid, e.Step, len(e.Members))
		}
		for j, id := range e.Members {
			if id == "" || len(id) > MaxPeerIDLen || j > 0 && e.Members[j-1] >= id {
				return fmt.Errorf("%w: history of step %d: members not valid, sorted and unique", ErrInvalid, e.Step)
			}
		}
	}
	return nil
}

// setHistory makes h the history of the model of step; an invalid h is
// none (the error says why).
func (m *Mesh) setHistory(step uint64, h []Made) error {
	m.history = nil
	if err := ValidateHistory(step, h); err != nil {
		m.trimHistory(step)
		return err
	}
	for _, e := range h {
		m.history = append(m.history, Made{Step: e.Step, Members: slices.Clone(e.Members)})
	}
	m.trimHistory(step)
	return nil
}

// madeStep records that ring members made the model of step.
func (m *Mesh) madeStep(step uint64, members []PeerID) {
	if len(m.history) > 0 && m.history[len(m.history)-1].Step >= step {
		m.history = nil // not this line's next step: start afresh
	}
	m.history = append(m.history, Made{Step: step, Members: slices.Sorted(slices.Values(members))})
	m.trimHistory(step)
}

// trimHistory drops entries older than MadeWindow steps before step and
// recomputes the established set. The history's members join the known
// peers, which are kept KnownWindow steps.
func (m *Mesh) trimHistory(step uint64) {
	m.history = slices.DeleteFunc(m.history, func(e Made) bool { return e.Step+MadeWindow <= step })
	m.lineMembers = make(map[PeerID]bool)
	if m.known == nil {
		m.known = make(map[PeerID]meshKnown)
	}
	for _, e := range m.history {
		for _, id := range e.Members {
			m.lineMembers[id] = true
			if id == m.cfg.ID {
				continue
			}
			if k, ok := m.known[id]; ok {
				m.known[id] = meshKnown{min(k.first, e.Step), max(k.last, e.Step)}
			} else {
				m.known[id] = meshKnown{e.Step, e.Step}
			}
		}
	}
	maps.DeleteFunc(m.known, func(_ PeerID, k meshKnown) bool { return k.last+KnownWindow <= step })
}

// KnownWindow is how many steps a node remembers the peers that made its
// line's models — from its own completed rings and the MadeWindow steps of
// history it got with a fetched model or checkpoint. A member weighs a side
// first by how many of its peers it knows (checkMember): made-up
// identities serving a fork are no larger side to adopt. Kept locally:
// the history handed to joiners stays MadeWindow steps.
const KnownWindow = 64

// meshKnown is what a node saw of a known peer: the first and the last
// model of its line the peer made (steps).
type meshKnown struct{ first, last uint64 }

// knows reports whether id made one of the last KnownWindow models of this
// node's line, as far as this node saw.
func (m *Mesh) knows(id PeerID) bool {
	k, ok := m.known[id]
	return ok && k.last+KnownWindow > m.step
}

// vouch: voter's vote v, and the votes of v's other members, are signed
// (every mesh message is its sender's; node checks it). When a peer this
// node knows signed the same ring as peers it does not — same members,
// round, step and model — it made a ring with them: they become known as
// if they had made a model with this node now. So two groups that made no
// model together come to know each other once one member of either makes
// rings with the other, and sides are then weighed by what both see
// (checkMember). Made-up identities become known the same way only: by
// making rings with peers this node knows (admitted a few a step, or
// followed by one that adopted their side).
func (m *Mesh) vouch(voter PeerID, v *meshVote) {
	if !slices.ContainsFunc(v.members, func(mb Member) bool { return mb.ID != m.cfg.ID && !m.knows(mb.ID) }) && m.knows(voter) {
		return // nobody to vouch for: the common case
	}
	anyKnown := m.knows(voter)
	var strangers []PeerID
	if !anyKnown {
		strangers = append(strangers, voter)
	}
	for _, mb := range v.members {
		if mb.ID == voter || mb.ID == m.cfg.ID {
			continue
		}
		p := m.peers[mb.ID]
		if p == nil {
			continue
		}
		w := p.votes.get(v.step)
		if w == nil || w.hash != v.hash || w.round != v.round || w.sum != v.sum || !slices.Equal(w.members, v.members) {
			continue
		}
		if m.knows(mb.ID) {
			anyKnown = true
		} else {
			strangers = append(strangers, mb.ID)
		}
	}
	if anyKnown {
		m.meet(strangers)
	}
}

// meet makes ids known as if they had made a model with this node now
// (vouch, and the members of a ring this node decides: each of them signed
// it, as this node did). A decided ring whose all-reduce then fails makes
// no model, yet its members are as checked as those of one that completes:
// members whose first ring failed in a partition and that then trained
// apart know each other, and the smaller group adopts the larger's line
// when they meet again (random-fault seed 17 with 30-tick all-reduces).
func (m *Mesh) meet(ids []PeerID) {
	for _, id := range ids {
		if id == m.cfg.ID {
			continue
		}
		k, ok := m.known[id]
		if !ok {
			k.first = m.step
		}
		k.last = max(k.last, m.step)
		m.known[id] = k
	}
}

// countKnown returns how many of ids this node knows that made a model of
// its line by step upTo, and the last step any of those it knows made.
func (m *Mesh) countKnown(ids []PeerID, upTo uint64) (n int, last uint64) {
	for _, id := range ids {
		if k := m.known[id]; m.knows(id) && k.first <= upTo {
			n++
			last = max(last, k.last)
		}
	}
	return n, last
}

// Newcomer reports whether this node made none of its line's last
// MadeWindow models while newcomers are limited: it waits for a slot.
func (m *Mesh) Newcomer() bool { return m.newcomer(m.cfg.ID) }

// admitting reports whether newcomers are limited in this step: a rate is
// set, the line is at least MadeWindow steps old and its history is known.
// A run's first steps admit everyone: its first members are all newcomers,
// and those an accuser kept out of the first ring would otherwise queue
// for slots beside the accusers, one a step, behind the one or two members
// the first ring made established (TestSimFalseAccusers, 3 of 8 naming one
// each). A line whose history is lost admits everyone too.
func (m *Mesh) admitting() bool {
	return m.cfg.AdmitRate > 0 && m.step >= MadeWindow && len(m.lineMembers) > 0
}

// newcomer reports whether id made none of the last MadeWindow models of
// this line while newcomers are limited. A newcomer's accusations are void
// and it does not count towards the fault bound: peers made up by the
// thousand would otherwise outvote and out-accuse the members.
func (m *Mesh) newcomer(id PeerID) bool {
	return m.admitting() && !m.lineMembers[id]
}

// admitted returns the newcomers admitted to this step: of the peers known
// Ready in it (M, excluded ones too: a newcomer excluded from the step
// keeps its slot, or one accuser would take every newcomer out in turn),
// at most max(1, ⌊AdmitRate · established⌋), chosen by a hash of the
// step's model and their ids, so that a peer cannot choose an id that is
// always first. M only grows during a step and every node with the same
// history and M admits the same ones. Nil when not admitting.
func (m *Mesh) admitted() map[PeerID]bool {
	fresh, quota := m.newcomers()
	if quota < 0 {
		return nil
	}
	if len(fresh) > quota {
		// One hash per newcomer, not two per comparison: a flood of
		// newcomers is when this runs, on every vote heard.
		type ranked struct {
			rank [32]byte
			id   PeerID
		}
		rs := make([]ranked, len(fresh))
		for i, id := range fresh {
			rs[i] = ranked{sha256.Sum256([]byte("intellect/mesh/admit/1\x00" + m.ag.hash + "\x00" + string(id))), id}
		}
		slices.SortFunc(rs, func(a, b ranked) int { return slices.Compare(a.rank[:], b.rank[:]) })
		for i := range quota {
			fresh[i] = rs[i].id
		}
		fresh = fresh[:quota]
	}
	out := make(map[PeerID]bool, len(fresh))
	for _, id := range fresh {
		out[id] = true
	}
	return out
}

// newcomers returns the newcomers known Ready in this step and how many
// of them the step admits; quota −1 when not admitting.
func (m *Mesh) newcomers() (fresh []PeerID, quota int) {
	if !m.admitting() {
		return nil, -1
	}
	for id := range m.ag.known {
		if !m.lineMembers[id] {
			fresh = append(fresh, id)
		}
	}
	// The established are counted from the history, which every node on
	// the line holds alike, not from the Ready peers it heard of: a member
	// that crashed Ready was in some nodes' M and not in others', their
	// quotas differed (1 and 2), so did the newcomers they admitted, and
	// they refuted each other's votes a round a tick for 3000 ticks
	// (random-fault seed 5091 at 9-16 members).
	return fresh, max(1, int(math.Floor(m.cfg.AdmitRate*float64(len(m.lineMembers)))))
}

// newcomersFull reports whether the newcomers Ready in this step fill its
// quota: a Ready node then does not wait for more (canVote) — else every
// step would wait for the newcomers that fetch each model it missed.
func (m *Mesh) newcomersFull() bool {
	fresh, quota := m.newcomers()
	return quota >= 0 && len(fresh) >= quota
}
