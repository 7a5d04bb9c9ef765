package wan

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/intellect-node/intellect-node/internal/emu"
)

// The reference workload the profiles' rates belong to: INTELLECT-1 moved
// about 10 GB of int8 pseudo-gradients per node per outer step of about
// 38 minutes of compute.
const (
	// PaperBytesPerStep is the int8 payload of one INTELLECT-1 node per outer step.
	PaperBytesPerStep = 10e9
	// PaperStep is INTELLECT-1's compute time per outer step.
	PaperStep = 38 * time.Minute
)

// ErrProfile is wrapped by every error about a profile.
var ErrProfile = errors.New("wan: bad profile")

// Profile is an emulated geography: hosts in regions and the paths between
// them. Rates are those of the real deployment (paper scale); Config scales
// them to the model at hand (see RateScale).
type Profile struct {
	// Name identifies the profile (usa, usa-europe, global, or a custom one).
	Name string `json:"name"`
	// About says what the profile models.
	About string `json:"about,omitempty"`
	// Hosts are the emulated machines, in address order: host i gets 10.77.0.(i+1).
	Hosts []ProfileHost `json:"hosts"`
	// Paths give the round trip, rate and loss between pairs of hosts, the
	// same both ways. Every pair needs one, given here or by Default.
	Paths []Path `json:"paths,omitempty"`
	// Default, when set, covers every pair not listed in Paths.
	Default *Path `json:"default,omitempty"`
	// Inner, when set, is the workload the rates belong to, per inner step
	// (see Scale); unset, they are INTELLECT-1's (RateScale).
	Inner *InnerRef `json:"inner_ref,omitempty"`
}

// InnerRef is a real model and accelerator that a profile's rates belong
// with: the model's int8 pseudo-gradient (a byte per parameter) and the
// accelerator's time for one inner step of it.
type InnerRef struct {
	Bytes float64 `json:"bytes"`
	StepS float64 `json:"step_s"`
}

// Scale returns the factor by which to multiply p's paper-scale rates for a
// run whose int8 pseudo-gradient is bytes and whose inner step takes inner,
// H inner steps to an outer step. With p.Inner, one all-reduce then lasts
// as many inner steps as the reference's does on the real links, whatever
// H; without it, communication takes INTELLECT-1's share of an outer step
// (RateScale).
func (p Profile) Scale(bytes float64, inner time.Duration, h int) float64 {
	if r := p.Inner; r != nil {
		return (bytes / inner.Seconds()) / (r.Bytes / r.StepS)
	}
	return RateScale(bytes, time.Duration(h)*inner)
}

// ProfileHost is one machine of a profile.
type ProfileHost struct {
	// Name is short, unique, and used in the namespace's name (letters, digits, '-').
	Name string `json:"name"`
	// Region is informative (us, eu, asia).
	Region string `json:"region,omitempty"`
}

// Path is the symmetric connection between hosts A and B.
type Path struct {
	A string `json:"a,omitempty"`
	B string `json:"b,omitempty"`
	// RTTMS is the round-trip time in ms; each direction gets half as delay.
	RTTMS float64 `json:"rtt_ms"`
	// RateMbit is the bottleneck rate each way in Mbit/s at paper scale; 0 = unlimited.
	RateMbit float64 `json:"rate_mbit,omitempty"`
	// Loss is the random loss probability each way, in [0, 1].
	Loss float64 `json:"loss,omitempty"`
}

// RateScale returns the factor by which to multiply the profiles' paper-scale
// rates so that a node moving bytesPerStep per outer step of compute time
// step spends the same fraction of its time communicating as an INTELLECT-1
// node did: (bytesPerStep/step) / (PaperBytesPerStep/PaperStep).
func RateScale(bytesPerStep float64, step time.Duration) float64 {
	return (bytesPerStep / step.Seconds()) / (PaperBytesPerStep / PaperStep.Seconds())
}

// Addr is the address of host i (0-based) of any profile: 10.77.0.(i+1).
func Addr(i int) netip.Addr { return SubnetAddr(Prefix, i) }

// Prefix is the subnet all hosts share by default (Options.Subnet).
var Prefix = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, 0, 0}), 24)

// SubnetAddr is the address of host i (0-based) in the /24 subnet s: its
// (i+1)th address.
func SubnetAddr(s netip.Prefix, i int) netip.Addr {
	b := s.Masked().Addr().As4()
	b[3] = byte(i + 1)
	return netip.AddrFrom4(b)
}

// checkSubnet accepts IPv4 /24 subnets only (the profiles' 250 hosts fit).
func checkSubnet(s netip.Prefix) error {
	if !s.Addr().Is4() || s.Bits() != 24 {
		return fmt.Errorf("%w: subnet %v is not an IPv4 /24", ErrProfile, s)
	}
	return nil
}

// Config turns the profile into a forwarder configuration for host i in
// namespace file netns[i] with device Device, taking from o the rate scale,
// MTU, seed, offload setting and subnet.
func (p Profile) Config(netns []string, o Options) (emu.Config, error) {
	o.fill()
	scale := o.RateScale
	if err := p.Validate(); err != nil {
		return emu.Config{}, err
	}
	if !(scale > 0) || len(netns) != len(p.Hosts) {
		return emu.Config{}, fmt.Errorf("%w: scale %v, %d namespaces for %d hosts", ErrProfile, scale, len(netns), len(p.Hosts))
	}
	if err := checkSubnet(o.Subnet); err != nil {
		return emu.Config{}, err
	}
	c := emu.Config{MTU: o.MTU, Seed: o.Seed, Offload: !o.NoOffload}
	for i, h := range p.Hosts {
		c.Hosts = append(c.Hosts, emu.Host{Name: h.Name, Netns: netns[i], Dev: Device, Addr: SubnetAddr(o.Subnet, i)})
	}
	for i, a := range p.Hosts {
		for j, b := range p.Hosts {
			if i != j {
				path, _ := p.path(a.Name, b.Name)
				c.Links = append(c.Links, emu.Link{From: a.Name, To: b.Name, DelayMS: path.RTTMS / 2,
					RateMbit: path.RateMbit * scale, Loss: path.Loss})
			}
		}
	}
	return c, c.Validate()
}

// path returns the path between hosts a and b.
func (p Profile) path(a, b string) (Path, bool) {
	for _, q := range p.Paths {
		if (q.A == a && q.B == b) || (q.A == b && q.B == a) {
			return q, true
		}
	}
	if p.Default != nil {
		return *p.Default, true
	}
	return Path{}, false
}

// Validate checks names, that every pair has exactly one path and that values are in range.
func (p Profile) Validate() error {
	if len(p.Hosts) < 2 || len(p.Hosts) > 250 {
		return fmt.Errorf("%w: %s: %d hosts, want 2..250", ErrProfile, p.Name, len(p.Hosts))
	}
	var names []string
	for _, h := range p.Hosts {
		if !validName(h.Name) || slices.Contains(names, h.Name) {
			return fmt.Errorf("%w: %s: host name %q invalid or repeated", ErrProfile, p.Name, h.Name)
		}
		names = append(names, h.Name)
	}
	if r := p.Inner; r != nil && !(r.Bytes > 0 && r.StepS > 0) {
		return fmt.Errorf("%w: %s: inner reference of %v bytes per %v s", ErrProfile, p.Name, r.Bytes, r.StepS)
	}
	seen := map[[2]string]bool{}
	for _, q := range p.Paths {
		key := [2]string{min(q.A, q.B), max(q.A, q.B)}
		if !slices.Contains(names, q.A) || !slices.Contains(names, q.B) || q.A == q.B || seen[key] {
			return fmt.Errorf("%w: %s: path %s–%s unknown, self or repeated", ErrProfile, p.Name, q.A, q.B)
		}
		seen[key] = true
	}
	for i, a := range names {
		for _, b := range names[i+1:] {
			if q, ok := p.path(a, b); !ok || !(q.RTTMS >= 0) || !(q.RateMbit >= 0) || !(q.Loss >= 0 && q.Loss <= 1) {
				return fmt.Errorf("%w: %s: path %s–%s missing or out of range", ErrProfile, p.Name, a, b)
			}
		}
	}
	return nil
}

// validName reports whether s is a short name of letters, digits and '-'.
func validName(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
