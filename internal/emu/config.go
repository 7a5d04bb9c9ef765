package emu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
)

// Limits on a configuration, checked before anything is allocated for it.
const (
	// MaxHosts is the most hosts one Forwarder serves.
	MaxHosts = 64
	// MaxConfigBytes is the largest configuration Decode reads.
	MaxConfigBytes = 1 << 20
	// MinMTU and MaxMTU bound Config.MTU.
	MinMTU, MaxMTU = 576, 65535
	// DefaultMTU is the MTU used when Config.MTU is 0, that of an Ethernet WAN.
	DefaultMTU = 1500
	// maxQueueBytes caps a link's drop-tail queue.
	maxQueueBytes = 256 << 20
	// minQueueRTT is the least round trip the default queue size is sized for.
	minQueueRTT = 20 * time.Millisecond
)

// ErrConfig is wrapped by every error of Config.Validate and Decode.
var ErrConfig = errors.New("emu: bad config")

// Config describes the emulated network: its hosts and the links between them.
type Config struct {
	// MTU is the largest packet in bytes; default DefaultMTU. The TUN devices
	// must be set to the same MTU (wanbench does).
	MTU int `json:"mtu,omitempty"`
	// Seed seeds the loss generators; the same seed repeats the same losses
	// for the same packet sequence.
	Seed uint64 `json:"seed,omitempty"`
	// Offload opens the TUN devices with TCP segmentation offload: the
	// forwarder then moves super-packets of up to 64 KiB, charging the links
	// for the segments they stand for, at a fraction of the CPU cost per byte.
	// Random loss then drops whole super-packets (see Loss.DropSegments).
	Offload bool `json:"offload,omitempty"`
	// Hosts are the emulated machines, at least two.
	Hosts []Host `json:"hosts"`
	// Links are the directed links. Every ordered pair of distinct hosts needs
	// one, given here or by Default.
	Links []Link `json:"links,omitempty"`
	// Default, when set, is used for every ordered pair not listed in Links
	// (its From and To are ignored).
	Default *Link `json:"default,omitempty"`
}

// Host is one emulated machine: a TUN device inside a network namespace.
type Host struct {
	// Name identifies the host in Links; unique.
	Name string `json:"name"`
	// Netns is the path of the namespace's file (e.g. /var/run/netns/NAME);
	// empty means the forwarder's own namespace.
	Netns string `json:"netns,omitempty"`
	// Dev is the TUN device's name; it is created if it does not exist.
	Dev string `json:"dev"`
	// Addr is the host's IPv4 address on Dev; packets to it go to this host.
	Addr netip.Addr `json:"addr"`
}

// Link is one direction of the path between two hosts.
type Link struct {
	// From and To name the hosts; packets from From to To take this link.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// DelayMS is the one-way propagation delay in milliseconds, ≥ 0.
	DelayMS float64 `json:"delay_ms"`
	// RateMbit is the bottleneck rate in Mbit/s (10^6 bits); 0 = unlimited.
	RateMbit float64 `json:"rate_mbit,omitempty"`
	// Loss is the probability in [0, 1] that a packet is dropped at random.
	Loss float64 `json:"loss,omitempty"`
	// QueueBytes is the drop-tail queue in front of the rate limit; 0 picks
	// one bandwidth-delay product of the round trip (at least 20 ms) at RateMbit.
	QueueBytes int `json:"queue_bytes,omitempty"`
	// BurstBytes is the token bucket depth; 0 means one MTU (pure pacing).
	BurstBytes int `json:"burst_bytes,omitempty"`
}

// Delay is the link's one-way delay.
func (l Link) Delay() time.Duration { return time.Duration(l.DelayMS * float64(time.Millisecond)) }

// Bucket returns the shaper for the link, with defaults filled for the MTU.
func (l Link) Bucket(mtu int) Bucket {
	rate := l.RateMbit * 1e6 / 8
	q := l.QueueBytes
	if q == 0 {
		rtt := max(2*l.Delay(), minQueueRTT)
		q = min(int(rate*rtt.Seconds()), maxQueueBytes)
		q = max(q, 4*mtu)
	}
	burst := l.BurstBytes
	if burst == 0 {
		burst = mtu
	}
	return Bucket{Rate: rate, Burst: burst, Queue: q}
}

// Validate checks the configuration and fills defaults.
func (c *Config) Validate() error {
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < MinMTU || c.MTU > MaxMTU {
		return fmt.Errorf("%w: mtu %d outside [%d, %d]", ErrConfig, c.MTU, MinMTU, MaxMTU)
	}
	if len(c.Hosts) < 2 || len(c.Hosts) > MaxHosts {
		return fmt.Errorf("%w: %d hosts, want 2..%d", ErrConfig, len(c.Hosts), MaxHosts)
	}
	if err := c.validateHosts(); err != nil {
		return err
	}
	_, err := c.Matrix()
	return err
}

func (c *Config) validateHosts() error {
	names := map[string]bool{}
	addrs := map[netip.Addr]bool{}
	for _, h := range c.Hosts {
		switch {
		case h.Name == "" || names[h.Name]:
			return fmt.Errorf("%w: host name %q empty or repeated", ErrConfig, h.Name)
		case h.Dev == "" || len(h.Dev) > 15:
			return fmt.Errorf("%w: host %s: device name %q must be 1..15 bytes", ErrConfig, h.Name, h.Dev)
		case !h.Addr.Is4() || addrs[h.Addr]:
			return fmt.Errorf("%w: host %s: address %v not IPv4 or repeated", ErrConfig, h.Name, h.Addr)
		}
		names[h.Name], addrs[h.Addr] = true, true
	}
	return nil
}

// Matrix returns the links indexed [from][to] by host index; the diagonal is
// unused. It fails if a link names an unknown host, repeats a pair, has a
// value out of range, or a pair has no link and there is no Default.
func (c *Config) Matrix() ([][]Link, error) {
	idx := make(map[string]int, len(c.Hosts))
	for i, h := range c.Hosts {
		idx[h.Name] = i
	}
	m := make([][]Link, len(c.Hosts))
	set := make([][]bool, len(c.Hosts))
	for i := range m {
		m[i], set[i] = make([]Link, len(c.Hosts)), make([]bool, len(c.Hosts))
	}
	for _, l := range c.Links {
		f, okf := idx[l.From]
		t, okt := idx[l.To]
		if !okf || !okt || f == t || set[f][t] {
			return nil, fmt.Errorf("%w: link %s→%s: unknown, self or repeated pair", ErrConfig, l.From, l.To)
		}
		m[f][t], set[f][t] = l, true
	}
	for f := range m {
		for t := range m[f] {
			if err := c.fill(m, set, f, t); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// fill checks link f→t, taking Default where the pair was not listed.
func (c *Config) fill(m [][]Link, set [][]bool, f, t int) error {
	if f == t {
		return nil
	}
	if !set[f][t] {
		if c.Default == nil {
			return fmt.Errorf("%w: no link %s→%s and no default", ErrConfig, c.Hosts[f].Name, c.Hosts[t].Name)
		}
		m[f][t] = *c.Default
		m[f][t].From, m[f][t].To = c.Hosts[f].Name, c.Hosts[t].Name
	}
	return m[f][t].validate()
}

func (l Link) validate() error {
	bad := func(what string) error {
		return fmt.Errorf("%w: link %s→%s: %s", ErrConfig, l.From, l.To, what)
	}
	switch {
	case !(l.DelayMS >= 0 && l.DelayMS <= 60_000):
		return bad("delay_ms must be in [0, 60000]")
	case !(l.RateMbit >= 0 && l.RateMbit <= 1e6):
		return bad("rate_mbit must be in [0, 1e6]")
	case !(l.Loss >= 0 && l.Loss <= 1):
		return bad("loss must be in [0, 1]")
	case l.QueueBytes < 0 || l.QueueBytes > maxQueueBytes:
		return bad("queue_bytes must be in [0, 256 MiB]")
	case l.BurstBytes < 0 || l.BurstBytes > maxQueueBytes:
		return bad("burst_bytes must be in [0, 256 MiB]")
	}
	return nil
}

// Decode reads a JSON configuration of at most MaxConfigBytes, rejecting
// unknown fields, and validates it.
func Decode(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxConfigBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("emu: read config: %w", err)
	}
	if len(data) > MaxConfigBytes {
		return Config{}, fmt.Errorf("%w: larger than %d bytes", ErrConfig, MaxConfigBytes)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if len(c.Hosts) > MaxHosts {
		return Config{}, fmt.Errorf("%w: %d hosts, at most %d", ErrConfig, len(c.Hosts), MaxHosts)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
