package node

import (
	"context"
	"slices"

	"github.com/intellect-node/intellect-node/mesh"
)

// meshPort is all the outer loop (and a model fetch) sees of the mesh
// goroutine: typed commands in, decided rings and fetch requests out.
type meshPort interface {
	// Ready tells the mesh this member finished the inner steps of step.
	Ready(step uint64, inner int)
	// Completed tells it step's all-reduce is applied: the model is hash.
	Completed(step uint64, hash string)
	// Failed reports a failed attempt of step, blaming culprit.
	Failed(step uint64, culprit mesh.PeerID)
	// Synced tells it a fetched model (step, hash) is now this node's, and
	// who made the line's last models (the donor's word, validated).
	Synced(step uint64, hash string, history []mesh.Made)
	// SyncFailed tells it a fetch failed: it picks donors again.
	SyncFailed()
	// SetStragglerTicks sets how long a ring waits for a late member.
	SetStragglerTicks(ticks int)
	// CaughtUp reports whether every other member of the last ring is seen
	// at this node's step or beyond, or gone (false when ctx ends first).
	CaughtUp(ctx context.Context) bool
	// Events delivers decided rings and fetch requests; one goroutine reads it.
	Events() <-chan meshEvent
}

// meshEvent is something the mesh asks of the outer loop.
type meshEvent struct {
	ring  *mesh.Ring
	fetch *mesh.Fetch
	adopt bool // fetch is an adoption of a larger side's model
}

// cmdKind names a command to the mesh goroutine.
type cmdKind uint8

const (
	cmdReady cmdKind = iota
	cmdCompleted
	cmdFailed
	cmdSynced
	cmdSyncFailed
	cmdStragglerTicks
	cmdCaughtUp
	cmdLeave
)

// meshCmd is one command to the mesh goroutine. done, if not nil, is closed
// once the Ready the command caused has been carried out; reply receives
// the answer of cmdCaughtUp.
type meshCmd struct {
	kind  cmdKind
	step  uint64
	n     int // inner steps (cmdReady) or ticks (cmdStragglerTicks)
	hash  string
	peer  mesh.PeerID
	hist  []mesh.Made // cmdSynced
	reply chan bool
	done  chan struct{}
}

// apply carries out c on the mesh state machine (mesh goroutine only).
func (c meshCmd) apply(m *mesh.Mesh) {
	switch c.kind {
	case cmdReady:
		m.SetReady(c.step, c.n)
	case cmdCompleted:
		m.Completed(c.step, c.hash)
	case cmdFailed:
		m.ReportFailure(c.step, c.peer)
	case cmdSynced:
		m.Synced(c.step, c.hash, c.hist)
	case cmdSyncFailed:
		m.SyncFailed()
	case cmdStragglerTicks:
		m.SetStragglerTicks(c.n)
	case cmdCaughtUp:
		c.reply <- ringCaughtUp(m.Status())
	case cmdLeave:
		m.Leave()
	}
}

// ringCaughtUp reports whether every other member of the last decided ring
// is known to be at st.Step or beyond, or gone, and no other live peer is
// still fetching a model or behind (this node may be its only donor: a
// member behind a symmetric NAT, left out of the rings, syncs every step
// from the public one and would otherwise end a step short).
func ringCaughtUp(st mesh.Status) bool {
	for _, p := range st.Peers {
		if !p.Dead && p.State != mesh.StateLeft && p.ID != st.ID && (p.State == mesh.StateSyncing || p.Step < st.Step) {
			return false
		}
	}
	if st.Ring == nil {
		return true
	}
	for _, id := range st.Ring.Members {
		if id == st.ID {
			continue
		}
		i := slices.IndexFunc(st.Peers, func(p mesh.PeerStatus) bool { return p.ID == id })
		if i < 0 {
			continue // forgotten: long gone
		}
		if p := st.Peers[i]; !p.Dead && p.State != mesh.StateLeft && p.Step < st.Step {
			return false
		}
	}
	return true
}

// nodePort is the meshPort of a running node: commands go to the mesh
// goroutine over n.meshCmds, events come from n.events.
type nodePort struct{ n *Node }

func (p nodePort) send(c meshCmd) { p.n.meshCmds <- c }
func (p nodePort) Ready(step uint64, inner int) {
	p.send(meshCmd{kind: cmdReady, step: step, n: inner})
}
func (p nodePort) Completed(step uint64, hash string) {
	p.send(meshCmd{kind: cmdCompleted, step: step, hash: hash})
}
func (p nodePort) Failed(step uint64, bad mesh.PeerID) {
	p.send(meshCmd{kind: cmdFailed, step: step, peer: bad})
}
func (p nodePort) Synced(step uint64, hash string, history []mesh.Made) {
	p.send(meshCmd{kind: cmdSynced, step: step, hash: hash, hist: history})
}
func (p nodePort) SyncFailed()                 { p.send(meshCmd{kind: cmdSyncFailed}) }
func (p nodePort) SetStragglerTicks(ticks int) { p.send(meshCmd{kind: cmdStragglerTicks, n: ticks}) }
func (p nodePort) Events() <-chan meshEvent    { return p.n.events }

func (p nodePort) CaughtUp(ctx context.Context) bool {
	reply := make(chan bool, 1)
	p.send(meshCmd{kind: cmdCaughtUp, reply: reply})
	select {
	case ok := <-reply:
		return ok
	case <-ctx.Done():
		return false
	}
}
