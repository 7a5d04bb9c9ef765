package p2p

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// An admission ticket lets one peer into one run whose admission policy is
// "allowlist": the run creator signs (run manifest id, peer id, expiry) with
// the private key of its node identity, whose public key the manifest names.
// Tickets are issued after the manifest exists, so they can name its id
// without the manifest having to name them.
//
// Encoding (all integers big-endian; Encode is the only spelling DecodeTicket
// accepts):
//
//	version  uint8 = 1
//	run      [32]byte   the run manifest id
//	expires  int64      Unix seconds; 0: never
//	peerLen  uint8      1..maxTicketPeer
//	peer     [peerLen]  the admitted peer id's bytes
//	sigLen   uint16     1..maxTicketSig
//	sig      [sigLen]   the creator's signature over ticketDomain + every byte before sigLen
//
// The text form (a ticket file, a chat message) is TicketTextPrefix followed
// by the encoding in unpadded URL-safe base64.

// Ticket encoding limits.
const (
	ticketVersion = 1
	// maxTicketPeer bounds a peer id's bytes (an Ed25519 peer id is 38).
	maxTicketPeer = 64
	// maxTicketSig bounds a signature (Ed25519: 64; ECDSA DER: about 72).
	maxTicketSig = 256
	// ticketFixed is the size of the fixed fields: version, run, expires,
	// the two lengths.
	ticketFixed = 1 + 32 + 8 + 1 + 2
	// MaxTicketSize bounds an encoded ticket.
	MaxTicketSize = ticketFixed + maxTicketPeer + maxTicketSig
	// TicketTextPrefix starts a ticket's text form.
	TicketTextPrefix = "intellect-ticket:"
	// ticketDomain separates ticket signatures from any other use of the key.
	ticketDomain = "intellect-node/admission-ticket/v1\x00"
)

// Errors about tickets. ErrTicket wraps a malformed one; the others name why
// a well-formed ticket does not admit a peer, and all of them wrap
// ErrNotAdmitted.
var (
	ErrNotAdmitted      = errors.New("p2p: not admitted to the run")
	ErrTicket           = fmt.Errorf("%w: malformed admission ticket", ErrNotAdmitted)
	ErrNoTicket         = fmt.Errorf("%w: no admission ticket", ErrNotAdmitted)
	ErrTicketOtherRun   = fmt.Errorf("%w: ticket for another run", ErrNotAdmitted)
	ErrTicketOtherPeer  = fmt.Errorf("%w: ticket for another peer", ErrNotAdmitted)
	ErrTicketExpired    = fmt.Errorf("%w: ticket expired", ErrNotAdmitted)
	ErrTicketSignature  = fmt.Errorf("%w: ticket not signed by the run's creator", ErrNotAdmitted)
	errTicketCreatorKey = errors.New("p2p: the run creator's peer id does not hold its public key")
)

// Ticket admits Peer to the run whose manifest id is Run until Expires.
type Ticket struct {
	Run     [32]byte  // the run manifest id
	Peer    peer.ID   // the admitted peer
	Expires time.Time // zero: never; else whole seconds
	Sig     []byte    // the creator's signature (signedBytes)
}

// IssueTicket signs a ticket admitting p to run until expires (zero: never)
// with key, the run creator's identity key.
func IssueTicket(key crypto.PrivKey, run [32]byte, p peer.ID, expires time.Time) (*Ticket, error) {
	if len(p) == 0 || len(p) > maxTicketPeer {
		return nil, fmt.Errorf("p2p: issue ticket: peer id of %d bytes", len(p))
	}
	if !expires.IsZero() {
		expires = time.Unix(expires.Unix(), 0)
	}
	t := &Ticket{Run: run, Peer: p, Expires: expires}
	sig, err := key.Sign(t.signedBytes())
	if err != nil {
		return nil, fmt.Errorf("p2p: issue ticket: %w", err)
	}
	if len(sig) > maxTicketSig {
		return nil, fmt.Errorf("p2p: issue ticket: a %s signature of %d bytes", key.Type(), len(sig))
	}
	t.Sig = sig
	return t, nil
}

// body encodes every field before the signature.
func (t *Ticket) body() []byte {
	b := make([]byte, 0, MaxTicketSize)
	b = append(b, ticketVersion)
	b = append(b, t.Run[:]...)
	var exp int64
	if !t.Expires.IsZero() {
		exp = t.Expires.Unix()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(exp))
	b = append(b, byte(len(t.Peer)))
	return append(b, t.Peer...)
}

// signedBytes is what the creator signs.
func (t *Ticket) signedBytes() []byte { return append([]byte(ticketDomain), t.body()...) }

// Encode returns the ticket's canonical encoding.
func (t *Ticket) Encode() []byte {
	b := binary.BigEndian.AppendUint16(t.body(), uint16(len(t.Sig)))
	return append(b, t.Sig...)
}

// DecodeTicket parses a ticket from untrusted bytes. It checks the format
// only; Verify says whether the ticket admits a peer.
func DecodeTicket(b []byte) (*Ticket, error) {
	bad := func(format string, args ...any) (*Ticket, error) {
		return nil, fmt.Errorf("%w: %s", ErrTicket, fmt.Sprintf(format, args...))
	}
	if len(b) < ticketFixed || len(b) > MaxTicketSize {
		return bad("%d bytes, want %d..%d", len(b), ticketFixed, MaxTicketSize)
	}
	if b[0] != ticketVersion {
		return bad("version %d, this node reads %d", b[0], ticketVersion)
	}
	var t Ticket
	copy(t.Run[:], b[1:33])
	exp := int64(binary.BigEndian.Uint64(b[33:41]))
	if exp < 0 {
		return bad("expiry %d", exp)
	}
	if exp > 0 {
		t.Expires = time.Unix(exp, 0)
	}
	n := int(b[41])
	if n == 0 || n > maxTicketPeer || len(b) < 42+n+2 {
		return bad("peer id of %d bytes in %d", n, len(b))
	}
	p, err := peer.IDFromBytes(b[42 : 42+n])
	if err != nil {
		return bad("peer id: %v", err)
	}
	t.Peer = p
	rest := b[42+n:]
	m := int(binary.BigEndian.Uint16(rest))
	if m == 0 || m > maxTicketSig || len(rest) != 2+m {
		return bad("signature of %d bytes in %d", m, len(rest)-2)
	}
	t.Sig = bytes.Clone(rest[2:])
	return &t, nil
}

// Verify reports whether t admits peer p to the run with manifest id run,
// signed by creator's key, at time now; the error says why not. The
// signature is checked first, so that the other reasons are the creator's
// word.
func (t *Ticket) Verify(creator peer.ID, run [32]byte, p peer.ID, now time.Time) error {
	key, err := creator.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("%w %s: %v", errTicketCreatorKey, creator, err)
	}
	if ok, err := key.Verify(t.signedBytes(), t.Sig); !ok || err != nil {
		return fmt.Errorf("%w %s", ErrTicketSignature, creator)
	}
	switch {
	case t.Run != run:
		return fmt.Errorf("%w: %x…, this run is %x…", ErrTicketOtherRun, t.Run[:6], run[:6])
	case t.Peer != p:
		return fmt.Errorf("%w: issued to %s, presented by %s", ErrTicketOtherPeer, t.Peer, p)
	case !t.Expires.IsZero() && !now.Before(t.Expires):
		return fmt.Errorf("%w at %s", ErrTicketExpired, t.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// String is the ticket's text form: TicketTextPrefix and the encoding in
// URL-safe base64.
func (t *Ticket) String() string {
	return TicketTextPrefix + base64.RawURLEncoding.EncodeToString(t.Encode())
}

// ParseTicket reads a ticket's text form (String), ignoring surrounding
// white space.
func ParseTicket(text []byte) (*Ticket, error) {
	text = bytes.TrimSpace(text)
	if len(text) > len(TicketTextPrefix)+base64.RawURLEncoding.EncodedLen(MaxTicketSize) {
		return nil, fmt.Errorf("%w: text of %d bytes", ErrTicket, len(text))
	}
	rest, ok := bytes.CutPrefix(text, []byte(TicketTextPrefix))
	if !ok {
		return nil, fmt.Errorf("%w: text does not start with %q", ErrTicket, TicketTextPrefix)
	}
	b := make([]byte, base64.RawURLEncoding.DecodedLen(len(rest)))
	n, err := base64.RawURLEncoding.Decode(b, rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTicket, err)
	}
	return DecodeTicket(b[:n])
}

// CheckCreator reports whether a run creator's peer id holds its public key
// (Ed25519 and other inlined keys do), so that tickets can be checked
// against it.
func CheckCreator(creator peer.ID) error {
	if err := creator.Validate(); err != nil {
		return fmt.Errorf("%w %q: %v", errTicketCreatorKey, creator, err)
	}
	if _, err := creator.ExtractPublicKey(); err != nil {
		return fmt.Errorf("%w %s: %v", errTicketCreatorKey, creator, err)
	}
	return nil
}
