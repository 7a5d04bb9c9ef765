package node

import (
	"context"
	"slices"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
)

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
	cmdClosed
	cmdLeave
)

// meshCmd is one command to the mesh goroutine. done, if not nil, is closed
// once the Ready the command caused has been carried out; reply receives
// the answer of cmdCaughtUp and cmdClosed.
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
	case cmdClosed:
		c.reply <- m.Closed(c.step)
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

// nodePort is the diloco.Port of a running node: commands go to the mesh
// goroutine over n.meshCmds, events come from n.events, models from donors
// (fetch.go).
type nodePort struct{ n *Node }

func (p nodePort) send(c meshCmd) { p.n.meshCmds <- c }
func (p nodePort) Ready(step uint64, inner int) {
	p.send(meshCmd{kind: cmdReady, step: step, n: inner})
}
func (p nodePort) Completed(step uint64, hash string) {
	p.send(meshCmd{kind: cmdCompleted, step: step, hash: hash})
}
func (p nodePort) Failed(r *mesh.Ring, bad mesh.PeerID) {
	p.send(meshCmd{kind: cmdFailed, step: r.Step, peer: bad})
}
func (p nodePort) Synced(step uint64, hash string, history []mesh.Made) {
	p.send(meshCmd{kind: cmdSynced, step: step, hash: hash, hist: history})
}

// SyncFailed tells the mesh a fetch failed: it picks donors again.
func (p nodePort) SyncFailed()                 { p.send(meshCmd{kind: cmdSyncFailed}) }
func (p nodePort) SetStragglerTicks(ticks int) { p.send(meshCmd{kind: cmdStragglerTicks, n: ticks}) }
func (p nodePort) Events() <-chan diloco.Event { return p.n.events }

// Closed asks the mesh whether step is closed: a close that came before
// the loop applied the previous average (and so before the mesh moved to
// step) is in no Event.Close yet when the loop reaches its boundary.
func (p nodePort) Closed(step uint64, _ int) bool {
	reply := make(chan bool, 1)
	p.send(meshCmd{kind: cmdClosed, step: step, reply: reply})
	select {
	case ok := <-reply:
		return ok
	case <-p.n.life.Done():
		return false
	}
}

// Fetch downloads the model ev names from its donors (fetch.go), unless
// the mesh no longer asks for it (a request superseded while the loop was
// busy): then it returns nil and tells the mesh nothing.
func (p nodePort) Fetch(ctx context.Context, ev diloco.Event) (*diloco.Fetched, error) {
	if p.n.stale(ev.Fetch) {
		p.n.log.Info("skipping a fetch the mesh no longer asks for", "step", ev.Fetch.Step, "hash", short(ev.Fetch.Hash))
		return nil, nil
	}
	return p.n.fetch(ctx, ev.Fetch, ev.Adopt)
}

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
