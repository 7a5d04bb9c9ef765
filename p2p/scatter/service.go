package scatter

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/intellect-node/intellect-node/p2p"
)

// Config configures NewService.
type Config struct {
	// IOTimeout bounds every frame write and every stream open. Default 30 s.
	IOTimeout time.Duration
	// HandshakeTimeout bounds reading the hello of an incoming stream.
	// Default 10 s.
	HandshakeTimeout time.Duration
	// PendingTimeout is how long a stream that arrives before its attempt
	// is opened here waits to be claimed. Default 30 s.
	PendingTimeout time.Duration
	// MaxPending bounds the streams waiting for their attempt. Default
	// 1024 (up to maxStreams from each member).
	MaxPending int
	// MaxBuffered bounds the bytes received from one member in one attempt
	// and not yet taken by the collective (a member that sends more than
	// its share is at fault). Default 1 GiB.
	MaxBuffered int64
	// Run is the run manifest's id: streams of another run are refused.
	Run [32]byte
	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.IOTimeout < 0 || c.HandshakeTimeout < 0 || c.PendingTimeout < 0 || c.MaxPending < 0 || c.MaxBuffered < 0 {
		return fmt.Errorf("p2p: negative scatter service setting: %+v", *c)
	}
	or := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	or(&c.IOTimeout, 30*time.Second)
	or(&c.HandshakeTimeout, 10*time.Second)
	or(&c.PendingTimeout, 30*time.Second)
	if c.MaxPending == 0 {
		c.MaxPending = 1024
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = 1 << 30
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("system", "scatter")
	return nil
}

// Service answers ProtocolID on a host and hands each incoming stream to
// the attempt (Transport) it belongs to, holding streams that arrive before
// this node opened the attempt. One per host.
type Service struct {
	h   host.Host
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	closed   bool
	attempts map[string]*Transport
	pending  map[string][]*pendingStream
	npending int
	done     map[string]bool // finished attempts, for late streams (bounded)
	doneFIFO []string
	kept     []keptAttempt // owned segments of the last attempts, for audits
	keptWake chan struct{} // closed by Keep, for audits waiting for it

	notifiee network.Notifiee
}

type pendingStream struct {
	s     network.Stream
	h     hello
	timer *time.Timer
}

// maxDone bounds the remembered ids of finished attempts.
const maxDone = 64

// NewService registers the ProtocolID handler on h.
func NewService(h host.Host, cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	svc := &Service{h: h, cfg: cfg, log: cfg.Logger, attempts: make(map[string]*Transport),
		pending: make(map[string][]*pendingStream), done: make(map[string]bool)}
	svc.notifiee = &network.NotifyBundle{DisconnectedF: svc.disconnected}
	h.Network().Notify(svc.notifiee)
	h.SetStreamHandler(ProtocolID, svc.handle)
	h.SetStreamHandler(AuditProtocolID, svc.handleAudit)
	return svc, nil
}

// disconnected fails, in every open attempt, what a member with no
// connection left still owes, so that the others learn now, not at the
// I/O timeout.
func (svc *Service) disconnected(n network.Network, c network.Conn) {
	p := c.RemotePeer()
	if n.Connectedness(p) == network.Connected {
		return
	}
	svc.mu.Lock()
	var ts []*Transport
	for _, t := range svc.attempts {
		ts = append(ts, t)
	}
	svc.mu.Unlock()
	for _, t := range ts {
		t.peerGone(p)
	}
}

// handle reads the hello of an incoming stream and routes it.
func (svc *Service) handle(s network.Stream) {
	_ = s.SetReadDeadline(time.Now().Add(svc.cfg.HandshakeTimeout))
	typ, p, err := p2p.ReadFrame(s, maxHello, nil)
	if err == nil && typ != msgHello {
		err = fmt.Errorf("%w: frame type %d before the hello", ErrProtocol, typ)
	}
	var h hello
	if err == nil {
		h, err = decodeHello(p)
	}
	if err == nil && h.run != svc.cfg.Run {
		err = fmt.Errorf("%w: a stream of another run manifest", ErrProtocol)
	}
	if err != nil {
		svc.log.Debug("scatter stream refused", "from", s.Conn().RemotePeer(), "err", err)
		s.Reset()
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	svc.mu.Lock()
	if t := svc.attempts[h.id]; t != nil {
		svc.mu.Unlock()
		t.attach(s, h)
		return
	}
	if svc.closed || svc.done[h.id] || svc.npending >= svc.cfg.MaxPending {
		svc.mu.Unlock()
		s.Reset()
		return
	}
	ps := &pendingStream{s: s, h: h}
	ps.timer = time.AfterFunc(svc.cfg.PendingTimeout, func() { svc.expire(ps) })
	svc.pending[h.id] = append(svc.pending[h.id], ps)
	svc.npending++
	svc.mu.Unlock()
}

// expire resets a pending stream nobody claimed in time.
func (svc *Service) expire(ps *pendingStream) {
	svc.mu.Lock()
	list := svc.pending[ps.h.id]
	for i, q := range list {
		if q == ps {
			svc.pending[ps.h.id] = append(list[:i:i], list[i+1:]...)
			svc.npending--
			if len(svc.pending[ps.h.id]) == 0 {
				delete(svc.pending, ps.h.id)
			}
			svc.mu.Unlock()
			ps.s.Reset()
			return
		}
	}
	svc.mu.Unlock()
}

// register adds t and returns the streams that were waiting for it.
func (svc *Service) register(t *Transport) ([]*pendingStream, error) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	switch {
	case svc.closed:
		return nil, fmt.Errorf("p2p: scatter service closed")
	case svc.attempts[t.spec.ID] != nil || svc.done[t.spec.ID]:
		return nil, fmt.Errorf("p2p: scatter attempt %s opened twice", t.spec.ID)
	}
	svc.attempts[t.spec.ID] = t
	ps := svc.pending[t.spec.ID]
	delete(svc.pending, t.spec.ID)
	svc.npending -= len(ps)
	return ps, nil
}

// finished forgets t and remembers its id, so that late streams are reset.
func (svc *Service) finished(t *Transport) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	delete(svc.attempts, t.spec.ID)
	svc.done[t.spec.ID] = true
	svc.doneFIFO = append(svc.doneFIFO, t.spec.ID)
	if len(svc.doneFIFO) > maxDone {
		delete(svc.done, svc.doneFIFO[0])
		svc.doneFIFO = svc.doneFIFO[1:]
	}
}

// Close removes the handler and resets the streams still waiting; open
// attempts are left to their owners.
func (svc *Service) Close() error {
	svc.h.RemoveStreamHandler(ProtocolID)
	svc.h.RemoveStreamHandler(AuditProtocolID)
	svc.h.Network().StopNotify(svc.notifiee)
	svc.mu.Lock()
	svc.closed = true
	var drop []*pendingStream
	for id, ps := range svc.pending {
		drop = append(drop, ps...)
		delete(svc.pending, id)
	}
	svc.npending = 0
	if svc.keptWake != nil { // audits waiting for an attempt to be kept
		close(svc.keptWake)
		svc.keptWake = nil
	}
	svc.mu.Unlock()
	for _, ps := range drop {
		ps.timer.Stop()
		ps.s.Reset()
	}
	return nil
}
