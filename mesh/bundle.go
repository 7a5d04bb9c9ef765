package mesh

import (
	"encoding/binary"
	"fmt"
)

// A bundle carries the messages one node sends at one tick (a heartbeat
// and the vote it re-sends, mostly) as one gossip message: one signature to
// check, one id for gossipsub's caches and its IHAVEs, where two messages
// cost each receiver two of each (docs/scale.md, "Bundles").
//
//	version   uint8 (BundleVersion)
//	count     varint, 2 … MaxBundle
//	count ×   (length varint ≤ MaxMessageSize, then a message as Encode writes it)
//
// A payload that starts with WireVersion is one message.
const (
	// BundleVersion is the first byte of an encoded bundle.
	BundleVersion = 0x82
	// MaxBundle bounds the messages of one bundle: a gossip author's
	// message rate (p2p.Config.GossipRate) lets through at most this many
	// mesh messages per gossip message.
	MaxBundle = 4
	// MaxBundleSize bounds an encoded bundle.
	MaxBundleSize = 2 * MaxMessageSize
)

// EncodeBundle returns the wire form of msgs: one message as Encode writes
// it, several as a bundle. It fails when a message is invalid or the bundle
// would exceed MaxBundleSize; the caller then sends the messages one by one.
func EncodeBundle(msgs []Message) ([]byte, error) {
	switch {
	case len(msgs) == 0 || len(msgs) > MaxBundle:
		return nil, fmt.Errorf("%w: a bundle of %d messages", ErrMalformed, len(msgs))
	case len(msgs) == 1:
		return Encode(msgs[0])
	}
	b := append(make([]byte, 0, 256), BundleVersion)
	b = binary.AppendUvarint(b, uint64(len(msgs)))
	for _, m := range msgs {
		e, err := Encode(m)
		if err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	if len(b) > MaxBundleSize {
		return nil, fmt.Errorf("%w: bundle of %d bytes > %d", ErrTooLarge, len(b), MaxBundleSize)
	}
	return b, nil
}

// DecodeBundle parses one message or a bundle of them; every message is
// validated, and any malformed part fails the whole payload.
func DecodeBundle(b []byte) ([]Message, error) {
	if len(b) == 0 || b[0] != BundleVersion {
		m, err := Decode(b)
		if err != nil {
			return nil, err
		}
		return []Message{m}, nil
	}
	if len(b) > MaxBundleSize {
		return nil, fmt.Errorf("%w: bundle of %d bytes > %d", ErrTooLarge, len(b), MaxBundleSize)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n < 2 || n > MaxBundle {
		return nil, fmt.Errorf("%w: bundle count", ErrMalformed)
	}
	b = b[k:]
	msgs := make([]Message, 0, n)
	for range n {
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: bundle part %d: length", ErrMalformed, len(msgs))
		}
		m, err := Decode(b[k : k+int(size)])
		if err != nil {
			return nil, fmt.Errorf("bundle part %d: %w", len(msgs), err)
		}
		msgs = append(msgs, m)
		b = b[k+int(size):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after the bundle", ErrMalformed, len(b))
	}
	return msgs, nil
}
