// Package scatter carries collective.ScatterAllReduce over libp2p: for one
// attempt every member opens streamsFor(lanes) streams to every other
// member (lane l on stream l mod that) and sends on them, in frames tagged
// with their lane, its contributions to that member's segments and (as an
// owner) its robust results. Unlike the ring's partial
// sums, every contribution reaches its owner whole, so the owner can judge
// it (docs/robust.md).
package scatter

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

// ProtocolID is the stream protocol of the direct scatter. Frames
// (p2p.WriteFrame/p2p.ReadFrame), all from the dialer to the acceptor:
//
//	msgHello  version u8, run manifest id [32]byte, step u64, sender rank u16,
//	          members u16, lanes u16, stream u8, attempt id length u8,
//	          attempt id
//	msgChunk  lane u16 (≡ stream mod streamsFor(lanes)), one chunk message
//	          of the collective
//	msgAbort  rank u16 of the member the sender blames
//
// Nothing flows back. A stream the acceptor refuses is reset.
const ProtocolID = "/intellect/scatter/2.0.0"

// maxStreams bounds the streams one member opens to another in one
// attempt. Several streams rather than one: each yamux stream starts with
// a 256 KiB window and doubles it at most once a round trip, so one
// stream per peer carried only 8–11 MB/s of a 30 MB/s, 70 ms link during
// the whole of a small preset's all-reduce (docs/robust.md "Streams per
// peer").
const maxStreams = 8

// streamsFor is how many streams one member opens to another in an
// attempt of lanes lanes.
func streamsFor(lanes int) int { return min(lanes, maxStreams) }

// Limits, checked before allocating.
const (
	// MaxIDLen bounds the attempt id (the mesh's ring id).
	MaxIDLen = 64
	// MaxMembers bounds an attempt (collective.MaxScatterMembers).
	MaxMembers = collective.MaxScatterMembers
	// maxLanes is 2 × collective.MaxShards.
	maxLanes = 2 * collective.MaxShards
	// maxChunk is the largest msgChunk payload.
	maxChunk   = 2 + collective.MaxChunkMsgSize
	helloFixed = 1 + 32 + 8 + 2 + 2 + 2 + 1 + 1
	maxHello   = helloFixed + MaxIDLen
)

const version = 2

// Frame types. Append only, never renumber.
const (
	msgHello uint8 = 1
	msgChunk uint8 = 2
	msgAbort uint8 = 3
)

// ErrProtocol is wrapped for a malformed or unexpected frame from a peer.
var ErrProtocol = errors.New("p2p: scatter protocol violation")

// hello opens every stream of an attempt.
type hello struct {
	run     [32]byte // the run manifest's id
	step    uint64
	sender  uint16
	members uint16
	lanes   uint16
	stream  uint8 // < streamsFor(lanes)
	id      string
}

func (h hello) encode() []byte {
	b := make([]byte, 0, helloFixed+len(h.id))
	b = append(b, version)
	b = append(b, h.run[:]...)
	b = binary.BigEndian.AppendUint64(b, h.step)
	b = binary.BigEndian.AppendUint16(b, h.sender)
	b = binary.BigEndian.AppendUint16(b, h.members)
	b = binary.BigEndian.AppendUint16(b, h.lanes)
	b = append(b, h.stream, byte(len(h.id)))
	return append(b, h.id...)
}

// decodeHello parses a hello from a peer.
func decodeHello(p []byte) (hello, error) {
	if len(p) < helloFixed {
		return hello{}, fmt.Errorf("%w: hello of %d bytes", ErrProtocol, len(p))
	}
	if p[0] != version {
		return hello{}, fmt.Errorf("%w: hello version %d, want %d", ErrProtocol, p[0], version)
	}
	h := hello{
		step:    binary.BigEndian.Uint64(p[33:]),
		sender:  binary.BigEndian.Uint16(p[41:]),
		members: binary.BigEndian.Uint16(p[43:]),
		lanes:   binary.BigEndian.Uint16(p[45:]),
		stream:  p[47],
	}
	copy(h.run[:], p[1:33])
	n := int(p[48])
	switch {
	case n == 0 || n > MaxIDLen || len(p) != helloFixed+n:
		return hello{}, fmt.Errorf("%w: attempt id of %d bytes in a hello of %d", ErrProtocol, n, len(p))
	case h.members < 2 || int(h.members) > MaxMembers || h.sender >= h.members:
		return hello{}, fmt.Errorf("%w: sender %d of %d members", ErrProtocol, h.sender, h.members)
	case h.lanes == 0 || int(h.lanes) > maxLanes:
		return hello{}, fmt.Errorf("%w: %d lanes", ErrProtocol, h.lanes)
	case int(h.stream) >= streamsFor(int(h.lanes)):
		return hello{}, fmt.Errorf("%w: stream %d of %d", ErrProtocol, h.stream, streamsFor(int(h.lanes)))
	}
	h.id = string(p[helloFixed:])
	return h, nil
}

// decodeChunk splits a msgChunk payload into its lane and message.
func decodeChunk(p []byte, lanes int) (int, []byte, error) {
	if len(p) < 2 {
		return 0, nil, fmt.Errorf("%w: chunk frame of %d bytes", ErrProtocol, len(p))
	}
	lane := int(binary.BigEndian.Uint16(p))
	if lane >= lanes {
		return 0, nil, fmt.Errorf("%w: lane %d of %d", ErrProtocol, lane, lanes)
	}
	return lane, p[2:], nil
}

// decodeAbort parses a msgAbort payload.
func decodeAbort(p []byte, members int) (int, error) {
	if len(p) != 2 {
		return 0, fmt.Errorf("%w: abort frame of %d bytes", ErrProtocol, len(p))
	}
	r := int(binary.BigEndian.Uint16(p))
	if r >= members {
		return 0, fmt.Errorf("%w: abort names member %d of %d", ErrProtocol, r, members)
	}
	return r, nil
}
