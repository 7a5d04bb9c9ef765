package mesh

// The run's minimum (Config.MinMembers) holds the first ring: no ring of
// the run's initial model (step 0) is voted for or decided with fewer
// members, by any node, and a node not established since it started
// (fresh, or restarted from a checkpoint) holds its own first ring to it
// at any step. A peer's vote does not release a node from it, nor does a
// re-vote after refutations, a restarted step, or lost gossip: vote and
// decide check the ring itself.
//
// Exclusions only grow within a step, so a first step whose agreement
// excluded live peers (a false death under load, a round timeout, a
// dispute) could never reach the minimum again. A node held to the
// minimum that falls below it while such peers are Ready restarts the
// step's agreement in a round above all seen, its accusations forgotten
// (restartStep); the others, below it too, do the same, and they agree
// again.

// heldToMinimum reports whether this node's rings must have MinMembers
// members: it holds the run's initial model, or has not been in a ring or
// synced from peers since it started.
func (m *Mesh) heldToMinimum() bool {
	return m.cfg.MinMembers > 1 && (m.step == 0 || !m.established)
}

// belowMinimum reports whether a ring of n members is below the minimum
// this node is held to.
func (m *Mesh) belowMinimum(n int) bool {
	return n < m.cfg.MinMembers && m.heldToMinimum()
}

// stuckBelowMinimum reports whether this node, held to the minimum and
// Ready, can no longer reach it in this step's agreement because live
// peers that are in the step are excluded from it: then only a fresh
// agreement (restartStep) can make the first ring. At most once per
// HeartbeatTicks, so that a burst of exclusions is one restart.
func (m *Mesh) stuckBelowMinimum() bool {
	if !m.heldToMinimum() || m.tick-m.ag.startedAt < uint64(m.cfg.HeartbeatTicks) {
		return false
	}
	have := len(m.viewMembers())
	if have >= m.cfg.MinMembers {
		return false
	}
	for id := range m.ag.excluded {
		if m.recoverable(id) {
			have++
		}
	}
	return have >= m.cfg.MinMembers
}

// recoverable reports whether excluded peer id would be in a fresh
// agreement of this step: itself, or a live peer in the step (Ready,
// voting, reducing, or sitting it out) that broke no rule.
func (m *Mesh) recoverable(id PeerID) bool {
	if id == m.cfg.ID {
		return true
	}
	p := m.peers[id]
	if p == nil || p.dead || p.equivocated || m.ag.inflated[id] || p.step != m.ag.step || p.hash != m.ag.hash {
		return false
	}
	switch p.state {
	case StateReady, StateAgreeing, StateReducing, StateExcluded:
		return true
	}
	return false
}

// Waiting is what a node held to the minimum waits for (Status.Waiting).
type Waiting struct {
	// Need is the minimum (Config.MinMembers); Have counts the members
	// Ready in this step that it could vote for now, itself included.
	Need, Have int
}

// waiting returns what this node waits for, nil unless it is Ready or
// agreeing below the minimum it is held to.
func (m *Mesh) waiting() *Waiting {
	if m.state != StateReady && m.state != StateAgreeing || !m.heldToMinimum() {
		return nil
	}
	if m.ag.voted && !m.belowMinimum(len(m.ag.vote)) && !m.refuted() {
		return nil // its vote holds enough members: agreeing, not waiting
	}
	have := len(m.viewMembers())
	if have >= m.cfg.MinMembers {
		return nil
	}
	return &Waiting{Need: m.cfg.MinMembers, Have: have}
}
