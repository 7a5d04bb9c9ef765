package ring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/intellect-node/intellect-node/p2p"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

// Spec describes one all-reduce attempt as the mesh decided it; every
// member must open it with the same values (Self apart).
type Spec struct {
	// ID is the attempt's ring id (mesh.Ring.ID), 1..MaxRingIDLen bytes.
	ID string
	// Step is the outer step being reduced.
	Step uint64
	// Members are the peers in ring order; member i sends to member i+1.
	Members []peer.ID
	// Self is this host's index in Members.
	Self int
	// Shards is the number of streams per neighbour, the
	// collective.AllReduceConfig.Shards of the attempt (after Validate).
	Shards int
	// SendRate, if not nil, caps this member's sends: each Send first waits
	// for the message's bytes (frame headers and hellos are not counted).
	// It is local, not part of what members must agree on, and may be
	// shared by successive attempts. Nil: unlimited.
	SendRate *p2p.Limiter
}

func (sp Spec) validate(self peer.ID) error {
	k := len(sp.Members)
	switch {
	case sp.ID == "" || len(sp.ID) > MaxIDLen:
		return fmt.Errorf("p2p: ring id of %d bytes", len(sp.ID))
	case k == 0 || k > arMaxMembers:
		return fmt.Errorf("p2p: ring of %d members", k)
	case sp.Self < 0 || sp.Self >= k || sp.Members[sp.Self] != self:
		return fmt.Errorf("p2p: this host is not member %d of the ring", sp.Self)
	case sp.Shards < 1 || sp.Shards > collective.MaxShards:
		return fmt.Errorf("p2p: %d shards", sp.Shards)
	}
	seen := make(map[peer.ID]bool, k)
	for _, m := range sp.Members {
		if seen[m] {
			return fmt.Errorf("p2p: %s twice in the ring", m)
		}
		seen[m] = true
	}
	return nil
}

// Stats counts the bytes of one attempt's streams, frame headers and
// hellos included.
type Stats struct {
	BytesSent, BytesRecv int64
}

// Transport is this host's side of one all-reduce attempt: a
// collective.Transport (and collective.Aborter) over Shards streams to the right
// neighbour, opened on first use, and Shards streams accepted from the left
// neighbour, whenever they arrive. While it is open its neighbours'
// connections are protected from trimming. Close it when the attempt ends:
// Close joins the goroutine it may have started (reachLeft); what an Abort
// still sends afterwards belongs to the Service.
type Transport struct {
	svc         *Service
	spec        Spec
	left, right peer.ID
	leftRank    int
	out         []network.Stream // per shard; only the shard's sender touches it
	outDirty    []bool           // per shard: a frame write did not complete
	outHello    []bool           // per shard: the hello was written whole
	in          []*arIn

	gone     chan struct{} // closed when the left neighbour is known gone or aborted
	goneOnce sync.Once
	goneErr  error // why, set before gone is closed

	ctx    context.Context // cancelled when the attempt ends
	cancel context.CancelFunc
	wg     sync.WaitGroup // reachLeft

	mu       sync.Mutex
	streams  []network.Stream // every stream of the attempt
	finished bool

	sent, recvd atomic.Int64
}

// arIn is one incoming shard: accept delivers the stream on ch; the shard's
// receiver takes it and then owns s and buf.
type arIn struct {
	ch    chan network.Stream
	taken atomic.Bool
	s     network.Stream
	buf   []byte
}

var (
	_ collective.Transport = (*Transport)(nil)
	_ collective.Aborter   = (*Transport)(nil)
)

// Open starts this host's side of an attempt: streams of spec.ID that
// arrived early are claimed now, later ones as they come.
func (svc *Service) Open(spec Spec) (*Transport, error) {
	if err := spec.validate(svc.h.ID()); err != nil {
		return nil, err
	}
	k := len(spec.Members)
	t := &Transport{svc: svc, spec: spec, out: make([]network.Stream, spec.Shards), in: make([]*arIn, spec.Shards),
		outDirty: make([]bool, spec.Shards), outHello: make([]bool, spec.Shards), gone: make(chan struct{})}
	t.ctx, t.cancel = context.WithCancel(svc.ctx)
	for s := range t.in {
		t.in[s] = &arIn{ch: make(chan network.Stream, 1)}
	}
	if k > 1 {
		t.leftRank = (spec.Self + k - 1) % k
		t.left, t.right = spec.Members[t.leftRank], spec.Members[(spec.Self+1)%k]
		cm := svc.h.ConnManager()
		cm.Protect(t.left, t.tag())
		cm.Protect(t.right, t.tag())
	}
	early, err := svc.register(t)
	if err != nil {
		t.cancel()
		t.unprotect()
		return nil, err
	}
	for _, ap := range early {
		t.accept(ap.s, ap.hello)
	}
	if k > 1 && svc.h.Network().Connectedness(t.left) != network.Connected {
		// The left neighbour may have gone before this attempt could hear
		// of its disconnection; find out now rather than at the I/O timeout.
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.reachLeft()
		}()
	}
	return t, nil
}

// reachLeft connects to the left neighbour and reports it gone if that
// fails. It gives up when the attempt ends.
func (t *Transport) reachLeft() {
	ctx, cancel := context.WithTimeout(t.ctx, t.svc.cfg.IOTimeout)
	defer cancel()
	// The left neighbour dials us to send its first chunk. Dialing it at the
	// same moment, both hosts from their reused listen ports, makes a TCP
	// simultaneous open: one connection that both sides think they opened,
	// whose TLS handshake fails on both. So give it a moment to arrive first,
	// and retry a failed dial after a random pause.
	for try := 0; ; try++ {
		pause := leftGrace
		if try > 0 {
			pause = leftRetryPause + time.Duration(rand.Int64N(int64(leftRetryPause)))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		if t.svc.h.Network().Connectedness(t.left) == network.Connected {
			return
		}
		err := t.svc.h.Connect(ctx, peer.AddrInfo{ID: t.left})
		if err == nil || ctx.Err() != nil {
			return
		}
		if try+1 < leftDialTries {
			t.svc.log.Debug("left neighbour dial failed, retrying", "peer", t.left, "ring", t.spec.ID, "err", err)
			continue
		}
		t.svc.log.Debug("left neighbour unreachable", "peer", t.left, "ring", t.spec.ID, "err", err)
		t.leftGone(fmt.Errorf("p2p: all-reduce: left neighbour %s unreachable: %w", t.left, err))
		return
	}
}

// leftGone makes a Recv waiting for a stream from the left neighbour fail
// with err.
func (t *Transport) leftGone(err error) {
	t.goneOnce.Do(func() {
		t.goneErr = err
		close(t.gone)
	})
}

func (t *Transport) tag() string { return "allreduce/" + t.spec.ID }

func (t *Transport) unprotect() {
	if t.left != "" {
		cm := t.svc.h.ConnManager()
		cm.Unprotect(t.left, t.tag())
		cm.Unprotect(t.right, t.tag())
	}
}

// Stats returns the bytes moved so far.
func (t *Transport) Stats() Stats {
	return Stats{BytesSent: t.sent.Load(), BytesRecv: t.recvd.Load()}
}

// accept takes an incoming stream of this attempt if it is the one expected.
func (t *Transport) accept(s network.Stream, h arHello) {
	var why string
	switch {
	case len(t.spec.Members) < 2:
		why = "ring of one"
	case h.step != t.spec.Step || int(h.shards) != t.spec.Shards || int(h.size) != len(t.spec.Members):
		why = "attempt mismatch"
	case int(h.sender) != t.leftRank || peerOf(s) != t.left:
		why = "not the left neighbour"
	case !t.in[h.shard].taken.CompareAndSwap(false, true):
		why = "shard already open"
	case !t.track(s):
		why = "attempt finished"
	}
	if why != "" {
		t.svc.reject(s, why, fmt.Errorf("ring %s: hello %+v", t.spec.ID, h))
		return
	}
	t.recvd.Add(int64(p2p.FrameHeaderSize + arHelloFixed + len(h.ringID)))
	t.in[h.shard].ch <- s
}

// track adds s to the attempt's streams unless the attempt is over.
func (t *Transport) track(s network.Stream) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return false
	}
	t.streams = append(t.streams, s)
	return true
}

// Send implements collective.Transport: one frame on shard's stream to the right
// neighbour, opening the stream (with its hello) on first use.
func (t *Transport) Send(ctx context.Context, shard int, msg []byte) error {
	if t.spec.SendRate != nil {
		if err := t.spec.SendRate.Wait(ctx, len(msg)); err != nil {
			return err
		}
	}
	if t.out[shard] == nil {
		if err := t.dial(ctx, shard); err != nil {
			return err
		}
	}
	s := t.out[shard]
	defer t.watch(ctx, s)()
	_ = s.SetWriteDeadline(time.Now().Add(t.svc.cfg.IOTimeout))
	t.outDirty[shard] = true
	if err := p2p.WriteFrame(s, arMsgChunk, msg); err != nil {
		return t.streamErr(ctx, err, "send to", t.right, shard)
	}
	t.outDirty[shard] = false
	t.sent.Add(int64(p2p.FrameHeaderSize + len(msg)))
	return nil
}

func (t *Transport) dial(ctx context.Context, shard int) error {
	dctx, cancel := context.WithTimeout(ctx, t.svc.cfg.IOTimeout)
	defer cancel()
	s, err := t.newStream(dctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("p2p: all-reduce open stream to %s: %w", t.right, err)
	}
	if !t.track(s) {
		_ = s.Reset()
		return fmt.Errorf("p2p: all-reduce attempt %s is over", t.spec.ID)
	}
	t.out[shard] = s
	hello := t.hello(shard)
	defer t.watch(ctx, s)()
	_ = s.SetWriteDeadline(time.Now().Add(t.svc.cfg.IOTimeout))
	if err := p2p.WriteFrame(s, arMsgHello, hello); err != nil {
		return t.streamErr(ctx, err, "hello to", t.right, shard)
	}
	t.outHello[shard] = true
	t.sent.Add(int64(p2p.FrameHeaderSize + len(hello)))
	return nil
}

// Recv implements collective.Transport: the next frame on shard's stream from the
// left neighbour, waiting (IOTimeout at most) for that stream to arrive.
func (t *Transport) Recv(ctx context.Context, shard int) ([]byte, error) {
	in := t.in[shard]
	if in.s == nil {
		wait := time.NewTimer(t.svc.cfg.IOTimeout)
		defer wait.Stop()
		select {
		case in.s = <-in.ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait.C:
			return nil, fmt.Errorf("p2p: all-reduce: no stream from %s for shard %d within %v", t.left, shard, t.svc.cfg.IOTimeout)
		case <-t.gone:
			return nil, t.goneErr
		}
	}
	defer t.watch(ctx, in.s)()
	_ = in.s.SetReadDeadline(time.Now().Add(t.svc.cfg.IOTimeout))
	typ, p, err := p2p.ReadFrame(in.s, MaxFrame, in.buf)
	if err != nil {
		if errors.Is(err, p2p.ErrFrameTooLarge) {
			t.svc.log.Warn("all-reduce frame too large", "peer", t.left, "ring", t.spec.ID, "shard", shard, "err", err)
			return nil, fmt.Errorf("%w from %s: %w", ErrProtocol, t.left, err)
		}
		return nil, t.streamErr(ctx, err, "receive from", t.left, shard)
	}
	if typ == arMsgAbort && len(p) == 2 && int(binary.BigEndian.Uint16(p)) < len(t.spec.Members) {
		r := int(binary.BigEndian.Uint16(p))
		return nil, &collective.PeerError{Rank: r, Relayed: true,
			Err: fmt.Errorf("%w: %s aborted, naming %s", collective.ErrAborted, t.left, t.spec.Members[r])}
	}
	if typ != arMsgChunk {
		t.svc.log.Warn("all-reduce frame of unexpected type", "peer", t.left, "ring", t.spec.ID, "shard", shard, "type", typ)
		return nil, fmt.Errorf("%w: frame type %d from %s", ErrProtocol, typ, t.left)
	}
	if cap(p) > cap(in.buf) {
		in.buf = p
	}
	t.recvd.Add(int64(p2p.FrameHeaderSize + len(p)))
	return p, nil
}

// watch makes s's pending reads and writes fail as soon as ctx is done; the
// returned func stops watching.
func (t *Transport) watch(ctx context.Context, s network.Stream) func() bool {
	return context.AfterFunc(ctx, func() { _ = s.SetDeadline(time.Unix(1, 0)) })
}

// streamErr turns a stream error into what collective.AllReduce should see: the
// context's error if it is done, a relayed *collective.PeerError if the
// neighbour aborted naming a member, else the error with the peer named.
func (t *Transport) streamErr(ctx context.Context, err error, dir string, p peer.ID, shard int) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var se *network.StreamError
	if errors.As(err, &se) && se.Remote {
		code := se.ErrorCode
		if code >= arCodeAbort && code < arCodeAbort+arMaxMembers && int(code-arCodeAbort) < len(t.spec.Members) {
			r := int(code - arCodeAbort)
			return &collective.PeerError{Rank: r, Relayed: true,
				Err: fmt.Errorf("%w: %s aborted, naming %s", collective.ErrAborted, p, t.spec.Members[r])}
		}
		if code == arCodeRejected {
			return fmt.Errorf("%w: %s, shard %d of ring %s", ErrRejected, p, shard, t.spec.ID)
		}
	}
	return fmt.Errorf("p2p: all-reduce %s %s, shard %d: %w", dir, p, shard, err)
}

// Abort implements collective.Aborter: it ends the attempt telling both
// neighbours which member cause blames (this member when it names none):
// streams from the left are reset with a code naming it; streams to the
// right get an abort frame after the data already sent (a reset could
// discard a hello the neighbour has not read yet) unless a write was cut
// short, then they are reset too; shards never opened, or reset, get a new
// stream that carries the abort frame. collective.AllReduce calls it after its Send and Recv calls
// returned.
func (t *Transport) Abort(cause error) {
	culprit := t.spec.Self
	var pe *collective.PeerError
	if errors.As(cause, &pe) && pe.Rank >= 0 && pe.Rank < len(t.spec.Members) {
		culprit = pe.Rank
	}
	var unopened []int
	graceful := make(map[network.Stream]bool)
	for s, st := range t.out {
		switch {
		case st == nil:
			unopened = append(unopened, s)
		case !t.outHello[s] || t.outDirty[s]:
			// A write was cut short (its hello, or a frame): the stream
			// is reset, and a reset of a stream whose first bytes were
			// still queued never reaches the neighbour (yamux drops the
			// queued open with them; TestRingMemberDies waited 20 s for
			// it about once in 200 runs under load). A new stream
			// carries the abort too; if the neighbour did see the first,
			// it refuses the second as a duplicate.
			unopened = append(unopened, s)
		default:
			graceful[st] = true
		}
	}
	code := arCodeAbort + network.StreamErrorCode(culprit)
	frame := abortFrame(culprit)
	ended := t.finish(code, func(s network.Stream) {
		if graceful[s] {
			t.svc.goBackground(func(ctx context.Context) { t.closeWithAbort(ctx, s, frame, code) })
			return
		}
		_ = s.ResetWithError(code)
	})
	if !ended {
		return
	}
	t.svc.log.Warn("all-reduce aborted", "ring", t.spec.ID, "step", t.spec.Step,
		"blamed", t.spec.Members[culprit], "err", cause)
	if len(t.spec.Members) > 1 && len(unopened) > 0 {
		t.svc.goBackground(func(ctx context.Context) { t.tellRight(ctx, unopened, frame) })
	}
}

func abortFrame(culprit int) []byte {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], uint16(culprit))
	return b[:]
}

// closeWithAbort appends the abort frame to an outgoing stream and closes
// it, or resets it with code if that cannot be done in time or ctx ends.
func (t *Transport) closeWithAbort(ctx context.Context, s network.Stream, frame []byte, code network.StreamErrorCode) {
	defer context.AfterFunc(ctx, func() { _ = s.ResetWithError(code) })()
	_ = s.SetWriteDeadline(time.Now().Add(min(t.svc.cfg.IOTimeout, 5*time.Second)))
	if err := p2p.WriteFrame(s, arMsgAbort, frame); err != nil {
		_ = s.ResetWithError(code)
		return
	}
	_ = s.Close()
}

// How reachLeft probes the left neighbour: after leftGrace (its own dial
// usually arrives first), then up to leftDialTries dials, leftRetryPause to
// twice that apart.
const (
	leftGrace      = 200 * time.Millisecond
	leftRetryPause = 100 * time.Millisecond
	leftDialTries  = 3
)

// tellRight opens the shards this member never opened, each with a hello
// and an abort frame naming culprit, so that a right neighbour waiting for
// them fails now and blames the same member. Best effort, bounded by
// IOTimeout and ctx.
func (t *Transport) tellRight(ctx context.Context, shards []int, abort []byte) {
	ctx, cancel := context.WithTimeout(ctx, t.svc.cfg.IOTimeout)
	defer cancel()
	for _, shard := range shards {
		s, err := t.newStream(ctx)
		if err != nil {
			return
		}
		_ = s.SetWriteDeadline(time.Now().Add(t.svc.cfg.IOTimeout))
		if p2p.WriteFrame(s, arMsgHello, t.hello(shard)) == nil && p2p.WriteFrame(s, arMsgAbort, abort) == nil {
			_ = s.CloseWrite()
			continue
		}
		_ = s.Reset()
	}
}

// newStream opens a stream to the right neighbour, trying again after a
// random pause when the dial fails (a simultaneous open with the
// neighbour's own dial fails once, see reachLeft), leftDialTries times at
// most.
func (t *Transport) newStream(ctx context.Context) (network.Stream, error) {
	for try := 1; ; try++ {
		s, err := t.svc.h.NewStream(ctx, t.right, ProtocolID)
		if err == nil || try == leftDialTries || ctx.Err() != nil {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(leftRetryPause + time.Duration(rand.Int64N(int64(leftRetryPause)))):
		}
	}
}

func (t *Transport) hello(shard int) []byte {
	return arHello{run: t.svc.cfg.Run, step: t.spec.Step, shard: uint16(shard), shards: uint16(t.spec.Shards),
		sender: uint16(t.spec.Self), size: uint16(len(t.spec.Members)), ringID: t.spec.ID}.encode()
}

// Close ends the attempt: streams are closed (after an Abort, already reset),
// the attempt's ring id is refused from then on, the neighbours are no longer
// protected, and the attempt's own goroutine is joined. The libp2p
// connections stay open for the next attempt.
func (t *Transport) Close() error {
	t.finish(arCodeRejected, func(s network.Stream) { _ = s.Close() })
	t.wg.Wait()
	return nil
}

// finish ends the attempt once, applying end to every stream; it reports
// whether this call ended it.
func (t *Transport) finish(code network.StreamErrorCode, end func(network.Stream)) bool {
	t.mu.Lock()
	if t.finished {
		t.mu.Unlock()
		return false
	}
	t.finished = true
	streams := t.streams
	t.streams = nil
	t.cancel()
	t.mu.Unlock()
	for _, s := range streams {
		end(s)
	}
	t.svc.unregister(t, code)
	t.unprotect()
	return true
}

// PeerError is the *collective.PeerError of a failed AllReduce with the peer
// it names.
type PeerError struct {
	Peer    peer.ID
	Rank    int
	Relayed bool
	Err     error // the *collective.PeerError
}

// Error names the peer and the mesh error.
func (e *PeerError) Error() string {
	return fmt.Sprintf("p2p: all-reduce failed at %s: %v", e.Peer, e.Err)
}

// Unwrap returns the *collective.PeerError.
func (e *PeerError) Unwrap() error { return e.Err }

// AllReduce runs one attempt of collective.AllReduceInto over libp2p: it opens
// the attempt spec (spec.Shards is taken from cfg), reduces b (b.Dst ← the
// weighted mean; b.Src and b.ResIn left as they were on failure when they
// are separate buffers) and closes the attempt, which ends the protection of
// its connections. A failure blamed on a member is a *PeerError naming
// its peer (errors.As also finds the *collective.PeerError).
func AllReduce(ctx context.Context, svc *Service, spec Spec, weights []float32, b collective.Buffers,
	cfg collective.AllReduceConfig) (collective.Stats, Stats, error) {
	if err := cfg.Validate(); err != nil {
		return collective.Stats{}, Stats{}, err
	}
	spec.Shards = cfg.Shards
	if len(weights) != len(spec.Members) {
		return collective.Stats{}, Stats{}, fmt.Errorf("%w: %d weights for %d members", collective.ErrInvalidArgument, len(weights), len(spec.Members))
	}
	t, err := svc.Open(spec)
	if err != nil {
		return collective.Stats{}, Stats{}, err
	}
	defer t.Close()
	st, err := collective.AllReduceInto(ctx, t, spec.Self, weights, b, cfg)
	var pe *collective.PeerError
	if errors.As(err, &pe) && pe.Rank >= 0 && pe.Rank < len(spec.Members) {
		err = &PeerError{Peer: spec.Members[pe.Rank], Rank: pe.Rank, Relayed: pe.Relayed, Err: err}
	}
	return st, t.Stats(), err
}
