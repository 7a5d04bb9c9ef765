package mesh

// The close rule (Config.CloseFraction): an outer step does not wait for its
// slowest member. The step closes, in a node's view, when
//
//   - the inner steps of its Ready members, each counted up to Inner (H),
//     sum to CloseFraction · n · H, n being the members of the step: the
//     Ready ones and the live peers a Ready node waits for (awaited), this
//     node included; or
//   - a peer said so (MsgClose), or voted in the step; or
//   - this node has been Ready for StragglerTicks (the time budget).
//
// A node still training the step when it closes is told so once
// (Ready.Close): node ends the phase at its next inner-step boundary, or
// at the last one from a snapshot, and calls SetReady with the inner steps
// it finished — its weight in the ring, like a joiner's partial phase. A
// Ready node announces the closure (MsgClose, again every HeartbeatTicks
// until it votes), then waits up to CloseWaitTicks for the members still
// training to be Ready before it votes without them; a member that did
// not answer is not waited for in the next 1, 2, 4, … steps, until it is
// in a ring again, as a disputant (decide). So a member that only ever
// delays holds no step, and one that claims more inner steps than it ran
// gains at most H (weights are capped at H by robust averaging and a claim
// above H is evidence), which an honest fast member has too. Work counted
// up to H each means fewer than CloseFraction · n members cannot close a
// step by themselves: with ½ (node's default), a minority that claims to
// be fast cannot shorten the honest members' phases.

// Close asks node to end the phase of the step it trains (Ready.Close).
type Close struct {
	Step uint64
	Hash string // θ₀ hash of Step
}

// meshClosing is the close rule's state of the current step.
type meshClosing struct {
	closed   bool
	at       uint64 // tick the step closed in this node's view
	heard    bool   // a peer's MsgClose of the step
	asked    bool   // Ready.Close was handed out
	sentAt   uint64 // tick of this node's last MsgClose
	waitDone bool   // the close wait ran out and the late members were noted
}

// Closed reports whether step, this node's current step, is closed in its
// view (the close rule): node asks it at each inner-step boundary, since
// Ready.Close of a step that closed before this node moved to it comes
// only after Completed. It brings the close rule up to date first.
func (m *Mesh) Closed(step uint64) bool {
	m.updateClose()
	return m.closeRule() && step == m.step && m.ag.step == m.step && m.ag.cl.closed
}

// closeRule reports whether steps close by the work target.
func (m *Mesh) closeRule() bool { return m.cfg.CloseFraction > 0 }

// updateClose closes the step when the rule says so, announces it while
// Ready, and asks node to end the phase while Training.
func (m *Mesh) updateClose() {
	if !m.closeRule() || m.hash == "" || m.state != StateTraining && m.state != StateReady {
		return
	}
	cl := &m.ag.cl
	if !cl.closed {
		budget := m.state == StateReady && m.tick-m.ag.readyAt >= uint64(m.cfg.StragglerTicks)
		if !m.ag.anyVote && !cl.heard && !budget && !m.workDone() {
			return
		}
		cl.closed, cl.at, cl.sentAt = true, m.tick, 0
	}
	switch {
	case m.state == StateTraining && !cl.asked:
		cl.asked = true
		m.out.Close = &Close{Step: m.step, Hash: m.hash}
	case m.state == StateReady && !m.ag.anyVote && (cl.sentAt == 0 || m.tick-cl.sentAt >= uint64(m.cfg.HeartbeatTicks)) && m.anyAwaited():
		cl.sentAt = max(m.tick, 1)
		m.send(Message{Type: MsgClose, From: m.cfg.ID, Step: m.step, Hash: m.hash})
	}
}

// onClose records a peer's MsgClose of the current step.
func (m *Mesh) onClose(msg Message) {
	if msg.Step == m.ag.step && msg.Hash == m.ag.hash && m.hash != "" {
		m.ag.cl.heard = true
	}
}

// workDone reports whether the Ready members' inner steps, each counted up
// to Inner, reach CloseFraction · n · Inner.
func (m *Mesh) workDone() bool {
	var done uint64
	n := len(m.awaited())
	for id, inner := range m.ag.known {
		if m.ag.excluded[id] {
			continue
		}
		done += uint64(min(inner, uint32(m.cfg.Inner)))
		n++
	}
	if _, ready := m.ag.known[m.cfg.ID]; !ready {
		n++ // this node, still training
	}
	return float64(done) >= m.cfg.CloseFraction*float64(n)*float64(m.cfg.Inner)
}

// closeWaited reports, under the close rule, whether a Ready node stops
// waiting for the members in late: once the step closed and CloseWaitTicks
// passed since (or since its own Ready). Those still late are not waited
// for in the next steps (1, 2, 4, … of them as it goes on) until they are
// in a ring again.
func (m *Mesh) closeWaited(late []PeerID) bool {
	cl := &m.ag.cl
	if !cl.closed || m.tick-max(cl.at, m.ag.readyAt) < uint64(m.cfg.CloseWaitTicks) {
		return false
	}
	if !cl.waitDone {
		cl.waitDone = true
		for _, id := range late {
			p := m.peers[id]
			p.lateRun = min(p.lateRun+1, 10)
			p.noWaitEnd = max(p.noWaitEnd, m.ag.step+1+1<<(p.lateRun-1))
		}
	}
	return true
}
