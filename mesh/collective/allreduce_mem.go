package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrAborted is wrapped by the *PeerError (Relayed) a member gets when a
// neighbour aborted the all-reduce.
var ErrAborted = errors.New("mesh: all-reduce aborted by a ring member")

// errMemLinkDown is what a killed in-memory member's neighbours see.
var errMemLinkDown = errors.New("mesh: in-memory link down")

// memLinkDepth is the number of messages an in-memory link buffers.
const memLinkDepth = 4

// memLink is one direction of one shard between two neighbours.
type memLink struct {
	ch   chan []byte
	once sync.Once
	done chan struct{}
	err  error // set before done is closed
}

func newMemLink() *memLink {
	return &memLink{ch: make(chan []byte, memLinkDepth), done: make(chan struct{})}
}

func (l *memLink) breakWith(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

// MemTransport is one member's end of an in-memory ring built by
// NewMemRing: a Transport (and Aborter) for tests and simulations. It is
// safe for the concurrent use AllReduce makes of it.
type MemTransport struct {
	rank    int
	in, out []*memLink // per shard: from the left, to the right
}

// NewMemRing returns the transports of k members in a ring with the given
// number of shards; member i's Send reaches member i+1 mod k. A ring is good
// for one all-reduce attempt.
func NewMemRing(k, shards int) []*MemTransport {
	links := make([][]*memLink, k) // links[i][s]: from member i to i+1
	for i := range links {
		links[i] = make([]*memLink, shards)
		for s := range shards {
			links[i][s] = newMemLink()
		}
	}
	ts := make([]*MemTransport, k)
	for i := range ts {
		ts[i] = &MemTransport{rank: i, out: links[i], in: links[(i+k-1)%k]}
	}
	return ts
}

// Send implements Transport; it copies msg.
func (t *MemTransport) Send(ctx context.Context, shard int, msg []byte) error {
	l := t.out[shard]
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

// Recv implements Transport.
func (t *MemTransport) Recv(ctx context.Context, shard int) ([]byte, error) {
	l := t.in[shard]
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

// Abort implements Aborter: both neighbours' pending and later calls fail
// with a relayed *PeerError naming the member cause names (this member when
// cause names none).
func (t *MemTransport) Abort(cause error) {
	culprit := t.rank
	var pe *PeerError
	if errors.As(cause, &pe) {
		culprit = pe.Rank
	}
	err := &PeerError{Rank: culprit, Relayed: true, Err: fmt.Errorf("%w (member %d)", ErrAborted, t.rank)}
	t.breakAll(err)
}

// Kill simulates this member dying: its links fail with an error that names
// nobody, so the neighbours must name this member themselves.
func (t *MemTransport) Kill() { t.breakAll(errMemLinkDown) }

func (t *MemTransport) breakAll(err error) {
	for s := range t.out {
		t.out[s].breakWith(err)
		t.in[s].breakWith(err)
	}
}

// DieAfter wraps a member's transport so that the member dies (Kill) at
// its sends+1-th Send and, dead, tells nobody why (Abort does nothing): a
// crash in the middle of an all-reduce, for tests.
func DieAfter(t *MemTransport, sends int) Transport {
	return &dyingTransport{MemTransport: t, sendsLeft: sends}
}

type dyingTransport struct {
	*MemTransport
	mu        sync.Mutex
	sendsLeft int
}

func (d *dyingTransport) Send(ctx context.Context, shard int, msg []byte) error {
	d.mu.Lock()
	d.sendsLeft--
	die := d.sendsLeft < 0
	d.mu.Unlock()
	if die {
		d.Kill()
		return errMemLinkDown
	}
	return d.MemTransport.Send(ctx, shard, msg)
}

func (d *dyingTransport) Abort(error) {}
