package ring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/intellect-node/intellect-node/p2p"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

// ProtocolID is the stream protocol of the ring all-reduce. For one
// attempt (ring id), each member opens Shards streams to its right neighbour,
// one per shard, and accepts Shards streams from its left neighbour. Frames
// (p2p.WriteFrame/p2p.ReadFrame):
//
//	dialer → acceptor  arMsgHello  version u8, run [32], step u64, shard u16, shards u16,
//	                               sender rank u16, ring size u16,
//	                               ring id length u8, ring id
//	dialer → acceptor  arMsgChunk  one mesh chunk message (collective.AllReduce)
//	dialer → acceptor  arMsgAbort  ring index u16 of the member at fault
//
// Nothing flows back: an acceptor that refuses a stream resets it with
// arCodeRejected; a member that aborts the attempt resets all its streams
// with arCodeAbort + the ring index of the member at fault, so that both
// neighbours (and, as they abort in turn, everybody) learn whom to blame.
// For shards it had not opened yet it opens a stream carrying a hello and an
// arMsgAbort frame, so a right neighbour waiting for that stream learns too.
const ProtocolID = "/intellect/allreduce/1.0.0"

// Size limits of ProtocolID, checked before allocating.
const (
	// MaxFrame is the largest arMsgChunk payload read.
	MaxFrame = collective.MaxChunkMsgSize
	// MaxIDLen bounds the ring id of a hello.
	MaxIDLen = 64
	// arHelloFixed is the size of a hello without its ring id.
	arHelloFixed = 1 + arRunLen + 8 + 2 + 2 + 2 + 2 + 1
	// arRunLen is the size of the run manifest id in a hello.
	arRunLen = 32
	// arMaxHello is the largest hello frame payload.
	arMaxHello = arHelloFixed + MaxIDLen
	// arMaxMembers bounds a ring (rank and size are u16, and so is the
	// culprit carried by an abort code).
	arMaxMembers = 1 << 15
)

// arVersion is the hello's protocol version. 2 added the run manifest id:
// an acceptor refuses hellos of another run before looking at the ring id.
const arVersion = 2

// Frame types of ProtocolID. Append only, never renumber.
const (
	arMsgHello uint8 = 1
	arMsgChunk uint8 = 2
	arMsgAbort uint8 = 3
)

// Stream reset codes of ProtocolID (network.StreamErrorCode).
const (
	// arCodeRejected: the acceptor refused the stream (bad hello, unknown or
	// mismatched ring, queue full, not claimed in time).
	arCodeRejected network.StreamErrorCode = 0x41520000
	// arCodeAbort + r: the sender aborted the attempt and names ring member
	// r (0 ≤ r < arMaxMembers) as the one at fault.
	arCodeAbort network.StreamErrorCode = 0x41530000
)

// Errors of the all-reduce protocol.
var (
	// ErrProtocol is wrapped for a malformed or unexpected message
	// from a peer.
	ErrProtocol = errors.New("p2p: all-reduce protocol violation")
	// ErrRejected is wrapped when the right neighbour refused our stream.
	ErrRejected = errors.New("p2p: all-reduce stream rejected by the neighbour")
	// ErrOtherRun is wrapped when a hello names another run manifest.
	ErrOtherRun = errors.New("p2p: all-reduce stream of another run")
	// ErrServiceClosed is returned by Open after Close.
	ErrServiceClosed = errors.New("p2p: all-reduce service closed")
)

// arHello opens every all-reduce stream.
type arHello struct {
	run    [arRunLen]byte // the run manifest's id (ServiceConfig.Run)
	step   uint64
	shard  uint16
	shards uint16
	sender uint16 // ring index of the dialer
	size   uint16 // ring size
	ringID string
}

func (h arHello) encode() []byte {
	b := make([]byte, 0, arHelloFixed+len(h.ringID))
	b = append(b, arVersion)
	b = append(b, h.run[:]...)
	b = binary.BigEndian.AppendUint64(b, h.step)
	b = binary.BigEndian.AppendUint16(b, h.shard)
	b = binary.BigEndian.AppendUint16(b, h.shards)
	b = binary.BigEndian.AppendUint16(b, h.sender)
	b = binary.BigEndian.AppendUint16(b, h.size)
	b = append(b, byte(len(h.ringID)))
	return append(b, h.ringID...)
}

// decodeHello parses a hello frame payload from a peer.
func decodeHello(p []byte) (arHello, error) {
	if len(p) < arHelloFixed {
		return arHello{}, fmt.Errorf("%w: hello of %d bytes", ErrProtocol, len(p))
	}
	if p[0] != arVersion {
		return arHello{}, fmt.Errorf("%w: hello version %d, want %d", ErrProtocol, p[0], arVersion)
	}
	q := p[1+arRunLen:]
	h := arHello{
		step:   binary.BigEndian.Uint64(q),
		shard:  binary.BigEndian.Uint16(q[8:]),
		shards: binary.BigEndian.Uint16(q[10:]),
		sender: binary.BigEndian.Uint16(q[12:]),
		size:   binary.BigEndian.Uint16(q[14:]),
	}
	copy(h.run[:], p[1:])
	n := int(q[16])
	switch {
	case n == 0 || n > MaxIDLen || len(p) != arHelloFixed+n:
		return arHello{}, fmt.Errorf("%w: ring id of %d bytes in a hello of %d", ErrProtocol, n, len(p))
	case h.shards == 0 || h.shard >= h.shards || int(h.shards) > collective.MaxShards:
		return arHello{}, fmt.Errorf("%w: shard %d of %d", ErrProtocol, h.shard, h.shards)
	case h.size < 2 || h.sender >= h.size || int(h.size) > arMaxMembers:
		return arHello{}, fmt.Errorf("%w: sender %d of %d members", ErrProtocol, h.sender, h.size)
	}
	h.ringID = string(p[arHelloFixed:])
	return h, nil
}

// ServiceConfig configures NewService.
type ServiceConfig struct {
	// IOTimeout bounds every frame read and write and every stream open.
	// Default 30 s.
	IOTimeout time.Duration
	// HandshakeTimeout bounds reading the hello of an incoming stream.
	// Default 10 s.
	HandshakeTimeout time.Duration
	// PendingTimeout is how long a stream that arrives before its attempt
	// is opened here waits to be claimed before it is reset. Default 30 s.
	PendingTimeout time.Duration
	// MaxPending bounds the streams waiting for their attempt. Default 256.
	MaxPending int
	// Run is the run manifest's id (SHA-256). Hellos carry it, and streams
	// of another run are refused: a node of another manifest is never in
	// this node's ring. Zero in tests.
	Run [32]byte
	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and rejects negative values.
func (c *ServiceConfig) Validate() error {
	if c.IOTimeout < 0 || c.HandshakeTimeout < 0 || c.PendingTimeout < 0 || c.MaxPending < 0 {
		return fmt.Errorf("p2p: negative all-reduce service setting: %+v", *c)
	}
	c.IOTimeout = arOr(c.IOTimeout, 30*time.Second)
	c.HandshakeTimeout = arOr(c.HandshakeTimeout, 10*time.Second)
	c.PendingTimeout = arOr(c.PendingTimeout, 30*time.Second)
	c.MaxPending = arOr(c.MaxPending, 256)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("system", "allreduce")
	return nil
}

// Service answers ProtocolID on a host and hands incoming
// streams to the attempt (Transport) they belong to, holding those that
// arrive before this node has opened the attempt. One per host.
//
// It owns the goroutines that outlive an attempt (telling neighbours of an
// abort); Close cancels and joins them.
type Service struct {
	h   host.Host
	cfg ServiceConfig
	log *slog.Logger

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // goroutines of finished attempts

	notifiee network.Notifiee

	mu       sync.Mutex
	closed   bool
	attempts map[string]*Transport   // open attempts by ring id
	pending  map[string][]*arPending // early streams by ring id
	npending int
	done     map[string]network.StreamErrorCode // finished attempts: reset code for late streams (bounded)
	doneFIFO []string

	// pendingHook, if set (tests), is called with the number of waiting
	// streams each time one is queued.
	pendingHook func(n int)
}

// arPending is an accepted stream waiting for its attempt.
type arPending struct {
	s     network.Stream
	hello arHello
	timer *time.Timer
}

// arMaxDone bounds the remembered ids of finished attempts.
const arMaxDone = 64

// NewService registers the ProtocolID handler on h.
func NewService(h host.Host, cfg ServiceConfig) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	svc := &Service{h: h, cfg: cfg, log: cfg.Logger, attempts: make(map[string]*Transport),
		pending: make(map[string][]*arPending), done: make(map[string]network.StreamErrorCode)}
	svc.ctx, svc.cancel = context.WithCancel(context.Background())
	svc.notifiee = &network.NotifyBundle{DisconnectedF: svc.disconnected}
	h.Network().Notify(svc.notifiee)
	h.SetStreamHandler(ProtocolID, svc.handle)
	return svc, nil
}

// disconnected tells the open attempts that a neighbour has no connection
// left, so that a member waiting for its streams fails now, not at the
// I/O timeout.
func (svc *Service) disconnected(n network.Network, c network.Conn) {
	p := c.RemotePeer()
	if n.Connectedness(p) == network.Connected {
		return
	}
	for _, t := range svc.attemptsFromLeft(p) {
		t.leftGone(fmt.Errorf("p2p: all-reduce: left neighbour %s disconnected", p))
	}
}

// attemptsFromLeft returns the running attempts whose left neighbour is p.
func (svc *Service) attemptsFromLeft(p peer.ID) []*Transport {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	var hit []*Transport
	for _, t := range svc.attempts {
		if t.left == p {
			hit = append(hit, t)
		}
	}
	return hit
}

// leftAborted handles a stream from p reset with an abort code before its
// hello could be read: the attempts whose left neighbour is p fail naming
// the member the code names.
func (svc *Service) leftAborted(p peer.ID, code network.StreamErrorCode) {
	for _, t := range svc.attemptsFromLeft(p) {
		if r := int(code - arCodeAbort); r < len(t.spec.Members) {
			t.leftGone(&collective.PeerError{Rank: r, Relayed: true,
				Err: fmt.Errorf("%w: %s aborted, naming %s", collective.ErrAborted, p, t.spec.Members[r])})
		}
	}
}

// Close removes the handler, resets the streams still waiting, cancels the
// abort messages of finished attempts still being sent and waits for them;
// open attempts are left to their owners.
func (svc *Service) Close() error {
	svc.h.RemoveStreamHandler(ProtocolID)
	svc.h.Network().StopNotify(svc.notifiee)
	svc.cancel()
	defer svc.wg.Wait()
	svc.mu.Lock()
	svc.closed = true
	var drop []*arPending
	for id, ps := range svc.pending {
		drop = append(drop, ps...)
		delete(svc.pending, id)
	}
	svc.npending = 0
	svc.mu.Unlock()
	for _, p := range drop {
		p.timer.Stop()
		p.s.ResetWithError(arCodeRejected)
	}
	return nil
}

// goBackground runs f in a goroutine that Close cancels (through ctx) and
// joins; after Close, f runs at once with a cancelled ctx.
func (svc *Service) goBackground(f func(ctx context.Context)) {
	svc.mu.Lock()
	if svc.closed {
		svc.mu.Unlock()
		f(svc.ctx)
		return
	}
	svc.wg.Add(1)
	svc.mu.Unlock()
	go func() {
		defer svc.wg.Done()
		f(svc.ctx)
	}()
}

// handle reads the hello of an incoming stream and routes it.
func (svc *Service) handle(s network.Stream) {
	from := s.Conn().RemotePeer()
	_ = s.SetReadDeadline(time.Now().Add(svc.cfg.HandshakeTimeout))
	typ, p, err := p2p.ReadFrame(s, arMaxHello, nil)
	if err == nil && typ != arMsgHello {
		err = fmt.Errorf("%w: frame type %d before the hello", ErrProtocol, typ)
	}
	var h arHello
	if err == nil {
		h, err = decodeHello(p)
	}
	if err != nil {
		var se *network.StreamError
		if errors.As(err, &se) && se.Remote && se.ErrorCode >= arCodeAbort && se.ErrorCode < arCodeAbort+arMaxMembers {
			svc.leftAborted(from, se.ErrorCode)
			return
		}
		svc.reject(s, "bad hello", err)
		return
	}
	if h.run != svc.cfg.Run {
		svc.reject(s, "other run manifest", fmt.Errorf("%w: run %x, ours %x", ErrOtherRun, h.run[:6], svc.cfg.Run[:6]))
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	svc.mu.Lock()
	if t := svc.attempts[h.ringID]; t != nil {
		svc.mu.Unlock()
		t.accept(s, h)
		return
	}
	if code, ok := svc.done[h.ringID]; ok {
		// An aborted attempt passes on whom it blamed.
		svc.mu.Unlock()
		svc.log.Debug("stream for a finished attempt", "peer", from, "ring", h.ringID, "shard", h.shard)
		_ = s.ResetWithError(code)
		return
	}
	var why string
	switch {
	case svc.closed:
		why = "service closed"
	case svc.npending >= svc.cfg.MaxPending:
		why = "too many streams waiting"
	}
	if why != "" {
		svc.mu.Unlock()
		svc.reject(s, why, fmt.Errorf("ring %s step %d shard %d", h.ringID, h.step, h.shard))
		return
	}
	ap := &arPending{s: s, hello: h}
	ap.timer = time.AfterFunc(svc.cfg.PendingTimeout, func() { svc.expire(ap) })
	svc.pending[h.ringID] = append(svc.pending[h.ringID], ap)
	svc.npending++
	n, hook := svc.npending, svc.pendingHook
	svc.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	svc.log.Debug("stream waits for its attempt", "peer", from, "ring", h.ringID, "shard", h.shard)
}

// expire resets a stream nobody claimed in time.
func (svc *Service) expire(ap *arPending) {
	svc.mu.Lock()
	ps := svc.pending[ap.hello.ringID]
	i := indexOf(ps, ap)
	if i >= 0 {
		svc.pending[ap.hello.ringID] = append(ps[:i:i], ps[i+1:]...)
		if len(svc.pending[ap.hello.ringID]) == 0 {
			delete(svc.pending, ap.hello.ringID)
		}
		svc.npending--
	}
	svc.mu.Unlock()
	if i >= 0 {
		svc.reject(ap.s, "not claimed in time", fmt.Errorf("ring %s shard %d", ap.hello.ringID, ap.hello.shard))
	}
}

func indexOf(ps []*arPending, ap *arPending) int {
	for i, p := range ps {
		if p == ap {
			return i
		}
	}
	return -1
}

// reject resets s and logs why, with the peer.
func (svc *Service) reject(s network.Stream, why string, err error) {
	svc.log.Warn("all-reduce stream rejected", "peer", s.Conn().RemotePeer(), "why", why, "err", err)
	_ = s.ResetWithError(arCodeRejected)
}

// register makes t the attempt of its ring id and returns the streams that
// arrived for it early.
func (svc *Service) register(t *Transport) ([]*arPending, error) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	switch {
	case svc.closed:
		return nil, ErrServiceClosed
	case svc.attempts[t.spec.ID] != nil:
		return nil, fmt.Errorf("p2p: all-reduce attempt %s already opened", t.spec.ID)
	}
	if _, ok := svc.done[t.spec.ID]; ok {
		return nil, fmt.Errorf("p2p: all-reduce attempt %s already ran", t.spec.ID)
	}
	svc.attempts[t.spec.ID] = t
	early := svc.pending[t.spec.ID]
	delete(svc.pending, t.spec.ID)
	svc.npending -= len(early)
	for _, ap := range early {
		ap.timer.Stop()
	}
	return early, nil
}

// unregister forgets t; streams for its ring id are reset with code from
// now on.
func (svc *Service) unregister(t *Transport, code network.StreamErrorCode) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if svc.attempts[t.spec.ID] != t {
		return
	}
	delete(svc.attempts, t.spec.ID)
	svc.done[t.spec.ID] = code
	svc.doneFIFO = append(svc.doneFIFO, t.spec.ID)
	if len(svc.doneFIFO) > arMaxDone {
		delete(svc.done, svc.doneFIFO[0])
		svc.doneFIFO = svc.doneFIFO[1:]
	}
}

// peerOf names a peer for logs and errors.
func peerOf(s network.Stream) peer.ID { return s.Conn().RemotePeer() }

// arOr returns v, or def when v is the zero value.
func arOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
