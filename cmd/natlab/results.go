package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/intellect-node/intellect-node/node"
)

// The pure half of natlab: reducing what the members reported (their
// /v1/peers over time, the public member's /metrics, every history.jsonl)
// to one result per run.

// RelayProtocolPrefix starts the protocol IDs of circuit relay v2 streams
// (hop on the relay, stop towards the target).
const RelayProtocolPrefix = "/libp2p/circuit/relay/"

// relayCount is what a relay's /metrics says it relayed, counted twice.
type relayCount struct {
	// Streams is the node's own count: bytes received on circuit relay
	// streams (intellect_p2p_bytes_total{protocol=~"/libp2p/circuit/relay/.*",
	// direction="received"}). On a relay every relayed byte is received once
	// on a hop or stop stream before it is sent on; the circuits' handshakes
	// and reservations count too.
	Streams float64
	// Service is go-libp2p's relay service's count of the data it relayed
	// (libp2p_relaysvc_data_transferred_bytes_total), a cross-check.
	Service float64
}

// relayServiceMetric is go-libp2p's relay service counter.
const relayServiceMetric = "libp2p_relaysvc_data_transferred_bytes_total"

// relayBytes reads both relay counts from a Prometheus text exposition.
func relayBytes(r io.Reader) (relayCount, error) {
	var c relayCount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var dst *float64
		var value string
		if v, ok := strings.CutPrefix(line, relayServiceMetric+" "); ok {
			dst, value = &c.Service, v
		} else if rest, ok := strings.CutPrefix(line, "intellect_p2p_bytes_total{"); ok {
			labels, v, ok := strings.Cut(rest, "} ")
			if !ok || !strings.Contains(labels, `direction="received"`) || !strings.Contains(labels, `protocol="`+RelayProtocolPrefix) {
				continue
			}
			dst, value = &c.Streams, v
		} else {
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(value + " ")[0], 64)
		if err != nil {
			return c, fmt.Errorf("natlab: metrics line %q: %w", line, err)
		}
		*dst += f
	}
	return c, sc.Err()
}

// pairTimer tracks, for every pair of sites, when both last joined and when
// one of them first reported the other connected directly after that.
type pairTimer struct {
	joined []time.Time // per site: last (re)start
	direct map[[2]int]time.Time
}

func newPairTimer(sites int) *pairTimer {
	return &pairTimer{joined: make([]time.Time, sites), direct: map[[2]int]time.Time{}}
}

func pairKey(i, j int) [2]int { return [2]int{min(i, j), max(i, j)} }

// join records that site i (re)started at t: its pairs start over.
func (p *pairTimer) join(i int, t time.Time) {
	p.joined[i] = t
	for k := range p.direct {
		if k[0] == i || k[1] == i {
			delete(p.direct, k)
		}
	}
}

// observe records site i's view of site j at t: connected directly or not.
func (p *pairTimer) observe(i, j int, direct bool, t time.Time) {
	k := pairKey(i, j)
	if !direct || p.joined[i].IsZero() || p.joined[j].IsZero() {
		return
	}
	if _, ok := p.direct[k]; !ok {
		p.direct[k] = t
	}
}

// delay is how long pair (i, j) took to connect directly after the later of
// the two joined; ok is false if it never did.
func (p *pairTimer) delay(i, j int) (time.Duration, bool) {
	t, ok := p.direct[pairKey(i, j)]
	if !ok {
		return 0, false
	}
	return t.Sub(later(p.joined[i], p.joined[j])), true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// histSummary is what the members' histories say about a run.
type histSummary struct {
	// MinStep and MaxStep are the lowest and highest last step over members.
	MinStep, MaxStep uint64
	// Splits are the steps at which members recorded different model hashes.
	Splits []uint64
	// CommonStep is the highest step every member recorded (0: none) and
	// Identical whether they all hold the same hash there.
	CommonStep uint64
	Identical  bool
	// MaxRing is the most members any step's ring had.
	MaxRing int
	// Utilization is Σ compute / Σ wall and AllReduceSec the median
	// all-reduce time over every member's steps after warmup with a full ring
	// (members = full); NaN when there is none. The median, as in wanbench's
	// table: on this shared machine a single step can take twice as long.
	Utilization, AllReduceSec float64
	// Samples is the number of (member, step) records averaged.
	Samples int
}

// summarizeHistories reduces the members' histories (one slice each; a
// member that never finished a step has none) to a histSummary. Only the
// members in final are required to share CommonStep (in case d the public
// member leaves early and is left out).
func summarizeHistories(hists [][]node.OuterRecord, final []int, warmup uint64, full int) histSummary {
	s := histSummary{MinStep: math.MaxUint64, Utilization: math.NaN(), AllReduceSec: math.NaN()}
	hashes := map[uint64]map[string]bool{}
	var compute, wall float64
	var ar []float64
	for _, recs := range hists {
		last := uint64(0)
		for _, r := range recs {
			last = max(last, r.Step)
			s.MaxRing = max(s.MaxRing, r.Members)
			if hashes[r.Step] == nil {
				hashes[r.Step] = map[string]bool{}
			}
			hashes[r.Step][r.ModelHash] = true
			if r.Step > warmup && r.Members >= full {
				compute, wall, ar = compute+r.ComputeSec, wall+r.WallSec, append(ar, r.AllReduceSec)
				s.Samples++
			}
		}
		s.MinStep, s.MaxStep = min(s.MinStep, last), max(s.MaxStep, last)
	}
	if len(hists) == 0 {
		s.MinStep = 0
	}
	for step, hs := range hashes {
		if len(hs) > 1 {
			s.Splits = append(s.Splits, step)
		}
	}
	sort.Slice(s.Splits, func(a, b int) bool { return s.Splits[a] < s.Splits[b] })
	s.CommonStep, s.Identical = commonStep(hists, final)
	if s.Samples > 0 && wall > 0 {
		s.Utilization, s.AllReduceSec = compute/wall, median(ar)
	}
	return s
}

// commonStep returns the highest step recorded by every member in final and
// whether they all recorded the same hash there.
func commonStep(hists [][]node.OuterRecord, final []int) (uint64, bool) {
	if len(final) == 0 {
		return 0, false
	}
	count := map[uint64]int{}
	hash := map[uint64]map[string]bool{}
	for _, i := range final {
		seen := map[uint64]bool{}
		for _, r := range hists[i] {
			if !seen[r.Step] {
				seen[r.Step] = true
				count[r.Step]++
			}
			if hash[r.Step] == nil {
				hash[r.Step] = map[string]bool{}
			}
			hash[r.Step][r.ModelHash] = true
		}
	}
	var best uint64
	for step, n := range count {
		if n == len(final) && step > best {
			best = step
		}
	}
	return best, best > 0 && len(hash[best]) == 1
}

// median of xs (not empty); xs is sorted in place.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
