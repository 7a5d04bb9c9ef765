package scatter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/ring"
)

// Spec describes one attempt as the mesh decided it; every member opens it
// with the same values (Self apart).
type Spec struct {
	ID      string    // the mesh's ring id, 1..MaxIDLen bytes
	Step    uint64    // the outer step being reduced
	Members []peer.ID // by rank (the collective's Owners say who owns a segment)
	Self    int       // this host's index in Members
	Lanes   int       // 2 × the collective's Shards
	// SendRate, if set, caps this member's sends (local, like the ring's).
	SendRate *p2p.Limiter
	// Wrap, if set, wraps the transport the collective uses: tests play
	// an attacking member with it.
	Wrap func(collective.MeshTransport) collective.MeshTransport
}

func (sp Spec) validate(self peer.ID) error {
	k := len(sp.Members)
	switch {
	case sp.ID == "" || len(sp.ID) > MaxIDLen:
		return fmt.Errorf("p2p: scatter attempt id of %d bytes", len(sp.ID))
	case k == 0 || k > MaxMembers:
		return fmt.Errorf("p2p: scatter attempt of %d members", k)
	case sp.Self < 0 || sp.Self >= k || sp.Members[sp.Self] != self:
		return fmt.Errorf("p2p: this host is not member %d of the attempt", sp.Self)
	case sp.Lanes < 1 || sp.Lanes > maxLanes:
		return fmt.Errorf("p2p: scatter attempt of %d lanes", sp.Lanes)
	}
	seen := make(map[peer.ID]bool, k)
	for _, m := range sp.Members {
		if seen[m] {
			return fmt.Errorf("p2p: %s twice in the attempt", m)
		}
		seen[m] = true
	}
	return nil
}

// Stats counts the bytes of one attempt's streams, frame headers and
// hellos included.
type Stats struct{ Sent, Received int64 }

// Transport is this host's side of one attempt: a collective.MeshTransport
// and collective.Aborter over streamsFor(Lanes) outbound streams to each
// other member (each opened on first use; lane l on stream l mod that
// number) and as many inbound ones from each (each read by one goroutine
// into the member's per-lane queues). Close ends it.
type Transport struct {
	svc  *Service
	spec Spec
	tag  string

	ctx    context.Context // cancelled by Abort and Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the readers

	nstreams int          // streams per member and direction
	out      []*outStream // member to's stream si at to·nstreams + si
	in       []*inbox

	sent, received atomic.Int64
	closeOnce      sync.Once
}

type outStream struct {
	mu  sync.Mutex
	s   network.Stream
	err error
	buf []byte
}

// inbox holds what one member sent, per lane, until Recv takes it.
type inbox struct {
	mu       sync.Mutex
	lanes    [][][]byte
	buffered int64
	err      error            // set once: a stream broke or misbehaved, or the member aborted
	streams  []network.Stream // by stream index, nil until attached
	ended    []error          // by stream index: it ended (EOF), so its lanes get nothing more
	wake     chan struct{}    // closed and replaced on every change
}

// Open starts this host's side of attempt spec and protects its peers'
// connections until Close.
func (svc *Service) Open(spec Spec) (*Transport, error) {
	if err := spec.validate(svc.h.ID()); err != nil {
		return nil, err
	}
	ns := streamsFor(spec.Lanes)
	t := &Transport{svc: svc, spec: spec, tag: "scatter/" + spec.ID, nstreams: ns,
		out: make([]*outStream, len(spec.Members)*ns), in: make([]*inbox, len(spec.Members))}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for i := range t.out {
		t.out[i] = &outStream{}
	}
	for i := range spec.Members {
		t.in[i] = &inbox{lanes: make([][][]byte, spec.Lanes), streams: make([]network.Stream, t.nstreams),
			ended: make([]error, t.nstreams), wake: make(chan struct{})}
	}
	waiting, err := svc.register(t)
	if err != nil {
		t.cancel()
		return nil, err
	}
	for i, m := range spec.Members {
		if i != spec.Self {
			svc.h.ConnManager().Protect(m, t.tag)
		}
	}
	for _, ps := range waiting {
		ps.timer.Stop()
		t.attach(ps.s, ps.h)
	}
	return t, nil
}

// attach takes an inbound stream of this attempt and starts its reader.
func (t *Transport) attach(s network.Stream, h hello) {
	from := int(h.sender)
	ok := h.step == t.spec.Step && int(h.members) == len(t.spec.Members) && int(h.lanes) == t.spec.Lanes &&
		from != t.spec.Self && from < len(t.spec.Members) && t.spec.Members[from] == s.Conn().RemotePeer()
	if !ok {
		t.svc.log.Debug("scatter stream does not match its attempt", "from", s.Conn().RemotePeer(), "attempt", t.spec.ID)
		s.Reset()
		return
	}
	in, si := t.in[from], int(h.stream)
	in.mu.Lock()
	if in.streams[si] != nil || t.ctx.Err() != nil {
		in.mu.Unlock()
		s.Reset()
		return
	}
	in.streams[si] = s
	in.mu.Unlock()
	t.received.Add(int64(p2p.FrameHeaderSize + helloFixed + len(h.id)))
	t.wg.Go(func() { t.read(from, si, s) })
}

// peerGone fails the inbox of member p, if it is one, after its last
// connection closed.
func (t *Transport) peerGone(p peer.ID) {
	for i, m := range t.spec.Members {
		if m == p && i != t.spec.Self {
			t.in[i].fail(&collective.PeerError{Rank: i, Err: fmt.Errorf("p2p: scatter: member %d (%s) disconnected", i, p)})
		}
	}
}

// read moves frames of member from's stream si into its inbox until the
// stream ends, breaks or misbehaves.
func (t *Transport) read(from, si int, s network.Stream) {
	in := t.in[from]
	for {
		typ, p, err := p2p.ReadFrame(s, maxChunk, nil)
		if errors.Is(err, io.EOF) {
			// The member is done with this stream; its other streams
			// may still be delivering.
			in.end(si, &collective.PeerError{Rank: from, Err: fmt.Errorf("p2p: scatter: member %d closed its stream %d", from, si)})
			return
		}
		if err != nil {
			in.fail(&collective.PeerError{Rank: from, Err: err})
			return
		}
		t.received.Add(int64(p2p.FrameHeaderSize + len(p)))
		if err := t.take(in, from, si, typ, p); err != nil {
			in.fail(err)
			s.Reset()
			return
		}
	}
}

// take files one frame of member from's stream si.
func (t *Transport) take(in *inbox, from, si int, typ uint8, p []byte) error {
	switch typ {
	case msgChunk:
		lane, msg, err := decodeChunk(p, t.spec.Lanes)
		if err == nil && lane%t.nstreams != si {
			err = fmt.Errorf("%w: lane %d on stream %d of %d", ErrProtocol, lane, si, t.nstreams)
		}
		if err != nil {
			return &collective.PeerError{Rank: from, Err: err}
		}
		return in.push(lane, msg, t.svc.cfg.MaxBuffered, from)
	case msgAbort:
		r, err := decodeAbort(p, len(t.spec.Members))
		if err != nil {
			return &collective.PeerError{Rank: from, Err: err}
		}
		return &collective.PeerError{Rank: r, Relayed: true,
			Err: fmt.Errorf("%w: member %d aborted, naming member %d", collective.ErrAborted, from, r)}
	}
	return &collective.PeerError{Rank: from, Err: fmt.Errorf("%w: frame type %d", ErrProtocol, typ)}
}

func (in *inbox) push(lane int, msg []byte, limit int64, from int) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.buffered+int64(len(msg)) > limit {
		return &collective.PeerError{Rank: from, Err: fmt.Errorf("%w: more than %d bytes buffered", ErrProtocol, limit)}
	}
	in.buffered += int64(len(msg))
	in.lanes[lane] = append(in.lanes[lane], msg)
	in.wakeUp()
	return nil
}

// wakeUp wakes the Recvs waiting on in (in.mu held).
func (in *inbox) wakeUp() {
	close(in.wake)
	in.wake = make(chan struct{})
}

// end records that stream si ended cleanly.
func (in *inbox) end(si int, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ended[si] == nil {
		in.ended[si] = err
		in.wakeUp()
	}
}

func (in *inbox) fail(err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.err == nil {
		in.err = err
		in.wakeUp()
	}
}

// Recv implements collective.MeshTransport.
func (t *Transport) Recv(ctx context.Context, from, lane int) ([]byte, error) {
	if from < 0 || from >= len(t.in) || from == t.spec.Self || lane < 0 || lane >= t.spec.Lanes {
		return nil, fmt.Errorf("%w: recv from %d lane %d", collective.ErrInvalidArgument, from, lane)
	}
	in := t.in[from]
	for {
		in.mu.Lock()
		if q := in.lanes[lane]; len(q) > 0 {
			msg := q[0]
			in.lanes[lane] = q[1:]
			in.buffered -= int64(len(msg))
			in.mu.Unlock()
			return msg, nil
		}
		err, wake := in.err, in.wake
		if err == nil {
			err = in.ended[lane%t.nstreams]
		}
		in.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.ctx.Done():
			return nil, fmt.Errorf("p2p: scatter attempt %s ended", t.spec.ID)
		}
	}
}

// Send implements collective.MeshTransport: one frame on lane's stream to
// member to, opened (with its hello) on first use.
func (t *Transport) Send(ctx context.Context, to, lane int, msg []byte) error {
	if to < 0 || to >= len(t.spec.Members) || to == t.spec.Self || lane < 0 || lane >= t.spec.Lanes {
		return fmt.Errorf("%w: send to %d lane %d", collective.ErrInvalidArgument, to, lane)
	}
	if t.spec.SendRate != nil {
		if err := t.spec.SendRate.Wait(ctx, len(msg)); err != nil {
			return err
		}
	}
	si := lane % t.nstreams
	o := t.out[to*t.nstreams+si]
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := t.dial(ctx, to, si, o); err != nil {
		return err
	}
	o.buf = binary.BigEndian.AppendUint16(o.buf[:0], uint16(lane))
	o.buf = append(o.buf, msg...)
	_ = o.s.SetWriteDeadline(time.Now().Add(t.svc.cfg.IOTimeout))
	if err := p2p.WriteFrame(o.s, msgChunk, o.buf); err != nil {
		o.err = err
		return err
	}
	t.sent.Add(int64(p2p.FrameHeaderSize + len(o.buf)))
	return nil
}

// dial opens o, stream si to member to, if it is not open yet (o.mu held).
func (t *Transport) dial(ctx context.Context, to, si int, o *outStream) error {
	if o.err != nil || o.s != nil {
		return o.err
	}
	dctx, cancel := context.WithTimeout(ctx, t.svc.cfg.IOTimeout)
	defer cancel()
	s, err := t.svc.h.NewStream(dctx, t.spec.Members[to], ProtocolID)
	if err == nil {
		h := hello{run: t.svc.cfg.Run, step: t.spec.Step, sender: uint16(t.spec.Self), members: uint16(len(t.spec.Members)),
			lanes: uint16(t.spec.Lanes), stream: uint8(si), id: t.spec.ID}.encode()
		_ = s.SetWriteDeadline(time.Now().Add(t.svc.cfg.IOTimeout))
		if err = p2p.WriteFrame(s, msgHello, h); err != nil {
			s.Reset()
		} else {
			t.sent.Add(int64(p2p.FrameHeaderSize + len(h)))
		}
	}
	if err != nil {
		o.err = fmt.Errorf("p2p: scatter: open stream %d to member %d: %w", si, to, err)
		return o.err
	}
	o.s = s
	return nil
}

// Abort implements collective.Aborter: it tells every member it has a
// stream to whom this member blames (the rank of cause, a
// *collective.PeerError, else itself), on every such stream, and ends the
// attempt here.
func (t *Transport) Abort(cause error) {
	culprit := t.spec.Self
	var pe *collective.PeerError
	if errors.As(cause, &pe) && pe.Rank >= 0 && pe.Rank < len(t.spec.Members) {
		culprit = pe.Rank
	}
	frame := binary.BigEndian.AppendUint16(nil, uint16(culprit))
	for _, o := range t.out {
		o.mu.Lock()
		if o.s != nil && o.err == nil {
			_ = o.s.SetWriteDeadline(time.Now().Add(time.Second))
			_ = p2p.WriteFrame(o.s, msgAbort, frame)
			o.err = fmt.Errorf("p2p: scatter attempt aborted: %w", cause)
		}
		o.mu.Unlock()
	}
	t.cancel()
}

// Stats returns the bytes moved so far.
func (t *Transport) Stats() Stats { return Stats{Sent: t.sent.Load(), Received: t.received.Load()} }

// Close ends the attempt: outbound streams are closed (their data still
// arrives), inbound ones reset, the readers joined, and the peers'
// protection dropped.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.cancel()
		for _, o := range t.out {
			o.mu.Lock()
			if o.s != nil {
				o.s.Close()
			}
			o.mu.Unlock()
		}
		for _, in := range t.in {
			in.mu.Lock()
			for _, s := range in.streams {
				if s != nil {
					s.Reset()
				}
			}
			in.mu.Unlock()
		}
		t.wg.Wait()
		for i, m := range t.spec.Members {
			if i != t.spec.Self {
				t.svc.h.ConnManager().Unprotect(m, t.tag)
			}
		}
		t.svc.finished(t)
	})
	return nil
}

// AllReduce runs one attempt of collective.ScatterAllReduce over libp2p:
// it opens spec (Lanes from cfg), reduces b and closes the attempt. A
// failure blamed on a member is a *ring.PeerError naming its peer, as the
// ring's are (errors.As also finds the *collective.PeerError).
func AllReduce(ctx context.Context, svc *Service, spec Spec, weights []float32, b collective.Buffers,
	cfg collective.ScatterConfig) (collective.ScatterResult, Stats, error) {
	if err := cfg.Validate(); err != nil {
		return collective.ScatterResult{}, Stats{}, err
	}
	spec.Lanes = 2 * cfg.Shards
	t, err := svc.Open(spec)
	if err != nil {
		return collective.ScatterResult{}, Stats{}, err
	}
	defer t.Close()
	var tr collective.MeshTransport = t
	if spec.Wrap != nil {
		tr = spec.Wrap(t)
	}
	res, err := collective.ScatterAllReduce(ctx, tr, spec.Self, weights, b, cfg)
	var pe *collective.PeerError
	if errors.As(err, &pe) && pe.Rank >= 0 && pe.Rank < len(spec.Members) {
		err = &ring.PeerError{Peer: spec.Members[pe.Rank], Rank: pe.Rank, Relayed: pe.Relayed, Err: err}
	}
	return res, t.Stats(), err
}
