package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// MemMesh is one member's end of an in-memory full mesh built by
// NewMemMesh: a MeshTransport (and Aborter) for tests and simulations, with
// the links of memLink (memLinkDepth messages of buffer each). It is safe
// for the concurrent use ScatterAllReduce makes of it.
type MemMesh struct {
	rank    int
	in, out [][]*memLink // [peer][lane]: from peer, to peer
}

// NewMemMesh returns the transports of k members, every pair connected by
// one ordered link per direction and lane. A mesh is good for one attempt.
func NewMemMesh(k, lanes int) []*MemMesh {
	links := make([][][]*memLink, k) // links[from][to][lane]
	for i := range links {
		links[i] = make([][]*memLink, k)
		for j := range links[i] {
			links[i][j] = make([]*memLink, lanes)
			for l := range lanes {
				links[i][j][l] = newMemLink()
			}
		}
	}
	ms := make([]*MemMesh, k)
	for i := range ms {
		ms[i] = &MemMesh{rank: i, out: links[i], in: make([][]*memLink, k)}
		for j := range k {
			ms[i].in[j] = links[j][i]
		}
	}
	return ms
}

// Send implements MeshTransport; it copies msg.
func (t *MemMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	l, err := t.link(t.out, to, lane)
	if err != nil {
		return err
	}
	select {
	case <-l.done:
		return l.err
	default:
	}
	select {
	case l.ch <- append([]byte(nil), msg...):
		return nil
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Recv implements MeshTransport.
func (t *MemMesh) Recv(ctx context.Context, from, lane int) ([]byte, error) {
	l, err := t.link(t.in, from, lane)
	if err != nil {
		return nil, err
	}
	select {
	case <-l.done:
		return nil, l.err
	default:
	}
	select {
	case m := <-l.ch:
		return m, nil
	case <-l.done:
		return nil, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// errMemNoLink reports a peer or lane out of range.
var errMemNoLink = errors.New("mesh: no such in-memory link")

func (t *MemMesh) link(ls [][]*memLink, peer, lane int) (*memLink, error) {
	if peer < 0 || peer >= len(ls) || peer == t.rank || lane < 0 || lane >= len(ls[peer]) {
		return nil, fmt.Errorf("%w: member %d lane %d", errMemNoLink, peer, lane)
	}
	return ls[peer][lane], nil
}

// Abort implements Aborter: every link of this member fails, for the
// others, with a relayed *PeerError naming the member cause names (this
// member when cause names none).
func (t *MemMesh) Abort(cause error) {
	culprit := t.rank
	var pe *PeerError
	if errors.As(cause, &pe) {
		culprit = pe.Rank
	}
	t.breakAll(&PeerError{Rank: culprit, Relayed: true, Err: fmt.Errorf("%w (member %d)", ErrAborted, t.rank)})
}

// Kill simulates this member dying: its links fail with an error that
// names nobody, so the others must name this member themselves.
func (t *MemMesh) Kill() { t.breakAll(errMemLinkDown) }

func (t *MemMesh) breakAll(err error) {
	for p := range t.out {
		for l := range t.out[p] {
			t.out[p][l].breakWith(err)
			t.in[p][l].breakWith(err)
		}
	}
}

// MeshDieAfter wraps a member's mesh transport so that the member dies
// (Kill) at its sends+1-th Send and, dead, tells nobody why (Abort does
// nothing): a crash in the middle of a scatter all-reduce, for tests.
func MeshDieAfter(t *MemMesh, sends int) MeshTransport {
	return &dyingMesh{MemMesh: t, sendsLeft: sends}
}

type dyingMesh struct {
	*MemMesh
	mu        sync.Mutex
	sendsLeft int
}

func (d *dyingMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	d.mu.Lock()
	d.sendsLeft--
	die := d.sendsLeft < 0
	d.mu.Unlock()
	if die {
		d.Kill()
		return errMemLinkDown
	}
	return d.MemMesh.Send(ctx, to, lane, msg)
}

func (d *dyingMesh) Abort(error) {}
