package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
)

// AdmitProtocolID is the stream protocol by which the members of a run
// admitted by ticket (Host.SetAdmission) show each other their tickets.
// Either side opens it once connected (through a relay too), and again
// until it gets an answer:
//
//	opener → acceptor  admitHello    the opener's ticket (empty: it is the run's creator)
//	acceptor → opener  admitOK       the acceptor's ticket (empty: the creator)
//	               or  admitRefused  why the opener is refused (text); end
//	opener → acceptor  admitRefused  why the acceptor is refused, if it is; or nothing
//
// Each side checks the ticket it received against the peer's authenticated
// id (Ticket.Verify). The side that refuses sends its reason and waits for
// the other to close the stream before it closes the connection.
const AdmitProtocolID = "/intellect/admit/1.0.0"

// Limits and timing of AdmitProtocolID.
const (
	// admitMaxFrame is the largest frame read: a ticket or a reason.
	admitMaxFrame = MaxTicketSize
	// maxRefusal bounds the reason sent with admitRefused.
	maxRefusal = 256
	// admitTimeout bounds one exchange.
	admitTimeout = 10 * time.Second
	// AdmitGrace is how long, by default, a connected peer may go without
	// presenting a valid ticket before it is refused (Admission.Grace).
	AdmitGrace = 30 * time.Second
	// admitRetry is the pause before an exchange that got no answer (the
	// peer did not speak the protocol yet: a joiner still reading the
	// manifest) is tried again.
	admitRetry = 2 * time.Second
	// admitSweepEvery is how often pending and expiring peers are looked at.
	admitSweepEvery = time.Second
	// AdmitRefuseFor is how long a refused peer's connections are refused
	// by the connection gater; after it, it may try again (with a new
	// ticket, say).
	AdmitRefuseFor = time.Minute
	// maxAdmitWarned bounds the peers whose refusal was logged at warn.
	maxAdmitWarned = 1024
)

// Frame types of AdmitProtocolID. Append only.
const (
	admitHello   uint8 = 1
	admitOK      uint8 = 2
	admitRefused uint8 = 3
)

// ErrAdmitProtocol is a malformed admission exchange.
var ErrAdmitProtocol = errors.New("p2p: admission protocol violation")

// Admission is a run's admission by ticket as a host enforces it.
type Admission struct {
	// Run is the run manifest id that tickets must name.
	Run [32]byte
	// Creator is the run's creator: admitted without a ticket, and the
	// signer of every ticket. Its peer id must hold its public key
	// (CheckCreator).
	Creator peer.ID
	// Ticket is this host's own ticket, encoded (Ticket.Encode); nil for the
	// creator. The host presents it as it is: the caller checks it first.
	Ticket []byte
	// Grace is how long a connected peer may go without a valid ticket
	// before it is refused. Default AdmitGrace.
	Grace time.Duration
}

// admitState is the host's view of its peers' admission.
type admitState struct {
	Admission
	self peer.ID

	mu      sync.Mutex
	peers   map[peer.ID]*admitPeer // connected peers
	refused map[peer.ID]refusal    // peers this host refused: the first reason (logged at warn), bounded
	refuser map[peer.ID]refusal    // peers that refused this host (bounded like refused)
}

// refusal is why a peer was refused, and until when that holds.
type refusal struct {
	why   string
	until time.Time
}

// admitPeer is one connected peer's admission.
type admitPeer struct {
	since   time.Time // connected since (the grace runs from here)
	tried   time.Time // the last exchange this host opened
	busy    bool      // an exchange this host opened is running
	ok      bool      // admitted
	expires time.Time // of its ticket; zero: never
}

// SetAdmission makes the host admit by ticket: from now on a peer is a run
// peer only once it presented a valid ticket for a.Run signed by a.Creator
// (the creator itself needs none). Until
// then its gossip is ignored, it is kept out of the gossip mesh, and its
// streams on the run's own protocols (all-reduce, scatter, checkpoints)
// are refused, both ways. A peer that presents a bad ticket, or none
// within a.Grace, is disconnected and refused for AdmitRefuseFor, with one
// log line. Call it once, before or after Start (a joiner: as soon as it
// knows the run manifest).
func (h *Host) SetAdmission(a Admission) error {
	if err := CheckCreator(a.Creator); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if len(a.Ticket) > MaxTicketSize {
		return fmt.Errorf("%w: ticket of %d bytes", ErrInvalidConfig, len(a.Ticket))
	}
	if a.Grace <= 0 {
		a.Grace = AdmitGrace
	}
	st := &admitState{Admission: a, self: h.h.ID(), peers: make(map[peer.ID]*admitPeer),
		refused: make(map[peer.ID]refusal), refuser: make(map[peer.ID]refusal)}
	sub, err := h.h.EventBus().Subscribe(new(event.EvtPeerConnectednessChanged), eventbus.BufSize(64))
	if err != nil {
		return fmt.Errorf("p2p: subscribe to connection events: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		sub.Close()
		return ErrClosed
	case !h.admit.CompareAndSwap(nil, st):
		sub.Close()
		return fmt.Errorf("%w: admission set twice", ErrInvalidConfig)
	}
	h.h.SetStreamHandler(AdmitProtocolID, h.handleAdmit)
	h.goLoop(h.life, PartHost, func(ctx context.Context) { h.admitLoop(ctx, sub) })
	return nil
}

// Admitted reports whether p is a run peer: always without SetAdmission,
// else when p is this host or presented a valid ticket that has not
// expired.
func (h *Host) Admitted(p peer.ID) bool {
	a := h.admit.Load()
	if a == nil || p == a.self {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.peers[p]
	return st != nil && st.ok && (st.expires.IsZero() || time.Now().Before(st.expires))
}

// admitLoop follows connections: a new peer gets an exchange at once, and
// every admitSweepEvery pending and expired peers are dealt with.
func (h *Host) admitLoop(ctx context.Context, sub event.Subscription) {
	defer sub.Close()
	tick := time.NewTicker(admitSweepEvery)
	defer tick.Stop()
	h.admitSweep(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			ev := e.(event.EvtPeerConnectednessChanged)
			if ev.Connectedness == network.NotConnected {
				h.admitForget(ev.Peer)
			} else {
				h.admitSweep(ctx)
			}
		case <-tick.C:
			h.admitSweep(ctx)
		}
	}
}

// admitSweep looks at every connected peer: it refuses those whose ticket
// expired or who presented none within the grace, and opens an exchange
// with the others that are not admitted yet.
func (h *Host) admitSweep(ctx context.Context) {
	a := h.admit.Load()
	now := time.Now()
	var start []peer.ID
	refuse := map[peer.ID]error{}
	a.mu.Lock()
	connected := h.h.Network().Peers()
	for p := range a.peers { // an exchange that ended after its peer left
		if !slices.Contains(connected, p) {
			delete(a.peers, p)
		}
	}
	for _, p := range connected {
		st := a.peers[p]
		if st == nil {
			st = &admitPeer{since: now}
			a.peers[p] = st
		}
		switch {
		case st.ok && !st.expires.IsZero() && !now.Before(st.expires):
			refuse[p] = fmt.Errorf("%w at %s", ErrTicketExpired, st.expires.UTC().Format(time.RFC3339))
		case st.ok || st.busy:
		case now.Sub(st.since) >= a.Grace:
			refuse[p] = fmt.Errorf("%w: none valid presented within %v of connecting", ErrNoTicket, a.Grace)
		case st.tried.IsZero() || now.Sub(st.tried) >= admitRetry:
			st.busy, st.tried = true, now
			start = append(start, p)
		}
	}
	a.mu.Unlock()
	for p, err := range refuse {
		h.refuse(p, err)
	}
	for _, p := range start {
		h.wg.Go(func() {
			err := h.openAdmit(ctx, p)
			a.mu.Lock()
			if st := a.peers[p]; st != nil {
				st.busy = false
			}
			a.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				h.log.Debug("admission exchange got no answer, will retry", "peer", p, "err", err)
			}
		})
	}
}

// admitForget drops a disconnected peer: it shows its ticket again when it
// reconnects.
func (h *Host) admitForget(p peer.ID) {
	a := h.admit.Load()
	a.mu.Lock()
	delete(a.peers, p)
	a.mu.Unlock()
}

// openAdmit runs one exchange as the opener. An error means no verdict:
// the exchange is tried again.
func (h *Host) openAdmit(ctx context.Context, p peer.ID) error {
	a := h.admit.Load()
	ctx, cancel := context.WithTimeout(ctx, admitTimeout)
	defer cancel()
	st, err := h.h.NewStream(network.WithAllowLimitedConn(ctx, "admission"), p, AdmitProtocolID)
	if err != nil {
		return err
	}
	dl, _ := ctx.Deadline()
	_ = st.SetDeadline(dl)
	if err := WriteFrame(st, admitHello, a.Ticket); err != nil {
		_ = st.Reset()
		return err
	}
	typ, payload, err := ReadFrame(st, admitMaxFrame, nil)
	if err != nil {
		_ = st.Reset()
		return err
	}
	switch typ {
	case admitOK:
		if err := h.judge(p, payload); err != nil {
			sendRefusal(st, err)
			h.refuse(p, err)
			return nil
		}
	case admitRefused:
		h.refusedBy(p, payload)
	default:
		_ = st.Reset()
		h.refuse(p, fmt.Errorf("%w: frame type %d", ErrAdmitProtocol, typ))
		return nil
	}
	_ = st.Close()
	return nil
}

// handleAdmit runs one exchange as the acceptor.
func (h *Host) handleAdmit(st network.Stream) {
	p := st.Conn().RemotePeer()
	a := h.admit.Load()
	_ = st.SetDeadline(time.Now().Add(admitTimeout))
	typ, payload, err := ReadFrame(st, admitMaxFrame, nil)
	if err == nil && typ != admitHello {
		err = fmt.Errorf("%w: frame type %d", ErrAdmitProtocol, typ)
	}
	if err != nil {
		_ = st.Reset()
		if errors.Is(err, ErrAdmitProtocol) || errors.Is(err, ErrFrameTooLarge) {
			h.refuse(p, err)
		} else {
			h.log.Debug("admission exchange failed", "peer", p, "err", err)
		}
		return
	}
	if err := h.judge(p, payload); err != nil {
		sendRefusal(st, err)
		h.refuse(p, err)
		return
	}
	if err := WriteFrame(st, admitOK, a.Ticket); err != nil {
		_ = st.Reset()
		return
	}
	// The opener closes, or tells why it refuses our ticket (and waits for
	// us to close, see sendRefusal).
	if typ, payload, err := ReadFrame(st, maxRefusal, nil); err == nil && typ == admitRefused {
		h.refusedBy(p, payload)
	}
	_ = st.Close()
}

// sendRefusal tells the peer why it is refused, and waits (a second at
// most) for it to close the stream, which it does once it has read the
// reason, so that the reason reaches it before its connection is closed.
// Neither side closes its writing half before the exchange's last frame.
func sendRefusal(st network.Stream, why error) {
	reason := why.Error()[:min(len(why.Error()), maxRefusal)]
	if WriteFrame(st, admitRefused, []byte(reason)) == nil && st.CloseWrite() == nil {
		_ = st.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(st, admitMaxFrame+FrameHeaderSize))
	}
	_ = st.Reset()
}

// judge checks the ticket p presented and admits p if it is valid; else it
// returns why not, and the caller refuses p.
func (h *Host) judge(p peer.ID, ticket []byte) error {
	a := h.admit.Load()
	expires, err := a.verify(p, ticket, time.Now())
	if err != nil {
		return err
	}
	a.mu.Lock()
	st := a.peers[p]
	if st == nil {
		st = &admitPeer{since: time.Now()}
		a.peers[p] = st
	}
	first := !st.ok
	st.ok, st.expires = true, expires
	a.mu.Unlock()
	if first {
		h.log.Debug("peer admitted to the run", "peer", p, "expires", expires)
	}
	return nil
}

// verify checks the ticket p presented: the creator needs none.
func (a *admitState) verify(p peer.ID, ticket []byte, now time.Time) (expires time.Time, err error) {
	if p == a.Creator {
		return time.Time{}, nil
	}
	if len(ticket) == 0 {
		return time.Time{}, fmt.Errorf("%w (and it is not the run's creator)", ErrNoTicket)
	}
	t, err := DecodeTicket(ticket)
	if err != nil {
		return time.Time{}, err
	}
	if err := t.Verify(a.Creator, a.Run, p, now); err != nil {
		return time.Time{}, err
	}
	return t.Expires, nil
}

// refuse disconnects p and has the gater refuse its connections for
// AdmitRefuseFor; the first refusal of a peer is logged at warn, later
// ones at debug.
func (h *Host) refuse(p peer.ID, why error) {
	a := h.admit.Load()
	h.gate.refuse(p, time.Now().Add(AdmitRefuseFor))
	a.mu.Lock()
	delete(a.peers, p)
	r, known := a.refused[p]
	warn := !known
	if warn {
		if len(a.refused) >= maxAdmitWarned {
			clear(a.refused)
		}
		r.why = why.Error()
	}
	r.until = time.Now().Add(AdmitRefuseFor)
	a.refused[p] = r
	a.mu.Unlock()
	if warn {
		h.log.Warn("peer refused: not admitted to the run", "peer", p, "reason", why, "refused_for", AdmitRefuseFor)
	} else {
		h.log.Debug("peer refused again", "peer", p, "reason", why)
	}
	h.h.Network().ClosePeer(p)
}

// refusedBy reports that p refused this host, and stops dialing p for
// AdmitRefuseFor: it would refuse every connection anyway.
func (h *Host) refusedBy(p peer.ID, reason []byte) {
	h.gate.refuse(p, time.Now().Add(AdmitRefuseFor))
	msg := strings.ToValidUTF8(string(reason[:min(len(reason), maxRefusal)]), "?")
	msg = strings.TrimPrefix(msg, ErrNotAdmitted.Error()+": ")
	a := h.admit.Load()
	a.mu.Lock()
	_, known := a.refuser[p]
	if !known && len(a.refuser) >= maxAdmitWarned {
		clear(a.refuser)
	}
	a.refuser[p] = refusal{why: msg, until: time.Now().Add(AdmitRefuseFor)}
	a.mu.Unlock()
	if !known {
		h.log.Warn("this node was refused admission by a peer", "peer", p, "reason", msg)
	}
}

// refusedReason says why p refused this host, if it did within
// AdmitRefuseFor.
func (h *Host) refusedReason(p peer.ID) (string, bool) {
	_, by := h.refusals(p)
	return by, by != ""
}

// refusals says why this host refused p and why p refused this host, each
// "" unless it happened within AdmitRefuseFor.
func (h *Host) refusals(p peer.ID) (refused, refusedBy string) {
	a := h.admit.Load()
	if a == nil {
		return "", ""
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.refused[p]; ok && now.Before(r.until) {
		refused = r.why
	}
	if r, ok := a.refuser[p]; ok && now.Before(r.until) {
		refusedBy = r.why
	}
	return refused, refusedBy
}

// gatedProtocol reports whether proto is one of the run's own stream
// protocols, which a peer speaks only once admitted: every /intellect/
// protocol but the DHT, the manifest exchange and admission itself.
func gatedProtocol(proto protocol.ID) bool {
	s := string(proto)
	return strings.HasPrefix(s, "/intellect/") && s != AdmitProtocolID && s != ManifestProtocolID &&
		!strings.HasPrefix(s, DHTProtocolPrefix+"/kad/")
}

// admitRM wraps the resource manager so that a stream's protocol is
// refused, before any handler or caller sees the stream, when it is a
// gated protocol and the peer is not admitted.
type admitRM struct {
	network.ResourceManager
	h *Host
}

// OpenStream wraps the stream's scope.
func (r admitRM) OpenStream(p peer.ID, dir network.Direction) (network.StreamManagementScope, error) {
	s, err := r.ResourceManager.OpenStream(p, dir)
	if err != nil {
		return nil, err
	}
	return admitStreamScope{StreamManagementScope: s, h: r.h, p: p}, nil
}

type admitStreamScope struct {
	network.StreamManagementScope
	h *Host
	p peer.ID
}

// SetProtocol refuses a gated protocol with a peer that is not admitted.
func (s admitStreamScope) SetProtocol(proto protocol.ID) error {
	if gatedProtocol(proto) && !s.h.Admitted(s.p) {
		return fmt.Errorf("%w: %s may not speak %s yet", ErrNotAdmitted, s.p, proto)
	}
	return s.StreamManagementScope.SetProtocol(proto)
}
