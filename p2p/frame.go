// Package p2p is the network layer: the libp2p host (identity, transports,
// security, muxer, resource limits), DHT discovery, the gossipsub topic of a
// run, and the stream protocols with their codecs.
package p2p

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frames on every stream protocol of this package are
//
//	type    uint8
//	length  uint32, big-endian, length of payload
//	payload [length]byte
//
// A reader states the largest payload it accepts; a longer length is rejected
// before anything is allocated.
// FrameHeaderSize is the bytes a frame adds to its payload.
const FrameHeaderSize = 5

// ErrFrameTooLarge is returned when a peer announces a frame longer than the
// reader's limit.
var ErrFrameTooLarge = errors.New("p2p: frame too large")

// WriteFrame writes one frame. It does not set deadlines: callers do.
func WriteFrame(w io.Writer, typ uint8, payload []byte) error {
	var hdr [FrameHeaderSize]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	if len(payload) == 0 {
		return nil
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame whose payload is at most maxLen bytes. buf, if large
// enough, is reused for the payload; the returned slice aliases it.
func ReadFrame(r io.Reader, maxLen int, buf []byte) (typ uint8, payload []byte, err error) {
	var hdr [FrameHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(maxLen) {
		return 0, nil, fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, n, maxLen)
	}
	if cap(buf) >= int(n) {
		payload = buf[:n]
	} else {
		payload = make([]byte, n)
	}
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], payload, nil
}
