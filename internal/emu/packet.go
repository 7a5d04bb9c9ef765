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

// VnetHdrLen is the length of the virtio_net_hdr that precedes every packet
// on a TUN device opened with offloads (IFF_VNET_HDR).
const VnetHdrLen = 10

// virtio_net_hdr fields used here (little-endian on the machines we run on;
// the TUN device uses the host's byte order by default).
const (
	vnetGSONone  = 0 // gso_type: a single packet
	vnetGSOTCPv4 = 1
)

// ErrBadGSO means a GSO header does not fit the packet behind it.
var ErrBadGSO = errors.New("emu: inconsistent GSO header")

// Segments returns how many wire packets a packet read from an offloading
// TUN device stands for, and how many bytes they take on the wire: a TCP
// super-packet of n payload bytes with segment size s becomes ⌈n/s⌉
// segments that each repeat the IP and TCP headers. vnet is the
// virtio_net_hdr, pkt the IPv4 packet after it. A packet without GSO is one
// segment of len(pkt) bytes.
func Segments(vnet, pkt []byte) (segs, wire int, err error) {
	if len(vnet) < VnetHdrLen {
		return 0, 0, ErrBadGSO
	}
	if vnet[1] == vnetGSONone {
		return 1, len(pkt), nil
	}
	gsoSize := int(vnet[4]) | int(vnet[5])<<8
	if vnet[1]&0x7f != vnetGSOTCPv4 || gsoSize == 0 || len(pkt) < ipv4HeaderLen {
		return 0, 0, ErrBadGSO
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < ipv4HeaderLen || len(pkt) < ihl+20 {
		return 0, 0, ErrBadGSO
	}
	hdrs := ihl + int(pkt[ihl+12]>>4)*4
	if hdrs < ihl+20 || hdrs > len(pkt) {
		return 0, 0, ErrBadGSO
	}
	segs = max(1, (len(pkt)-hdrs+gsoSize-1)/gsoSize)
	return segs, len(pkt) + (segs-1)*hdrs, nil
}
