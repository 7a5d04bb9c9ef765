package mesh

import "slices"

// Accusations: the X of every vote heard, and the exclusions they make.

// exclusions derives X from local and the accusations heard. A vote's X is
// its voter's word, which a member following the protocol could use to
// keep honest peers out of every step (under a plain union of the votes' X,
// one member naming all others ran every step alone and the others fetched
// its model). So a peer's word is weighed:
//
//   - An accusation is disputed when the accused voted in this step, in a
//     round at least that of the first vote naming it: it is alive and
//     says it is in. An accusation that more than f = ⌊(n−1)/2⌋ of the n
//     peers known in the step make (at least one honest among them), or
//     another's of a peer this node excluded itself, is not disputed. This
//     node's own accusations are weighed like the others' (its votes'
//     rounds count).
//   - An accuser with a disputed accusation is excluded, and the accused
//     with it if that is its only one: word against word, both sit the step
//     out, as in BTARD's accusations (Gorbunov et al. 2022). An accuser with
//     several disputes is the common fault: it alone is excluded. So each
//     accuser costs a step at most one member besides itself.
//   - The accusations of an accuser with no dispute stand (a crashed peer,
//     a failed transfer: the accused does not vote on).
//   - A newcomer (admit.go) has no standing: the word of one not admitted
//     to the step is void; an admitted one's accusations do not count
//     towards the f + 1 that confirm one, and a disputed one excludes the
//     newcomer alone — else each of a thousand made-up peers would take
//     an honest member out of the step with it.
//
// Every input grows during a step (a peer's accusations are those of its
// latest vote, which only grow unless it starts the step afresh: noteVote)
// and every node sees the same votes, so the views converge to the same X;
// until they do, X can shrink as disputes appear (the refuted votes are
// replaced, as always).
//
// It runs on every vote heard, over up to K² accusations (K members each
// naming the dead): every accuser's and accused's standing is found once
// per call, and the accusations are walked as pointers to them.
func (m *Mesh) exclusions() {
	ag := &m.ag
	counts := m.stepCounts()
	f, admitted := counts.f, counts.admitted
	acc := &ag.accused
	for _, by := range acc.byList {
		m.standing(by, admitted)
	}
	for _, of := range acc.ofList {
		m.standingOf(of)
	}
	for _, e := range acc.edges {
		if !e.by.void && !e.self && !e.by.newcomer {
			e.of.accusers++
		}
	}
	for _, e := range acc.edges {
		if e.by.void || e.of.accusers > f || !e.by.me && e.of.local {
			continue // void or confirmed
		}
		if e.of.voted && e.of.round >= e.round {
			e.by.disputes++
			e.by.disputed = e.of.id
		}
	}
	clear(ag.excluded)
	for id := range ag.local {
		ag.excluded[id] = true
	}
	clear(ag.disputants)
	for _, by := range acc.byList {
		if by.disputes == 0 {
			continue
		}
		ag.excluded[by.id], ag.disputants[by.id] = true, true
		if by.disputes == 1 && !by.newcomer {
			ag.excluded[by.disputed], ag.disputants[by.disputed] = true, true
		}
	}
	for _, e := range acc.edges {
		if !e.by.void && e.by.disputes == 0 && !e.self {
			e.of.stands = true
		}
	}
	for _, of := range acc.ofList {
		if of.stands {
			ag.excluded[of.id] = true
		}
	}
}

// meshAccusations holds the accusations heard in a step: peer `by` named
// peer `of` in the X of a vote, with the lowest round of by's votes naming
// it. Its zero value holds none.
type meshAccusations struct {
	index  map[meshAccusation]int // → edges
	edges  []meshEdge
	by     map[PeerID]*meshAccuser
	byList []*meshAccuser
	of     map[PeerID]*meshAccused
	ofList []*meshAccused
}

type meshAccusation struct{ by, of PeerID }

// meshEdge is one accusation; self when a peer names itself.
type meshEdge struct {
	by    *meshAccuser
	of    *meshAccused
	round uint32
	self  bool
}

// meshAccuser is an accuser's standing in exclusions.
type meshAccuser struct {
	id                 PeerID
	me, void, newcomer bool
	edges              int    // its accusations
	disputes           int    // its accusations the accused dispute
	disputed           PeerID // the accused of one of them
}

// meshAccused is an accused peer's standing in exclusions: whether this
// node excluded it itself, the highest round it voted in this step, how
// many accusers with standing name it, and whether an accusation stands.
type meshAccused struct {
	id           PeerID
	local, voted bool
	round        uint32
	accusers     int
	stands       bool
}

// noteVote makes the X of voter's vote v its accusations: a peer's word
// is its latest vote, which it re-broadcasts and every node comes to hear.
// Accusations its earlier votes of this step made and v does not are
// withdrawn. Within one agreement a node's X only grows, so that happens
// only when the voter started the step's agreement afresh (back at a
// model it voted on before, or restarting the step): its old words live
// on only at the nodes that heard them. Kept, they made a member that
// came back at step 7's model a disputant (its first vote had named the
// members of another ring) in the eyes of the nodes that had heard that
// vote and not of the others, and the two views re-voted against each
// other for 3000 rounds (random-fault seeds 4623 and 9053 at 4–64
// members).
func (m *Mesh) noteVote(voter PeerID, v *meshVote) {
	acc := &m.ag.accused
	if b := acc.by[voter]; b != nil {
		still := 0
		for _, id := range v.excluded {
			if _, ok := acc.index[meshAccusation{voter, id}]; ok && id != voter {
				still++
			}
		}
		if still < b.edges {
			acc.withdraw(b, v.excluded)
		}
	}
	for _, id := range v.excluded {
		if id != voter {
			m.noteAccusation(voter, id, v.round)
		}
	}
}

// withdraw removes b's accusations of peers not in keep.
func (acc *meshAccusations) withdraw(b *meshAccuser, keep []PeerID) {
	for i := 0; i < len(acc.edges); {
		e := acc.edges[i]
		if e.by != b || slices.Contains(keep, e.of.id) {
			i++
			continue
		}
		delete(acc.index, meshAccusation{b.id, e.of.id})
		last := len(acc.edges) - 1
		if i != last {
			acc.edges[i] = acc.edges[last]
			moved := acc.edges[i]
			acc.index[meshAccusation{moved.by.id, moved.of.id}] = i
		}
		acc.edges = acc.edges[:last]
		b.edges--
	}
}

// noteAccusation records that by named of in a vote of round.
func (m *Mesh) noteAccusation(by, of PeerID, round uint32) {
	if round < m.ag.floor {
		return // made before this node restarted the step (maybeRejoinStep)
	}
	acc := &m.ag.accused
	a := meshAccusation{by: by, of: of}
	if i, ok := acc.index[a]; ok {
		acc.edges[i].round = min(acc.edges[i].round, round)
		return
	}
	if acc.index == nil {
		acc.index, acc.by, acc.of = make(map[meshAccusation]int), make(map[PeerID]*meshAccuser), make(map[PeerID]*meshAccused)
	}
	b := acc.by[by]
	if b == nil {
		b = &meshAccuser{id: by, me: by == m.cfg.ID}
		acc.by[by], acc.byList = b, append(acc.byList, b)
	}
	o := acc.of[of]
	if o == nil {
		o = &meshAccused{id: of}
		acc.of[of], acc.ofList = o, append(acc.ofList, o)
	}
	acc.index[a] = len(acc.edges)
	acc.edges = append(acc.edges, meshEdge{by: b, of: o, round: round, self: by == of})
	b.edges++
}

// standing finds by's standing afresh. Its word is void when it is proven
// to break the protocol, or gone (dead, left, restarted, sitting the step
// out, silent): a gone accuser no longer re-broadcasts its vote, so nodes
// that missed it would never converge with those that heard it; a
// newcomer's when it is not admitted to the step.
func (m *Mesh) standing(by *meshAccuser, admitted map[PeerID]bool) {
	by.newcomer = m.newcomer(by.id)
	by.void = !by.me && (m.ag.local[by.id] || m.ag.inflated[by.id] || m.isEquivocator(by.id) ||
		admitted != nil && by.newcomer && !admitted[by.id])
	by.disputes, by.disputed = 0, ""
}

// standingOf finds of's standing afresh, before its accusers are counted.
func (m *Mesh) standingOf(of *meshAccused) {
	of.local, of.voted, of.round, of.accusers, of.stands = m.ag.local[of.id], false, 0, 0, false
	if v := m.latestVote(of.id); v != nil {
		of.voted, of.round = true, v.round
	}
	if of.id == m.cfg.ID && m.ag.voted && (!of.voted || m.ag.round > of.round) {
		of.voted, of.round = true, m.ag.round
	}
}
