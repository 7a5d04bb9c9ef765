package mesh

import (
	"maps"
	"slices"
)

// meshAgreement is the agreement state of the current outer step. known (M)
// and local only grow during a step; a vote proposes M − X, where X =
// excluded is derived from local and the accusations of the votes heard
// (see exclusions).
type meshAgreement struct {
	step       uint64
	hash       string
	readyAt    uint64
	startedAt  uint64            // tick this agreement began (resetAgreement)
	known      map[PeerID]uint32 // Ready peers of this step and hash → inner steps
	local      map[PeerID]bool   // seen by this node: dead, failed, left, restarted, timed out, left out, equivocated
	accused    meshAccusations   // accusations heard (accuse.go)
	excluded   map[PeerID]bool   // X: local and what the accusations add (exclusions)
	accusedAt  uint64            // tick this node first found itself excluded by accusations
	disputants map[PeerID]bool   // peers excluded by a dispute (exclusions)
	inflated   map[PeerID]bool   // peers that voted far above the round floor (onPropose)
	anyVote    bool              // some peer voted in this step
	wanted     bool              // some peer's vote in this step holds this node
	contested  bool              // the own vote is a contest's, cast before canVote (contest)
	maxRound   uint32            // highest round seen in this step
	floor      uint32            // accusations of votes below this round are void (maybeRejoinStep)
	counts     meshCounts        // stepCounts
	cl         meshClosing       // the close rule (close.go)

	voted     bool
	round     uint32
	vote      []Member
	voteSum   uint64      // meshMembersSum(vote)
	votePeers []*meshPeer // the peer entries of vote's members (votePeers)
	peersGen  uint64      // Mesh.peersGen when votePeers was made
	links     []uint32    // this node's link costs to the members of vote
	roundAt   uint64
	reduceHBs uint32 // heartbeats since the ring was decided (proposalDue)
}

// resetAgreement starts the agreement of (m.step, m.hash), seeded with what
// live peers already said about it.
func (m *Mesh) resetAgreement() {
	m.casts++ // no vote heard matches the agreement's vote (sameAsMine)
	m.ag = meshAgreement{
		step: m.step, hash: m.hash, startedAt: m.tick,
		known: make(map[PeerID]uint32), local: make(map[PeerID]bool),
		excluded:   make(map[PeerID]bool),
		disputants: make(map[PeerID]bool), inflated: make(map[PeerID]bool),
	}
	for _, id := range slices.Sorted(maps.Keys(m.peers)) {
		p := m.peers[id]
		if p.equivocated {
			m.exclude(id)
		}
		if p.dead {
			continue
		}
		if p.state == StateReady || p.state == StateAgreeing || p.state == StateReducing {
			m.noteReady(id, p.step, p.hash, p.inner)
		}
		if v := p.votes.get(m.step); v != nil {
			m.mergeVote(id, v)
		}
	}
	// Back at a model it voted on before (a fetch or adoption that
	// failed, or a fetch of the model it had left): peers still hold its
	// vote, so it votes again only above that round. A second, different
	// vote in the same round is an equivocation, and peers excluded this
	// honest node from every later step.
	if r, ok := m.voted[meshKey{m.step, m.hash}]; ok {
		m.ag.maxRound = max(m.ag.maxRound, r+1)
	}
}

// noteReady records that id is Ready in step with model hash.
func (m *Mesh) noteReady(id PeerID, step uint64, hash string, inner uint32) {
	if step != m.ag.step || hash != m.ag.hash || hash == "" {
		return
	}
	_, had := m.ag.known[id]
	m.ag.known[id] = inner
	if !had {
		m.exclusions() // n, and with it the fault bound, grew
	}
}

func (m *Mesh) onPropose(id PeerID, p *meshPeer, msg *Message) {
	sum := meshMembersSum(msg.Members)
	old := p.votes.get(msg.Step)
	if old != nil && old.repeats(msg, sum) && !p.equivocated {
		// A re-broadcast (or a duplicate): nothing the agreement holds
		// changes but what the peer is doing.
		p.noteVoting(msg)
		return
	}
	v := newMeshVote(msg, sum)
	if old != nil && old.hash == v.hash {
		if old.round > v.round {
			return // a late copy of an older vote
		}
		if old.round == v.round && (old.sum != v.sum || !slices.Equal(old.members, v.members)) {
			m.equivocated(id, p, old, v)
			return
		}
	}
	if p.equivocated {
		return // its votes count for nothing; it is out of every step
	}
	if v.step == m.ag.step && v.hash == m.ag.hash && m.hash != "" && v.round > meshRoundSlack && v.round > m.roundFloor()+meshRoundSlack {
		// A member taking everyone to MaxRound, where nobody can vote
		// again in the step: no honest node gets that far above the
		// rounds of the others. Out of the step, its word void.
		m.ag.inflated[id] = true
		m.exclude(id)
		return
	}
	p.noteVoting(msg)
	p.votes.put(v)
	m.vouch(id, v)
	if i, ok := slices.BinarySearchFunc(msg.Members, id, meshCmpMember); ok && msg.Step == p.step {
		p.inner = msg.Members[i].InnerSteps
	}
	m.mergeVote(id, v)
}

// noteVoting records that the peer votes (or reduces) in msg's step,
// unless msg is a late copy of a step it left.
func (p *meshPeer) noteVoting(msg *Message) {
	if msg.Step < p.step {
		return
	}
	p.moved(msg.Step, msg.Hash)
	p.state = StateAgreeing
	if msg.State == StateReducing {
		p.state = StateReducing
	}
}

// equivocated handles id's second, different vote v in old's round: the
// first stands for nobody (id is excluded from the current step, which
// every node that sees both votes does alike, and the others learn from
// their votes' X) and the evidence goes to node, once per peer.
func (m *Mesh) equivocated(id PeerID, p *meshPeer, old, v *meshVote) {
	if v.step == m.ag.step && v.hash == m.ag.hash {
		m.exclude(id)
	}
	if p.equivocated {
		return
	}
	p.equivocated = true
	m.out.Equivocations = append(m.out.Equivocations, Equivocation{Peer: id, Step: v.step, Hash: v.hash, Round: v.round,
		First: slices.Clone(old.members), Second: slices.Clone(v.members)})
}

// mergeVote folds voter's vote of the current step into M and the
// accusations.
func (m *Mesh) mergeVote(voter PeerID, v *meshVote) {
	if v.step != m.ag.step || v.hash != m.ag.hash || m.hash == "" {
		return
	}
	m.ag.anyVote = true
	if _, in := slices.BinarySearchFunc(v.members, m.cfg.ID, meshCmpMember); in {
		m.ag.wanted = true
	}
	m.ag.maxRound = max(m.ag.maxRound, v.round)
	for _, mb := range v.members {
		if _, ok := m.ag.known[mb.ID]; !ok && mb.ID != m.cfg.ID {
			m.ag.known[mb.ID] = mb.InnerSteps
		}
	}
	m.noteVote(voter, v)
	m.exclusions()
}

// exclude adds id to what this node saw itself (local), which its votes
// carry as its accusations.
func (m *Mesh) exclude(id PeerID) {
	m.ag.local[id] = true
	m.exclusions()
}

// meshRoundSlack is how far above the round floor an honest vote may be
// (a node that timed out rounds alone, unheard); a vote beyond it excludes
// its voter from the step (onPropose).
const meshRoundSlack = 16

// roundFloor is the highest round that more than f = ⌊(n−1)/2⌋ of the n
// voters still in this step reached (the (f+1)-th highest latest round): a
// round some honest voter reached. A vote far above it is a member taking
// everyone to MaxRound, where nobody can vote again in the step
// (onPropose). Voters dead or excluded do not count: their last votes
// stay at the rounds where they left, and counted they held the floor
// down while the others, re-voting at each exclusion after a failed
// all-reduce, moved 30 rounds on; the fastest were taken for inflaters,
// excluded, sat out, and the cascade left rings of one in a connected
// network (32 members, 30 % loss: 59 extra rings in 4 runs).
func (m *Mesh) roundFloor() uint32 {
	var rounds []uint32
	if m.ag.voted {
		rounds = append(rounds, m.ag.round)
	}
	for id, p := range m.peers {
		if p.dead || m.ag.excluded[id] {
			continue // its last vote says nothing of the rounds now
		}
		if v := m.latestVote(id); v != nil && !m.isEquivocator(id) && !m.newcomer(id) {
			rounds = append(rounds, v.round)
		}
	}
	if len(rounds) == 0 {
		return 0
	}
	slices.Sort(rounds)
	slices.Reverse(rounds)
	return rounds[(len(rounds)-1)/2]
}

// meshCounts is what depends only on which peers are in M, which only
// grows within a step: computed again when it grew (stepCounts).
type meshCounts struct {
	valid    bool
	n        int             // len(known) when computed
	f        int             // faultBound
	admitted map[PeerID]bool // admitted
}

// stepCounts returns the fault bound and the admitted newcomers for the
// current M.
func (m *Mesh) stepCounts() *meshCounts {
	c := &m.ag.counts
	if !c.valid || c.n != len(m.ag.known) {
		*c = meshCounts{valid: true, n: len(m.ag.known), f: m.faultBound(), admitted: m.admitted()}
	}
	return c
}

// faultBound is f = ⌊(n−1)/2⌋ for the n peers known in this step (this
// node included, newcomers not): the most faulty peers the step can hold
// with an honest majority.
func (m *Mesh) faultBound() int {
	n := 1 // this node
	for id := range m.ag.known {
		if id != m.cfg.ID && !m.newcomer(id) {
			n++
		}
	}
	return (n - 1) / 2
}

// isEquivocator reports whether id was caught voting twice in one round.
func (m *Mesh) isEquivocator(id PeerID) bool {
	p := m.peers[id]
	return p != nil && p.equivocated
}

// progress moves the agreement on as far as what is known allows.
func (m *Mesh) progress() {
	m.updateClose()
	if m.state == StateExcluded {
		m.maybeRejoinStep()
		return
	}
	if m.state != StateReady && m.state != StateAgreeing {
		return
	}
	if m.stuckBelowMinimum() {
		m.restartStep()
	}
	if m.ag.excluded[m.cfg.ID] {
		m.onExcluded()
		return
	}
	if !m.ag.voted {
		if !m.canVote() {
			return
		}
		m.vote(m.ag.maxRound)
		if m.state != StateAgreeing {
			return
		}
	} else if m.ag.contested && !m.settleContest() {
		return
	}
	for range 3 { // a new vote is refuted again only if X grew meanwhile
		// (a contest's vote may be below the minimum: never decided; nor is
		// a vote that names a member excluded since: a node held to the
		// minimum whose ring failed casts no vote without the culprit, and
		// deciding the old one again retried the failed ring at once, a
		// thousand times a second, until its step restarted)
		if m.decidable() && !m.refuted() && !m.belowMinimum(len(m.ag.vote)) {
			if i, ok := meshUnreachableMember(len(m.ag.vote), m.voteLinks(), m.cfg.AllDirect); ok {
				if m.waitForLinks() {
					return
				}
				m.leaveOut(m.ag.vote[i].ID)
				continue
			}
			m.decide()
			return
		}
		if !m.refuted() {
			return
		}
		if m.ag.roundAt == m.tick {
			// One new round a tick: a burst of exclusions heard in one
			// tick is one round, not one each (the next Tick votes).
			return
		}
		m.vote(max(m.ag.round+1, m.ag.maxRound))
		if m.state != StateAgreeing {
			return
		}
	}
}

// onExcluded: this node is in X. Excluded by accusations, it contests them
// and gives the votes that dispute them time to arrive before sitting out
// (the others see its Excluded heartbeat as final).
func (m *Mesh) onExcluded() {
	if !m.ag.local[m.cfg.ID] {
		m.contest()
		if m.ag.accusedAt == 0 {
			m.ag.accusedAt = m.tick
		}
		if m.tick-m.ag.accusedAt < uint64(2*m.cfg.HeartbeatTicks) {
			return
		}
	}
	m.setState(StateExcluded)
}

// settleContest: a contest's vote says this node is alive; it is decided
// only once the node could have voted (canVote), and for what it sees
// then. It reports whether progress may go on to decide.
func (m *Mesh) settleContest() bool {
	if !m.canVote() {
		return false
	}
	m.ag.contested = false
	if !slices.Equal(m.viewMembers(), m.ag.vote) {
		m.vote(max(m.ag.round+1, m.ag.maxRound))
		return m.state == StateAgreeing
	}
	return true
}

// ringRunsWithout: a live peer reduces a ring of this step and model that
// does not hold this node. A node Ready that late sits the step out and
// fetches the ring's result, rather than vote: its vote, which the ring's
// members have no part in, could only make a second ring of the step from
// the members left over (in the random-fault simulation with long
// all-reduces, a restarted member excluded the ring's members as disputants
// of an accusation and completed the step alone: a fork).
func (m *Mesh) ringRunsWithout() bool {
	for _, p := range m.peers {
		if p.dead || p.state != StateReducing || p.step != m.ag.step || p.hash != m.ag.hash {
			continue
		}
		if v := m.latestVoteOf(p); v != nil && v.hash == m.ag.hash {
			if _, in := slices.BinarySearchFunc(v.members, m.cfg.ID, meshCmpMember); !in {
				return true
			}
		}
	}
	return false
}

// canVote: a Ready node held to the minimum (heldToMinimum) waits for
// MinMembers Ready members, whatever its peers do; then it votes once
// someone else voted for a ring holding it in this step, or once every
// live peer of this step and hash is Ready, or after StragglerTicks (under
// the close rule: CloseWaitTicks after the step closed).
//
// Votes that leave this node out wait for nothing it does, so they do not
// hurry it past the peers it awaits: two members restarted at once at the
// step of the others' votes, which had excluded both, each voted alone at
// once and completed the step in a ring of one, two rings of one step
// (random-fault seed 2814 with 30-tick all-reduces).
func (m *Mesh) canVote() bool {
	if m.heldToMinimum() && m.belowMinimum(len(m.viewMembers())) {
		return false
	}
	if m.ag.wanted {
		return true
	}
	if !m.closeRule() && m.tick-m.ag.readyAt >= uint64(m.cfg.StragglerTicks) {
		return true
	}
	if !m.closeRule() {
		return !m.anyAwaited()
	}
	if late := m.awaited(); len(late) > 0 {
		return m.closeWaited(late)
	}
	return true
}

// awaited returns, in no order, the live peers of this step and line that
// a Ready node waits for and that are not Ready yet.
func (m *Mesh) awaited() []PeerID { return m.awaitedUpTo(len(m.peers)) }

// anyAwaited reports whether a Ready node waits for some peer (awaited).
func (m *Mesh) anyAwaited() bool { return len(m.awaitedUpTo(1)) > 0 }

// awaitedUpTo returns at most n of the awaited peers: progress asks on
// every message heard, over every peer.
func (m *Mesh) awaitedUpTo(n int) []PeerID {
	var late []PeerID
	full := m.newcomersFull()
	for id, p := range m.peers {
		if len(late) == n {
			break
		}
		if full && m.newcomer(id) {
			continue
		}
		if !p.dead && m.ag.step >= p.noWaitEnd && m.awaits(p) && !m.ag.excluded[id] && (m.linkCost[id] != LinkUnreachable || m.cfg.AllDirect) {
			if _, ok := m.ag.known[id]; !ok {
				late = append(late, id)
			}
		}
	}
	return late
}

// awaits reports whether a Ready node should wait for p (up to
// StragglerTicks): p trains the same model, or is finishing the previous
// step of this line (its news of the new step may not have arrived yet), or
// is fetching a model. canVote does not wait for a peer this node reaches
// only through a relay, or not at all (LinkUnreachable): a member behind a
// symmetric NAT, left out of every ring and fetching each step's model,
// would otherwise hold every step for StragglerTicks. With AllDirect it
// does wait: such a member takes part as a client of the direct scatter,
// and one not waited for arrives late every step, fetches the model and
// never catches up.
func (m *Mesh) awaits(p *meshPeer) bool {
	switch {
	case p.state == StateSyncing:
		return true
	case p.step == m.step && p.hash == m.hash:
		return p.state.hasModel()
	case m.step > 0 && p.step == m.step-1 && p.hash == m.prevHash:
		return p.state.hasModel() || p.state == StateExcluded
	}
	return false
}

// viewMembers returns sorted M − X − dead, newcomers limited (admit), at
// most MaxMembers (the first ones by id, so that every node truncates
// alike).
func (m *Mesh) viewMembers() []Member {
	var out []Member
	admitted := m.stepCounts().admitted
	for id, inner := range m.ag.known {
		if m.ag.excluded[id] || admitted != nil && m.newcomer(id) && !admitted[id] {
			continue
		}
		if p := m.peers[id]; p != nil && p.dead {
			continue
		}
		out = append(out, Member{ID: id, InnerSteps: inner})
	}
	slices.SortFunc(out, func(a, b Member) int { return meshCmpMember(a, b.ID) })
	if len(out) > MaxMembers {
		out = out[:MaxMembers]
	}
	return out
}

// vote casts this node's vote for round: M − X.
func (m *Mesh) vote(round uint32) {
	round = min(round, MaxRound)
	if m.ag.voted && round <= m.ag.round {
		return // one vote per round, even at MaxRound
	}
	members := m.viewMembers()
	if _, in := slices.BinarySearchFunc(members, m.cfg.ID, meshCmpMember); !in {
		m.setState(StateExcluded) // excluded by a peer, or truncated away
		return
	}
	if !m.ag.voted && m.ringRunsWithout() {
		m.setState(StateExcluded) // late: the step's ring runs; fetch its result
		return
	}
	if m.belowMinimum(len(members)) {
		return // a ring below the minimum: wait (restartBelowMinimum)
	}
	m.cast(round, members)
	for id := range m.ag.local {
		m.noteAccusation(m.cfg.ID, id, round)
	}
	m.exclusions() // this node's vote disputes accusations of it
	m.setState(StateAgreeing)
	m.send(m.proposeMsg())
}

// cast makes members this node's vote of round (vote, contest).
//
// At the run's first step the members of the vote are known from then on
// (meet): the run's founders, Ready at its initial model, which any of
// them may join before the first ring without admission (admitting), so
// this lets in no one the first ring could not hold. Without it, founders
// that a partition split before any vote crossed (each half decided a
// first ring of its own) trained apart as strangers, the smaller half
// knowing nobody on the larger side, and never merged (random-fault seeds
// 666 and 700 at 4–64 members).
func (m *Mesh) cast(round uint32, members []Member) {
	m.ag.voted, m.ag.round, m.ag.vote, m.ag.contested = true, round, members, false
	m.ag.voteSum, m.ag.votePeers = meshMembersSum(members), nil
	m.casts++
	m.ag.maxRound = max(m.ag.maxRound, round)
	m.ag.links = m.linkRow(members)
	m.ag.roundAt = m.tick
	if m.ag.step == 0 {
		ids := make([]PeerID, len(members))
		for i, mb := range members {
			ids[i] = mb.ID
		}
		m.meet(ids) // the run's founders: see above
	}
	if m.voted == nil {
		m.voted = make(map[meshKey]uint32, meshKeepVotes+1)
	}
	m.voted[meshKey{m.ag.step, m.ag.hash}] = round
	if len(m.voted) > meshKeepVotes {
		oldest := meshKey{step: ^uint64(0)}
		for k := range m.voted {
			if k.step < oldest.step || k.step == oldest.step && k.hash < oldest.hash {
				oldest = k
			}
		}
		delete(m.voted, oldest)
	}
}

// contest: a peer's vote names this node in its X, and this node has not
// voted since: it votes, in a round at least the accusation's, for the
// members it sees and itself, so that every node sees it alive and the
// accusation disputed (exclusions). Without that vote the accused would
// just sit out, and the accuser would have its way. The vote is not
// decided before canVote allows (progress): two members restarted at once,
// accused by every holder of their step, each contested, found every
// accuser void (sitting the step out) and decided its contest's vote, a
// ring of one, without waiting for the other: two rings of one step
// (random-fault seed 2814 with 30-tick all-reduces).
func (m *Mesh) contest() {
	if m.ag.local[m.cfg.ID] {
		return
	}
	var round uint32
	due := false
	for _, e := range m.ag.accused.edges {
		if e.of.id == m.cfg.ID && !e.by.me && (!m.ag.voted || m.ag.round < e.round) {
			due, round = true, max(round, e.round)
		}
	}
	if !due {
		return
	}
	round = min(max(round, m.ag.maxRound, m.ag.round+1), MaxRound)
	members := m.viewMembers()
	if i, in := slices.BinarySearchFunc(members, m.cfg.ID, meshCmpMember); !in {
		members = slices.Insert(members, i, Member{ID: m.cfg.ID, InnerSteps: m.inner})
	}
	m.cast(round, members)
	m.ag.contested = true
	m.send(m.proposeMsg())
	m.exclusions()
}

func (m *Mesh) proposeMsg() Message {
	ex := slices.Sorted(maps.Keys(m.ag.local)) // this node's own accusations only
	if room := MaxMembers - len(m.ag.vote); len(ex) > room {
		ex = ex[:room]
	}
	return Message{
		Type: MsgPropose, From: m.cfg.ID, State: m.state, Step: m.ag.step, Hash: m.ag.hash,
		Round: m.ag.round, Members: slices.Clone(m.ag.vote), Excluded: ex, Links: slices.Clone(m.ag.links),
	}
}

// decidable: every other member's latest vote is this node's vote, same round.
func (m *Mesh) decidable() bool {
	for i, p := range m.votePeers() {
		if m.ag.vote[i].ID == m.cfg.ID {
			continue
		}
		v := m.latestVoteOf(p)
		if v == nil || v.round != m.ag.round || !m.sameAsMine(v) {
			return false
		}
	}
	return true
}

// refuted: this node's vote can no longer be decided in its round, because
// a member voted otherwise in it, moved to a later round, or is excluded.
func (m *Mesh) refuted() bool {
	for i, p := range m.votePeers() {
		id := m.ag.vote[i].ID
		if id == m.cfg.ID {
			continue
		}
		if m.ag.excluded[id] || p != nil && p.dead {
			return true
		}
		v := m.latestVoteOf(p)
		if v != nil && (v.round > m.ag.round || (v.round == m.ag.round && !m.sameAsMine(v))) {
			return true
		}
	}
	return false
}

// linkRecheckTicks is how often a node waiting for links to be punched
// votes again with its fresh link costs.
const linkRecheckTicks = 10

// waitForLinks: before the run's first ring, a vote whose members no ring
// of direct links holds is not decided at once while the members' links
// may still be punched (up to StragglerTicks after this node was Ready):
// every linkRecheckTicks this node votes again in a new round carrying its
// fresh link costs, and the others, refuted, follow. Later steps leave the
// member out at once (it is already in the run and fetches the model).
func (m *Mesh) waitForLinks() bool {
	if m.established || m.tick-m.ag.readyAt >= uint64(m.cfg.StragglerTicks) {
		return false
	}
	if m.tick-m.ag.roundAt >= linkRecheckTicks {
		m.vote(max(m.ag.round+1, m.ag.maxRound))
	}
	return true
}

// leaveOut excludes id from this step because no ring of direct links holds
// every member of the vote, tells the node (Ready.LeftOut), and votes again.
func (m *Mesh) leaveOut(id PeerID) {
	m.exclude(id)
	m.out.LeftOut = append(m.out.LeftOut, id)
	m.vote(max(m.ag.round+1, m.ag.maxRound))
}

func (m *Mesh) decide() {
	// A peer in a dispute of this step (exclusions) is not waited for in
	// the next steps, 1, 2, 4, … of them as its disputes go on, until it
	// is in a ring again: an accuser would otherwise hold every step for
	// StragglerTicks while it fetches the model it missed.
	for id, p := range m.peers {
		if _, in := slices.BinarySearchFunc(m.ag.vote, id, meshCmpMember); in {
			p.disputeRun, p.lateRun = 0, 0
		} else if m.ag.disputants[id] || m.ag.inflated[id] {
			p.disputeRun = min(p.disputeRun+1, 10)
			p.noWaitEnd = m.ag.step + 1 + 1<<(p.disputeRun-1)
		}
	}
	r := meshNewRing(m.ag.step, m.ag.hash, m.ag.round, m.ag.vote, m.voteLinks(), m.cfg.AllDirect)
	m.meet(r.Members)
	m.ring, m.last = &r, &r
	m.out.Ring = &r
	m.ag.reduceHBs = 0
	m.setState(StateReducing)
}

// proposalDue says whether this heartbeat re-sends the node's vote. While
// agreeing, every heartbeat does: a peer that lost the vote cannot decide
// without it. Once the ring is decided the re-sends serve only a member
// that lost the vote (it holds the ring's all-reduce until it decides): they
// go on at every heartbeat while a member of the ring is heard undecided,
// and otherwise thin out — the 1st, 2nd, 4th and 8th heartbeat after the
// decision, then every 8th, for a laggard whose own messages were lost too.
// A long all-reduce no longer carries a vote of O(K) bytes from each of K
// members every heartbeat (docs/scale.md, "Agreement").
func (m *Mesh) proposalDue() bool {
	if !m.ag.voted || m.ag.roundAt == m.tick {
		return false
	}
	switch m.state {
	case StateAgreeing:
		return true
	case StateReducing:
		m.ag.reduceHBs++
		n := m.ag.reduceHBs
		return n&(n-1) == 0 && n <= meshResendCap || n%meshResendCap == 0 || m.ringUndecided()
	}
	return false
}

// ringUndecided: a live member of the decided ring is last heard Ready or
// agreeing in this step, so it may lack this node's vote.
func (m *Mesh) ringUndecided() bool {
	for _, p := range m.votePeers() {
		if p != nil && !p.dead && p.step == m.ag.step && (p.state == StateReady || p.state == StateAgreeing) {
			return true
		}
	}
	return false
}

// meshResendCap is the largest gap, in heartbeats, between re-sends of a
// decided vote (proposalDue).
const meshResendCap = 8

// roundTimeout: a round undecided for ProposeTimeoutTicks excludes the
// members that did not vote for it (unless they are busy reducing another
// ring of this step, which will end either way) and votes again.
func (m *Mesh) roundTimeout() {
	if m.state != StateAgreeing || !m.ag.voted || m.tick-m.ag.roundAt < uint64(m.cfg.ProposeTimeoutTicks) {
		return
	}
	grew := false
	for i, p := range m.votePeers() {
		id := m.ag.vote[i].ID
		if id == m.cfg.ID {
			continue
		}
		v := m.latestVoteOf(p)
		if v != nil && v.round == m.ag.round && m.sameAsMine(v) {
			continue
		}
		if p != nil && !p.dead && p.state == StateReducing && p.step == m.ag.step {
			continue
		}
		m.exclude(id)
		grew = true
	}
	if !grew {
		m.ag.roundAt = m.tick
		return
	}
	m.vote(max(m.ag.round+1, m.ag.maxRound))
}

// maybeRejoinStep: an Excluded node whose step has no other live holder
// left, and no live peer ahead of it (every peer that excluded it is
// gone), starts the step's agreement afresh rather than wait for a next
// step that nobody will produce; so does one held to the minimum whose
// peers cannot make the first ring without it (stuckBelowMinimum).
func (m *Mesh) maybeRejoinStep() {
	if m.stepLivesOn() && !m.stuckBelowMinimum() {
		return
	}
	m.restartStep()
}

// stepLivesOn reports whether a live peer holds this node's step or is
// ahead of it.
func (m *Mesh) stepLivesOn() bool {
	for _, p := range m.peers {
		if p.dead || !p.state.hasModel() {
			continue
		}
		if (p.step == m.step && p.hash == m.hash) || p.step > m.step {
			// A holder of its step, or a peer ahead: the line lives on,
			// and checkLineage fetches or adopts. A peer two steps ahead
			// cannot be told to be on this line (one PrevHash), and
			// treating it as gone made a newcomer left out of a fast step
			// train the step alone: a fork of one.
			return true
		}
	}
	return false
}

// restartStep starts the agreement of this node's step afresh, in a round
// above every round seen, with no accusation of the earlier rounds.
func (m *Mesh) restartStep() {
	round := m.ag.maxRound + 1
	m.resetAgreement()
	m.ag.maxRound = max(m.ag.maxRound, round)
	m.ag.known[m.cfg.ID] = m.inner
	m.ag.readyAt = m.tick
	// A fresh start for every accusation, not only those of this node:
	// when all holders of a step sat it out, each restarts it on its own,
	// and one that forgave only itself kept the others' old disputes
	// (word against word, both out) and voted, and decided, alone — two
	// singleton rings of one step in a connected network (seed 6131).
	// The votes of earlier rounds still count for M and the round.
	m.ag.floor = round
	m.ag.accused = meshAccusations{}
	m.exclusions()
	m.setState(StateReady)
}
