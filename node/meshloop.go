package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/account"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// meshLoop owns the mesh state machine: it ticks it, feeds it gossip and the
// training goroutine's commands, publishes what it asks, and hands rings and
// fetches to the training goroutine.
func (n *Node) meshLoop(ctx context.Context, m *mesh.Mesh) {
	tick := time.NewTicker(n.cfg.Tick)
	defer tick.Stop()
	log := n.cfg.Logger.With("system", "mesh")
	msgs := n.host.Messages()
	var lastPeers time.Time
	var heard heardFeed
	n.noteHistory(m) // the model it starts with (a checkpoint's history)
	for {
		var done chan struct{}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			heard.tick(n.host.Libp2p().Network().Peers, n.host.Received, m.Heard)
			m.Tick()
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			if msg.Topic == account.Topic {
				n.onReport(mesh.PeerID(msg.From.String()), msg.Data)
				break
			}
			n.stepMesh(m, msg.From, msg.Data, log)
		case c := <-n.meshCmds:
			c.apply(m)
			n.noteHistory(m) // the model and its history change only by commands (Completed, Synced)
			done = c.done
		}
		for m.HasReady() {
			n.carryOut(ctx, m, m.Ready(), log)
		}
		n.noteWanted(m)
		if done != nil {
			close(done)
		}
		if time.Since(lastPeers) > time.Second {
			lastPeers = time.Now()
			st := m.Status()
			costs := n.updatePeers(st)
			n.noteWaiting(st.Waiting, log)
			if n.cfg.RingOrder != "latency" {
				// Sorted order, except that relayed links stay out of rings.
				maps.DeleteFunc(costs, func(_ mesh.PeerID, c uint32) bool { return c != mesh.LinkUnreachable })
			}
			m.SetLinkCosts(costs)
		}
	}
}

// errSpoofed rejects a mesh message whose From is not its gossip signer.
var errSpoofed = errors.New("node: mesh message From is not its signer")

// meshSigned decodes the mesh message or bundle of messages that from
// signed. A bundle is one sender's messages of one tick: a part that is not
// from its signer fails it whole.
func meshSigned(from peer.ID, data []byte) ([]mesh.Message, error) {
	msgs, err := mesh.DecodeBundle(data)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if m.From != mesh.PeerID(from.String()) {
			return nil, errSpoofed
		}
	}
	return msgs, nil
}

// stepMesh feeds what from signed (meshSigned) to the state machine.
func (n *Node) stepMesh(m *mesh.Mesh, from peer.ID, data []byte, log *slog.Logger) {
	msgs, err := meshSigned(from, data)
	for _, mm := range msgs {
		if err = m.Step(mm); err != nil {
			break
		}
	}
	if err != nil {
		log.Warn("bad mesh message", "from", from, "err", err)
	}
}

// publishMesh publishes the messages of one Ready, up to mesh.MaxBundle at a
// time as one gossip message (mesh.EncodeBundle): one signature and one
// message id for each receiver to handle instead of one per message. What
// does not fit a bundle (mesh's or the host's size limit) goes one message
// at a time.
func (n *Node) publishMesh(ctx context.Context, msgs []mesh.Message, log *slog.Logger) {
	publish := func(b []byte) error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return n.pub.PublishTo(pctx, p2p.MeshTopic, b)
	}
	for len(msgs) > 0 {
		part := msgs[:min(len(msgs), mesh.MaxBundle)]
		msgs = msgs[len(part):]
		if len(part) > 1 {
			if b, err := mesh.EncodeBundle(part); err == nil {
				err = publish(b)
				if err == nil || !errors.Is(err, p2p.ErrMessageTooLarge) {
					if err != nil && ctx.Err() == nil {
						log.Warn("publish", "messages", len(part), "err", err)
					}
					continue
				}
			}
		}
		for _, msg := range part {
			b, err := mesh.Encode(msg)
			if err != nil {
				log.Warn("encode mesh message", "type", msg.Type, "err", err)
				continue
			}
			if err := publish(b); err != nil && ctx.Err() == nil {
				log.Warn("publish", "type", msg.Type, "err", err)
			}
		}
	}
}

// carryOut does what one Ready asks, then advances the state machine.
func (n *Node) carryOut(ctx context.Context, m *mesh.Mesh, rd mesh.Ready, log *slog.Logger) {
	n.publishMesh(ctx, rd.Messages, log)
	for _, e := range rd.Equivocations {
		n.exclude(e.Peer, "equivocation", fmt.Sprintf("proposed two different rings for step %d round %d (signed mesh messages): %s and %s",
			e.Step+1, e.Round, memberIDs(e.First), memberIDs(e.Second)))
	}
	if len(rd.LeftOut) > 0 {
		log.Warn("left out of this step's ring: no ring of direct links holds them (NAT, not punched yet)", "peers", rd.LeftOut)
	}
	if len(rd.Dead) > 0 {
		log.Info("peers gone", "peers", rd.Dead)
		n.inflight.abortIfMember(rd.Dead)
	}
	if rd.StateChanged {
		n.board.update(func(s *Status) { s.State = rd.State.String() })
		switch {
		case rd.State == mesh.StateExcluded && m.Newcomer() && !n.awaitingAdmission:
			n.awaitingAdmission = true
			step, _ := m.Model()
			log.Info("waiting for admission: this node made none of the run's last steps, and newcomers join a few per step",
				"step", step, "window", mesh.MadeWindow)
		case rd.State == mesh.StateReducing && n.awaitingAdmission:
			n.awaitingAdmission = false
			log.Info("admitted to a ring")
		}
	}
	if rd.Ring != nil {
		n.sendEvent(ctx, diloco.Event{Ring: rd.Ring})
	}
	n.noteWanted(m) // before the loop can take up rd's fetch
	if rd.Fetch != nil {
		n.sendEvent(ctx, diloco.Event{Fetch: rd.Fetch})
	}
	if rd.Adopt != nil {
		n.sendEvent(ctx, diloco.Event{Fetch: rd.Adopt, Adopt: true})
	}
	if rd.Close != nil {
		n.sendEvent(ctx, diloco.Event{Close: rd.Close})
	}
	m.Advance(rd)
}

func (n *Node) sendEvent(ctx context.Context, ev diloco.Event) {
	select {
	case n.events <- ev:
	case <-ctx.Done():
	}
}

// updatePeers refreshes the peer table of the REST API and returns the
// measured link costs to the peers (round-trip time in mesh.LinkUnit).
func (n *Node) updatePeers(st mesh.Status) map[mesh.PeerID]uint32 {
	now := time.Now()
	ps := make([]PeerStatus, 0, len(st.Peers))
	costs := make(map[mesh.PeerID]uint32, len(st.Peers))
	reach := n.host.Reachability()
	private := reach.State == p2p.ReachPrivate
	for _, p := range st.Peers {
		s := n.peerStatus(p, st.Tick, now)
		ps = append(ps, s)
		if c := linkCost(s, private); c != 0 {
			costs[p.ID] = c
		}
	}
	n.board.setPeers(ps)
	var members []string
	if st.Ring != nil {
		for _, id := range st.Ring.Members {
			members = append(members, string(id))
		}
	}
	n.board.update(func(s *Status) {
		s.State = st.State.String()
		if members != nil {
			s.Members = members
		}
		s.Reachability = reach
		s.Excluded = n.host.Excluded()
		s.Newcomer = st.Newcomer
		tr := n.host.TotalBandwidth()
		s.BytesSent, s.BytesReceived = int64(tr.Out), int64(tr.In)
	})
	return costs
}

// noteWaiting says, on the status API and in the log, that this node holds
// the run's first ring to its minimum and how many members it has: when it
// starts waiting, whenever the count changes (checked once a second), and
// when it stops.
func (n *Node) noteWaiting(w *mesh.Waiting, log *slog.Logger) {
	var ws *Waiting
	if w != nil {
		ws = &Waiting{Members: w.Need, Have: w.Have}
	}
	n.board.update(func(s *Status) { s.Waiting = ws })
	switch {
	case w != nil && w.Have != n.waitingHave:
		log.Info("waiting for members before the run's first ring", "min_members", w.Need, "have", w.Have)
		n.waitingHave = w.Have
	case w == nil && n.waitingHave != 0:
		log.Info("enough members for the run's first ring")
		n.waitingHave = 0
	}
}

// linkCost is the cost this node reports to the mesh for its link to a
// peer (mesh.LinkUnit; 0: unknown). All-reduce bytes never cross a relay,
// so a peer reached only through one is unreachable; so is one not
// connected at all while a NAT is in the way (this node is private, or the
// peer has no public address): it cannot simply be dialled.
func linkCost(s PeerStatus, private bool) uint32 {
	switch {
	case s.Connected && s.Relayed:
		return mesh.LinkUnreachable
	case !s.Connected && (private || !slices.ContainsFunc(s.Addrs, p2p.IsPublicAddr)):
		return mesh.LinkUnreachable
	case s.Connected && s.LatencyMs > 0:
		return uint32(max(1, s.LatencyMs*1000/mesh.LinkUnit))
	}
	return 0
}

func (n *Node) peerStatus(p mesh.PeerStatus, tick uint64, now time.Time) PeerStatus {
	state := p.State.String()
	if p.Dead {
		state = "gone" // left, or missed its heartbeats
	}
	ps := PeerStatus{ID: string(p.ID), Addrs: p.Addrs, State: state, OuterStep: p.Step, ModelHash: p.Hash,
		LastSeen: now.Add(-time.Duration(tick-min(p.LastSeen, tick)) * n.cfg.Tick)}
	if id, err := peerID(p.ID); err == nil {
		info := n.host.PeerInfo(id)
		ps.Connected = info.Connected
		ps.LatencyMs = float64(info.Latency) / float64(time.Millisecond)
		ps.Transport, ps.Relayed, ps.Punch = info.Transport, info.Relayed, info.Punch
	}
	return ps
}

// memberIDs formats a vote's members for a log line.
func memberIDs(ms []mesh.Member) string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = string(m.ID)
	}
	return "[" + strings.Join(ids, " ") + "]"
}
