package emu

import (
	"errors"
	"net/netip"
)

// Errors of packet parsing. The bytes come from a TUN device, i.e. from
// whatever runs inside an emulated host, so they are checked, never trusted.
var (
	// ErrShortPacket means the packet is shorter than an IPv4 header.
	ErrShortPacket = errors.New("emu: packet shorter than an IPv4 header")
	// ErrNotIPv4 means the version nibble is not 4 (the emulator routes IPv4 only).
	ErrNotIPv4 = errors.New("emu: not an IPv4 packet")
)

// ipv4HeaderLen is the length of an IPv4 header without options.
const ipv4HeaderLen = 20

// Destination returns the destination address of an IPv4 packet.
func Destination(pkt []byte) (netip.Addr, error) {
	if len(pkt) < ipv4HeaderLen {
		return netip.Addr{}, ErrShortPacket
	}
	if pkt[0]>>4 != 4 {
		return netip.Addr{}, ErrNotIPv4
	}
	return netip.AddrFrom4([4]byte(pkt[16:20])), nil
}
