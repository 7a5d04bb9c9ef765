package emu

import (
	"errors"
	"math"
	"testing"
)

// gsoPacket builds a virtio header and an IPv4/TCP packet (20 + 32 bytes of
// headers) carrying payload bytes, cut into gsoSize segments (0: no GSO).
func gsoPacket(payload, gsoSize int) (vnet, pkt []byte) {
	vnet = make([]byte, VnetHdrLen)
	if gsoSize > 0 {
		vnet[1] = vnetGSOTCPv4
		vnet[4], vnet[5] = byte(gsoSize), byte(gsoSize>>8)
	}
	pkt = make([]byte, 52+payload)
	pkt[0] = 0x45
	pkt[20+12] = 8 << 4 // TCP data offset: 8 words = 32 bytes
	return vnet, pkt
}

func TestSegments(t *testing.T) {
	cases := []struct {
		payload, gso, segs, wire int
	}{
		{1448, 0, 1, 1500},                    // plain packet
		{1448 * 10, 1448, 10, 10 * 1500},      // ten full segments
		{1448*10 + 1, 1448, 11, 10*1500 + 53}, // a one-byte tail segment
		{0, 1448, 1, 52},                      // headers only
	}
	for _, c := range cases {
		vnet, pkt := gsoPacket(c.payload, c.gso)
		segs, wire, err := Segments(vnet, pkt)
		if err != nil || segs != c.segs || wire != c.wire {
			t.Errorf("payload %d gso %d: %d segments %d bytes (%v), want %d and %d", c.payload, c.gso, segs, wire, err, c.segs, c.wire)
		}
	}
	vnet, pkt := gsoPacket(100, 1448)
	pkt[20+12] = 2 << 4 // data offset below 20 bytes
	if _, _, err := Segments(vnet, pkt); !errors.Is(err, ErrBadGSO) {
		t.Errorf("bad TCP offset: %v", err)
	}
	vnet[1] = 4 // TCPv6 on an IPv4 packet
	if _, _, err := Segments(vnet, pkt); !errors.Is(err, ErrBadGSO) {
		t.Errorf("GSO type TCPv6: %v", err)
	}
}

func FuzzSegments(f *testing.F) {
	vnet, pkt := gsoPacket(3000, 1448)
	f.Add(append(vnet, pkt...))
	f.Add(make([]byte, 10))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < VnetHdrLen {
			return
		}
		segs, wire, err := Segments(b[:VnetHdrLen], b[VnetHdrLen:])
		if err != nil {
			return
		}
		n := len(b) - VnetHdrLen
		if segs < 1 || wire < n || (segs == 1 && wire != n) {
			t.Fatalf("%d segments, %d wire bytes for a %d-byte packet", segs, wire, n)
		}
	})
}

// TestDropSegments: a super-packet of k segments is lost with probability
// 1-(1-p)^k, so the expected loss in segments equals per-segment loss.
func TestDropSegments(t *testing.T) {
	const n, p, k = 100_000, 0.01, 20
	l := NewLoss(p, 9, 9)
	drops := 0
	for range n {
		if l.DropSegments(k) {
			drops++
		}
	}
	q := 1 - math.Pow(1-p, k)
	if sd := math.Sqrt(n * q * (1 - q)); math.Abs(float64(drops)-n*q) > 4*sd {
		t.Errorf("%d of %d super-packets lost, want %.0f ± %.0f", drops, n, n*q, 4*sd)
	}
}
