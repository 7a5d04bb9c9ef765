package wan

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestBuiltinProfiles checks the built-in geographies: usa has 4
// hosts 20–70 ms apart; usa-europe 2+2 with ≈ 90 ms across; global spans
// three regions with 150–300 ms between them at lower rates than within.
func TestBuiltinProfiles(t *testing.T) {
	for _, p := range Profiles() {
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	usa, _ := Lookup("usa")
	lo, hi := rttRange(usa, func(a, b string) bool { return true })
	if len(usa.Hosts) != 4 || lo != 20 || hi != 70 {
		t.Errorf("usa: %d hosts, RTT %g–%g ms; want 4 hosts, 20–70", len(usa.Hosts), lo, hi)
	}
	ue, _ := Lookup("usa-europe")
	lo, hi = rttRange(ue, crossRegion(ue))
	if len(ue.Hosts) != 4 || lo < 75 || hi > 105 {
		t.Errorf("usa-europe: across RTT %g–%g ms, want ≈ 90", lo, hi)
	}
	g, _ := Lookup("global")
	lo, hi = rttRange(g, crossRegion(g))
	if lo != 150 || hi != 300 {
		t.Errorf("global: across RTT %g–%g ms, want 150–300", lo, hi)
	}
	for _, q := range g.Paths {
		if crossRegion(g)(q.A, q.B) && q.RateMbit >= rateIntra {
			t.Errorf("global: %s–%s at %g Mbit/s is not below the in-region rate", q.A, q.B, q.RateMbit)
		}
	}
	if _, err := Lookup("mars"); !errors.Is(err, ErrProfile) {
		t.Errorf("Lookup(mars): %v", err)
	}
}

func rttRange(p Profile, keep func(a, b string) bool) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i, a := range p.Hosts {
		for _, b := range p.Hosts[i+1:] {
			if q, _ := p.path(a.Name, b.Name); keep(a.Name, b.Name) {
				lo, hi = min(lo, q.RTTMS), max(hi, q.RTTMS)
			}
		}
	}
	return lo, hi
}

func crossRegion(p Profile) func(a, b string) bool {
	region := map[string]string{}
	for _, h := range p.Hosts {
		region[h.Name] = h.Region
	}
	return func(a, b string) bool { return region[a] != region[b] }
}

// TestRateScale: the paper's own workload scales by 1; a 1 MB model with a
// 10 s outer step needs 1e6/10 / (1e10/2280) of the paper's rates.
func TestRateScale(t *testing.T) {
	if s := RateScale(PaperBytesPerStep, PaperStep); math.Abs(s-1) > 1e-12 {
		t.Errorf("paper workload scale %v, want 1", s)
	}
	want := (1e6 / 10.0) / (10e9 / 2280.0)
	if s := RateScale(1e6, 10*time.Second); math.Abs(s-want)/want > 1e-12 {
		t.Errorf("RateScale(1 MB, 10 s) = %v, want %v", s, want)
	}
}

// TestHomeScale: the home profile's rates scale per inner step, so that a
// member's int8 all-reduce lasts as many inner steps as a 1 B model's does
// on a 100 Mbit/s link next to a 1 s inner step (2·3/4 GB at 12.5 MB/s:
// 120), whatever the model, the step or H; the other profiles scale per
// outer step (RateScale); a bad reference is refused; Widen keeps it.
func TestHomeScale(t *testing.T) {
	h, err := Lookup("home")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		bytes float64
		step  time.Duration
		h     int
	}{{951424, 50 * time.Millisecond, 5}, {12.6e6, 100 * time.Millisecond, 26}} {
		s := h.Scale(c.bytes, c.step, c.h)
		uplink := 3 * h.Paths[0].RateMbit * s * 1e6 / 8 // bytes/s over a member's three paths
		steps := 2 * 0.75 * c.bytes / uplink / c.step.Seconds()
		if math.Abs(steps-120) > 1e-6 {
			t.Errorf("%v bytes, %v step, H %d: all-reduce lasts %v inner steps, want 120", c.bytes, c.step, c.h, steps)
		}
	}
	usa, _ := Lookup("usa")
	if s, want := usa.Scale(1e6, time.Second, 10), RateScale(1e6, 10*time.Second); s != want {
		t.Errorf("usa scale %v, want RateScale's %v", s, want)
	}
	bad := h
	bad.Inner = &InnerRef{Bytes: 1e9}
	if err := bad.Validate(); !errors.Is(err, ErrProfile) {
		t.Errorf("reference without a step: %v", err)
	}
	if w, err := Widen(h, 8); err != nil || w.Inner != h.Inner {
		t.Errorf("widened home: %v, reference %v", err, w.Inner)
	}
}

// TestProfileConfig: each direction gets half the RTT as delay and the
// scaled rate; addresses follow host order.
func TestProfileConfig(t *testing.T) {
	p, _ := Lookup("usa")
	ns := []string{"/n/0", "/n/1", "/n/2", "/n/3"}
	c, err := p.Config(ns, Options{RateScale: 0.01, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Offload || c.MTU != 1500 || c.Seed != 5 || c.Hosts[3].Addr != Addr(3) || c.Hosts[3].Netns != "/n/3" {
		t.Errorf("config %+v", c)
	}
	m, err := c.Matrix()
	if err != nil {
		t.Fatal(err)
	}
	sfoNyc, nycSfo := m[0][3], m[3][0]
	if sfoNyc.DelayMS != 35 || nycSfo.DelayMS != 35 || sfoNyc.RateMbit != 12.5 {
		t.Errorf("sfo→nyc %+v, nyc→sfo %+v; want 35 ms each way at 12.5 Mbit/s", sfoNyc, nycSfo)
	}
	if _, err := p.Config(ns[:2], Options{}); !errors.Is(err, ErrProfile) {
		t.Errorf("too few namespaces: %v", err)
	}
}

func TestProfileValidate(t *testing.T) {
	bad := map[string]Profile{
		"one host":     {Name: "x", Hosts: []ProfileHost{{Name: "a"}}},
		"missing path": {Name: "x", Hosts: []ProfileHost{{Name: "a"}, {Name: "b"}}},
		"bad name":     {Name: "x", Hosts: []ProfileHost{{Name: "a b"}, {Name: "b"}}, Default: &Path{}},
		"same name":    {Name: "x", Hosts: []ProfileHost{{Name: "a"}, {Name: "a"}}, Default: &Path{}},
		"repeat path":  {Name: "x", Hosts: []ProfileHost{{Name: "a"}, {Name: "b"}}, Paths: []Path{{A: "a", B: "b"}, {A: "b", B: "a"}}},
		"self path":    {Name: "x", Hosts: []ProfileHost{{Name: "a"}, {Name: "b"}}, Paths: []Path{{A: "a", B: "a"}}, Default: &Path{}},
		"loss > 1":     {Name: "x", Hosts: []ProfileHost{{Name: "a"}, {Name: "b"}}, Default: &Path{Loss: 2}},
		"negative rtt": {Name: "x", Hosts: []ProfileHost{{Name: "a"}, {Name: "b"}}, Default: &Path{RTTMS: -1}},
		"NaN rate":     {Name: "x", Hosts: []ProfileHost{{Name: "a"}, {Name: "b"}}, Default: &Path{RateMbit: math.NaN()}},
	}
	for name, p := range bad {
		if err := p.Validate(); !errors.Is(err, ErrProfile) {
			t.Errorf("%s: %v, want ErrProfile", name, err)
		}
	}
}

// TestDecodeProfile: the JSON of every built-in profile decodes back to it.
func TestDecodeProfile(t *testing.T) {
	for _, p := range Profiles() {
		data, _ := json.Marshal(p)
		got, err := DecodeProfile(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		again, _ := json.Marshal(got)
		if !bytes.Equal(data, again) {
			t.Errorf("%s: round trip changed the profile", p.Name)
		}
	}
	if _, err := DecodeProfile(strings.NewReader(`{"name":"x","hosts":[],"extra":1}`)); !errors.Is(err, ErrProfile) {
		t.Errorf("unknown field: %v", err)
	}
}

func FuzzDecodeProfile(f *testing.F) {
	data, _ := json.Marshal(Pair(10, 100, 0.01))
	f.Add(data)
	f.Add([]byte(`{"name":"x","hosts":[{"name":"a"},{"name":"b"}],"default":{"rtt_ms":1e300}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodeProfile(bytes.NewReader(data))
		if err != nil || len(p.Hosts) > 64 {
			return
		}
		ns := make([]string, len(p.Hosts))
		// A valid profile yields a configuration, or a clear error for
		// values the emulator cannot take (e.g. a delay of years).
		if _, err := p.Config(ns, Options{}); err != nil && !strings.Contains(err.Error(), "bad config") {
			t.Fatalf("valid profile, config error without ErrConfig: %v", err)
		}
	})
}

// TestExpand checks the placeholders, {addr10} included.
func TestExpand(t *testing.T) {
	n := &Net{}
	for i := range 12 {
		n.Hosts = append(n.Hosts, Host{Index: i, Name: "h" + string(rune('a'+i)), Netns: "ns", Addr: Addr(i)})
	}
	got := n.Expand(2, []string{"--id={host}/{index}", "/ip4/{addr0}/tcp/4001", "{addr10}:{addr1}", "{addr}", "{netns}"})
	want := []string{"--id=hc/2", "/ip4/10.77.0.1/tcp/4001", "10.77.0.11:10.77.0.2", "10.77.0.3", "ns"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Expand = %q, want %q", got, want)
	}
}

func TestTxDrops(t *testing.T) {
	const dev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  wan0:    5000      10    0    0    0     0          0         0   289792    2264    0 1424    0     0       0          0
`
	if got, err := txDrops(dev, "wan0"); err != nil || got != 1424 {
		t.Errorf("txDrops = %d, %v; want 1424", got, err)
	}
	if _, err := txDrops(dev, "eth0"); err == nil {
		t.Error("txDrops found a device that is not there")
	}
}

// TestProfileConfigSubnet: Options.Subnet moves every host's address into
// that /24; anything but an IPv4 /24 is refused.
func TestProfileConfigSubnet(t *testing.T) {
	p, _ := Lookup("usa")
	ns := []string{"/n/0", "/n/1", "/n/2", "/n/3"}
	sub := netip.MustParsePrefix("11.77.0.0/24")
	c, err := p.Config(ns, Options{Subnet: sub})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Hosts[2].Addr, netip.MustParseAddr("11.77.0.3"); got != want {
		t.Errorf("host 2 address %v, want %v", got, want)
	}
	for _, bad := range []string{"11.77.0.0/16", "fd00::/120"} {
		if _, err := p.Config(ns, Options{Subnet: netip.MustParsePrefix(bad)}); !errors.Is(err, ErrProfile) {
			t.Errorf("subnet %s: err %v, want ErrProfile", bad, err)
		}
	}
}

func TestWidenProfile(t *testing.T) {
	g, err := Lookup("global")
	if err != nil {
		t.Fatal(err)
	}
	w, err := Widen(g, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Hosts) != 16 || w.Hosts[6].Name != g.Hosts[0].Name+"2" || w.Hosts[15].Name != g.Hosts[3].Name+"3" {
		t.Fatalf("hosts %v", w.Hosts)
	}
	path := func(p Profile, a, b string) Path {
		for _, pa := range p.Paths {
			if pa.A == a && pa.B == b || pa.A == b && pa.B == a {
				return pa
			}
		}
		t.Fatalf("no path %s–%s", a, b)
		return Path{}
	}
	h := func(i int) string { return w.Hosts[i].Name }
	if got, want := path(w, h(6), h(1)), path(g, h(0), h(1)); got.RTTMS != want.RTTMS || got.RateMbit != want.RateMbit || got.Loss != want.Loss {
		t.Errorf("widened path %+v, want the sites' %+v", got, want)
	}
	if got := path(w, h(0), h(6)); got.RTTMS != SameSite.RTTMS {
		t.Errorf("same-site path %+v", got)
	}
	if _, err := Widen(g, 3); err == nil {
		t.Error("narrowing accepted")
	}
}
