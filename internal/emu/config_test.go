package emu

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

const twoHosts = `{"hosts":[
 {"name":"a","netns":"/var/run/netns/x.a","dev":"wan0","addr":"10.77.0.1"},
 {"name":"b","netns":"/var/run/netns/x.b","dev":"wan0","addr":"10.77.0.2"}],
 "links":[{"from":"a","to":"b","delay_ms":20,"rate_mbit":100}],
 "default":{"delay_ms":5}}`

func TestDecode(t *testing.T) {
	c, err := Decode(strings.NewReader(twoHosts))
	if err != nil {
		t.Fatal(err)
	}
	if c.MTU != DefaultMTU || c.Hosts[1].Addr != netip.MustParseAddr("10.77.0.2") {
		t.Errorf("decoded %+v", c)
	}
	m, err := c.Matrix()
	if err != nil {
		t.Fatal(err)
	}
	if m[0][1].Delay() != 20*time.Millisecond || m[1][0].Delay() != 5*time.Millisecond || m[1][0].From != "b" {
		t.Errorf("links a→b %+v, b→a %+v", m[0][1], m[1][0])
	}
	b := m[0][1].Bucket(c.MTU)
	// 100 Mbit/s = 12.5 MB/s; queue = one BDP of the 40 ms round trip.
	if b.Rate != 12.5e6 || b.Queue != 500_000 || b.Burst != DefaultMTU {
		t.Errorf("bucket %+v", b)
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := map[string]string{
		"unknown field": `{"hosts":[],"bogus":1}`,
		"one host":      `{"hosts":[{"name":"a","dev":"t","addr":"10.0.0.1"}]}`,
		"missing link":  strings.Replace(twoHosts, `"default":{"delay_ms":5}`, `"mtu":1500`, 1),
		"same address":  strings.Replace(twoHosts, "10.77.0.2", "10.77.0.1", 1),
		"ipv6 address":  strings.Replace(twoHosts, "10.77.0.2", "fd00::2", 1),
		"same name":     strings.Replace(twoHosts, `"name":"b"`, `"name":"a"`, 1),
		"long device":   strings.Replace(twoHosts, `"dev":"wan0","addr":"10.77.0.2"`, `"dev":"a-very-long-device","addr":"10.77.0.2"`, 1),
		"negative rate": strings.Replace(twoHosts, `"rate_mbit":100`, `"rate_mbit":-1`, 1),
		"loss above 1":  strings.Replace(twoHosts, `"rate_mbit":100`, `"loss":1.5`, 1),
		"self link":     strings.Replace(twoHosts, `"to":"b"`, `"to":"a"`, 1),
		"unknown host":  strings.Replace(twoHosts, `"to":"b"`, `"to":"c"`, 1),
		"tiny mtu":      strings.Replace(twoHosts, `"hosts"`, `"mtu":100,"hosts"`, 1),
		"too large":     `{"hosts":[` + strings.Repeat(" ", MaxConfigBytes) + `]}`,
	}
	for name, in := range cases {
		if _, err := Decode(strings.NewReader(in)); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(twoHosts))
	f.Add([]byte(`{"hosts":[{"name":"a"}],"default":{"delay_ms":1e308}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		m, err := c.Matrix()
		if err != nil {
			t.Fatalf("Decode accepted a config whose Matrix fails: %v", err)
		}
		for i := range m {
			for j := range m[i] {
				if i != j {
					if b := m[i][j].Bucket(c.MTU); b.Queue < 0 || b.Rate < 0 {
						t.Fatalf("bucket %+v", b)
					}
				}
			}
		}
	})
}

func TestDestination(t *testing.T) {
	pkt := make([]byte, 40)
	pkt[0] = 0x45
	copy(pkt[16:], []byte{10, 77, 0, 3})
	if a, err := Destination(pkt); err != nil || a != netip.MustParseAddr("10.77.0.3") {
		t.Errorf("Destination = %v, %v", a, err)
	}
	if _, err := Destination(pkt[:19]); !errors.Is(err, ErrShortPacket) {
		t.Errorf("short packet: %v", err)
	}
	pkt[0] = 0x60
	if _, err := Destination(pkt); !errors.Is(err, ErrNotIPv4) {
		t.Errorf("IPv6 packet: %v", err)
	}
}

func FuzzDestination(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2})
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		a, err := Destination(pkt)
		if err == nil && (!a.Is4() || len(pkt) < ipv4HeaderLen) {
			t.Fatalf("accepted %x as %v", pkt, a)
		}
	})
}
