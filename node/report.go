package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// Verdict reports (issue 13): after each robust all-reduce every segment
// owner publishes on the run's gossip topic, signed like every gossip
// message, what its rule saw and did per member: the norm of the member's
// contribution to the segment and the clip scale and CenteredClip factor
// applied to it (their minimum over the segment's chunks), and how many
// chunks it clipped hard or rejected. Each member checks its own entry
// against what it sent (collective.ScatterResult.SentNorms, the norms the
// owner's code computes, bit for bit): an owner that misstates a member's
// norm, or rejects a finite contribution, is excluded, and the signed
// report is the evidence. /v1/status shows each member what the owners did
// with its contribution. The clip scales and factors themselves depend on
// the other members' contributions, which only an audit (audit.go) sees.

// reportWire is the first byte of a verdict report; mesh messages start
// with mesh.WireVersion. 0xA5 was the first layout (no inner products).
const reportWire = 0xA6

// Report limits, checked before allocating.
const (
	maxReportSegments = 64
	maxReportShard    = 1 << 12
	maxReportChunks   = 1 << 24
	maxReportRingID   = 128
	// maxReportSize keeps a report under the gossip size limit (64 KiB).
	maxReportSize = 60 << 10
)

// ownerReport is one owner's verdict report of one attempt.
type ownerReport struct {
	Ring     string // the mesh ring id (the attempt)
	Step     uint64 // the outer step the attempt completes
	Segments []reportSegment
}

type reportSegment struct {
	Shard, Segment, Chunks uint32
	// MedianNormSq is Σ over chunks of the squared norm of the coordinate
	// median the rule started from (SegmentReport.MedianNorms).
	MedianNormSq float64
	Members      []reportMember // in ring rank order
}

// reportMember is one member's contribution to one segment.
type reportMember struct {
	// NormSq is Σ over chunks, in order, of float64(Verdict.Norm)²: the
	// squared norm of the whole contribution to the segment; +Inf if a
	// chunk was not finite.
	NormSq float64
	// Dot is Σ over chunks of Verdict.Dot, the inner product with the
	// median: with NormSq and the segment's MedianNormSq, the cosine the
	// owner's exclusion rule judges (offence.go). The owner's word: the
	// median depends on the others' contributions.
	Dot                float64
	MinClip, MinFactor float32
	Hard, Rejected     uint32
}

// newOwnerReport summarises the segments an owner's attempt owned.
func newOwnerReport(rg *mesh.Ring, owned []collective.SegmentReport) ownerReport {
	rep := ownerReport{Ring: rg.ID, Step: rg.Step + 1}
	for _, sr := range owned {
		seg := reportSegment{Shard: uint32(sr.Shard), Segment: uint32(sr.Segment), Chunks: uint32(len(sr.Verdicts)),
			Members: make([]reportMember, len(rg.Members))}
		for _, mn := range sr.MedianNorms {
			seg.MedianNormSq += float64(mn) * float64(mn)
		}
		for i := range seg.Members {
			m := reportMember{MinClip: 1, MinFactor: 1}
			for _, chunk := range sr.Verdicts {
				if i >= len(chunk) {
					continue
				}
				v := chunk[i]
				m.NormSq = addNormSq(m.NormSq, v.Norm)
				m.Dot += float64(v.Dot)
				m.MinClip, m.MinFactor = min(m.MinClip, v.Clip), min(m.MinFactor, v.Factor)
				switch v.Flag {
				case collective.FlagHard:
					m.Hard++
				case collective.FlagRejected:
					m.Rejected++
				}
			}
			seg.Members[i] = m
		}
		rep.Segments = append(rep.Segments, seg)
	}
	return rep
}

// addNormSq adds one chunk's norm² to a report's NormSq: the owner's
// report (newOwnerReport) and the member's check (sentNormSq) sum alike.
func addNormSq(s float64, norm float32) float64 { return s + float64(norm)*float64(norm) }

// sentNormSq is what a report's NormSq must be for chunk norms (as in
// ScatterResult.SentNorms), in chunk order.
func sentNormSq(norms []float32) float64 {
	var s float64
	for _, n := range norms {
		s = addNormSq(s, n)
	}
	return s
}

// isReport reports whether gossip data is a verdict report (else a mesh
// message).
func isReport(data []byte) bool { return len(data) > 0 && data[0] == reportWire }

func encodeReport(r ownerReport) ([]byte, error) {
	if len(r.Ring) > maxReportRingID || len(r.Segments) > maxReportSegments {
		return nil, errors.New("node: verdict report over its limits")
	}
	b := []byte{reportWire}
	b = binary.AppendUvarint(b, uint64(len(r.Ring)))
	b = append(b, r.Ring...)
	b = binary.AppendUvarint(b, r.Step)
	b = binary.AppendUvarint(b, uint64(len(r.Segments)))
	for _, s := range r.Segments {
		b = binary.AppendUvarint(b, uint64(s.Shard))
		b = binary.AppendUvarint(b, uint64(s.Segment))
		b = binary.AppendUvarint(b, uint64(s.Chunks))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.MedianNormSq))
		b = binary.AppendUvarint(b, uint64(len(s.Members)))
		for _, m := range s.Members {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(m.NormSq))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(m.Dot))
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(m.MinClip))
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(m.MinFactor))
			b = binary.AppendUvarint(b, uint64(m.Hard))
			b = binary.AppendUvarint(b, uint64(m.Rejected))
		}
	}
	if len(b) > maxReportSize {
		return nil, fmt.Errorf("node: verdict report of %d bytes > %d", len(b), maxReportSize)
	}
	if _, err := decodeReport(b); err != nil {
		return nil, err
	}
	return b, nil
}

var errBadReport = errors.New("node: malformed verdict report")

// decodeReport parses a report and checks its values: a peer's bytes. It
// allocates no more than the bytes can hold.
func decodeReport(b []byte) (ownerReport, error) {
	var r ownerReport
	if len(b) == 0 || b[0] != reportWire || len(b) > maxReportSize {
		return r, errBadReport
	}
	b = b[1:]
	uv := func(limit uint64) (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > limit {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	n, ok := uv(maxReportRingID)
	if !ok || uint64(len(b)) < n || n == 0 {
		return r, errBadReport
	}
	r.Ring, b = string(b[:n]), b[n:]
	if r.Step, ok = uv(math.MaxUint64); !ok {
		return r, errBadReport
	}
	nseg, ok := uv(maxReportSegments)
	if !ok || nseg == 0 {
		return r, errBadReport
	}
	for range nseg {
		var s reportSegment
		shard, ok1 := uv(maxReportShard)
		seg, ok2 := uv(mesh.MaxMembers)
		chunks, ok3 := uv(maxReportChunks)
		if !ok1 || !ok2 || !ok3 || chunks == 0 || len(b) < 8 {
			return r, errBadReport
		}
		s.MedianNormSq, b = math.Float64frombits(binary.LittleEndian.Uint64(b)), b[8:]
		k, ok4 := uv(mesh.MaxMembers)
		if !ok4 || k == 0 || uint64(len(b)) < k*26 || !(s.MedianNormSq >= 0) {
			return r, errBadReport
		}
		s.Shard, s.Segment, s.Chunks = uint32(shard), uint32(seg), uint32(chunks)
		s.Members = make([]reportMember, k)
		for i := range s.Members {
			if len(b) < 24 {
				return r, errBadReport
			}
			m := reportMember{NormSq: math.Float64frombits(binary.LittleEndian.Uint64(b)),
				Dot:       math.Float64frombits(binary.LittleEndian.Uint64(b[8:])),
				MinClip:   math.Float32frombits(binary.LittleEndian.Uint32(b[16:])),
				MinFactor: math.Float32frombits(binary.LittleEndian.Uint32(b[20:]))}
			b = b[24:]
			hard, ok1 := uv(chunks)
			rej, ok2 := uv(chunks)
			if !ok1 || !ok2 || hard+rej > chunks || !(m.NormSq >= 0) || math.IsNaN(m.Dot) || math.IsNaN(float64(m.MinClip)) ||
				!(m.MinClip >= 0 && m.MinClip <= 1) || !(m.MinFactor >= 0 && m.MinFactor <= 1) {
				return r, errBadReport
			}
			m.Hard, m.Rejected = uint32(hard), uint32(rej)
			s.Members[i] = m
		}
		r.Segments = append(r.Segments, s)
	}
	if len(b) != 0 {
		return r, errBadReport
	}
	return r, nil
}

// reportBook holds what this node needs to check the reports of its last
// attempts, and what the owners reported of its contributions.
type reportBook struct {
	mu       sync.Mutex
	attempts []sentAttempt // the last few, newest last
	pending  []heldReport  // reports of attempts this node has not finished yet
}

// heldReport is a report that arrived before this node ended its attempt.
type heldReport struct {
	from mesh.PeerID
	r    ownerReport
	at   time.Time
}

// maxHeldReports bounds the reports held for an attempt not yet ended.
const maxHeldReports = 2 * mesh.MaxMembers

// heldFor is how long a report of an attempt this node has not ended is
// kept.
const heldFor = 2 * time.Minute

// reportOutcome is the result of checking one owner's report.
type reportOutcome struct {
	from     mesh.PeerID
	evidence string // "" if the report is consistent
	step     uint64
	entry    OwnerReport // what the owner reported, when consistent
}

// sentAttempt is what this node sent in one attempt.
type sentAttempt struct {
	ring    string
	step    uint64
	members []mesh.PeerID
	owners  []int // segment → member index
	rank    int
	norms   [][]float32 // ScatterResult.SentNorms
	seen    map[mesh.PeerID]bool
	got     []OwnerReport // what the owners reported so far, by owner
}

const keepAttempts = 2

// ContributionReport is, for /v1/status, what the owners of the last step
// reported of this node's contribution.
type ContributionReport struct {
	Step   uint64        `json:"step"`
	Owners []OwnerReport `json:"owners"`
}

// OwnerReport is one owner's word on this node's contribution to its
// segments: the contribution's norm, the smallest clip scale and
// CenteredClip factor the rule applied, and the chunks flagged.
type OwnerReport struct {
	Owner     string  `json:"owner"`
	Segments  int     `json:"segments"`
	Norm      float64 `json:"norm"`
	MinClip   float32 `json:"min_clip"`
	MinFactor float32 `json:"min_factor"`
	// Cosine of the update with the members' coordinate-wise median over
	// the owner's segments, the owner's word (offence.go: below −0.01 in 3
	// of 8 steps, an owner excludes the member).
	Cosine   float64 `json:"cosine"`
	Hard     uint32  `json:"chunks_clipped_hard"`
	Rejected uint32  `json:"chunks_rejected"`
}

func (b *reportBook) noteSent(a sentAttempt) []reportOutcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	a.seen = make(map[mesh.PeerID]bool)
	b.attempts = append(b.attempts, a)
	if len(b.attempts) > keepAttempts {
		b.attempts = slices.Delete(b.attempts, 0, len(b.attempts)-keepAttempts)
	}
	var out []reportOutcome
	b.pending = slices.DeleteFunc(b.pending, func(h heldReport) bool {
		if h.r.Ring != a.ring || h.r.Step != a.step {
			return time.Since(h.at) > heldFor
		}
		if o, mine := b.checkAttempt(&b.attempts[len(b.attempts)-1], h.from, h.r); mine {
			out = append(out, o)
		}
		return true
	})
	return out
}

// check compares owner from's report with what this node sent. It returns
// the outcome (the evidence of a lie, or the owner's entry), and whether
// the report was about an attempt of this node (else it is ignored).
func (b *reportBook) check(from mesh.PeerID, r ownerReport) (out reportOutcome, mine bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.IndexFunc(b.attempts, func(a sentAttempt) bool { return a.ring == r.Ring && a.step == r.Step })
	if i < 0 {
		// Not (yet) an attempt of this node: hold it a while, bounded.
		if len(b.pending) < maxHeldReports {
			b.pending = append(b.pending, heldReport{from, r, time.Now()})
		}
		return reportOutcome{}, false
	}
	return b.checkAttempt(&b.attempts[i], from, r)
}

// checkAttempt is check of a report of attempt a; b.mu is held.
// The owner's entry is also kept in a.got.
func (b *reportBook) checkAttempt(a *sentAttempt, from mesh.PeerID, r ownerReport) (reportOutcome, bool) {
	ow := slices.Index(a.members, from)
	if ow < 0 || a.seen[from] || ow == a.rank {
		return reportOutcome{}, false // not a member, a second report, or this node's own
	}
	a.seen[from] = true
	lie := func(format string, args ...any) (reportOutcome, bool) {
		return reportOutcome{from: from, step: r.Step, evidence: fmt.Sprintf(format, args...)}, true
	}
	o := len(a.owners)
	entry := OwnerReport{Owner: string(from), MinClip: 1, MinFactor: 1}
	var dot, median float64
	for _, s := range r.Segments {
		idx := int(s.Shard)*o + int(s.Segment)
		if int(s.Segment) >= o || a.owners[s.Segment] != ow || idx >= len(a.norms) {
			return lie("its verdict report of step %d names segment %d of shard %d, which it does not own", r.Step, s.Segment, s.Shard)
		}
		if len(s.Members) != len(a.members) || int(s.Chunks) != len(a.norms[idx]) {
			return lie("its verdict report of step %d has %d members and %d chunks for segment %d of shard %d; the ring has %d members and the segment %d chunks",
				r.Step, len(s.Members), s.Chunks, s.Segment, s.Shard, len(a.members), len(a.norms[idx]))
		}
		me, want := s.Members[a.rank], sentNormSq(a.norms[idx])
		if math.Float64bits(me.NormSq) != math.Float64bits(want) {
			return lie("its verdict report of step %d states a norm² of %g for this node's contribution to segment %d of shard %d; this node sent %g",
				r.Step, me.NormSq, s.Segment, s.Shard, want)
		}
		if me.Rejected > 0 && !math.IsInf(want, 1) {
			return lie("its verdict report of step %d rejects %d chunks of this node's finite contribution to segment %d of shard %d",
				r.Step, me.Rejected, s.Segment, s.Shard)
		}
		entry.Segments++
		entry.Norm += me.NormSq
		dot, median = dot+me.Dot, median+s.MedianNormSq
		entry.MinClip, entry.MinFactor = min(entry.MinClip, me.MinClip), min(entry.MinFactor, me.MinFactor)
		entry.Hard += me.Hard
		entry.Rejected += me.Rejected
	}
	entry.Cosine = memberSums{NormSq: entry.Norm, Dot: dot, MedianNormSq: median}.Cos()
	entry.Norm = math.Sqrt(entry.Norm)
	// Kept with its attempt: a late report of an earlier step must not
	// displace the last step's (CI, TestFalseReportExcludesOwner).
	a.got = append(a.got, entry)
	slices.SortFunc(a.got, func(x, y OwnerReport) int { return strings.Compare(x.Owner, y.Owner) })
	return reportOutcome{from: from, step: r.Step, entry: entry}, true
}

// any reports whether this node has made an attempt of the direct
// scatter.
func (b *reportBook) any() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.attempts) > 0
}

// outstanding is how many owners of this node's last attempt have not
// reported on it yet.
func (b *reportBook) outstanding() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.attempts) == 0 {
		return 0
	}
	a := &b.attempts[len(b.attempts)-1]
	owners := make(map[int]bool)
	for _, o := range a.owners {
		if o != a.rank && !a.seen[a.members[o]] {
			owners[o] = true
		}
	}
	return len(owners)
}

// reportWait bounds how long a node that reached its last outer step waits
// for the owners' verdict reports of that step, so that a lie in the last
// report is caught and /v1/status shows the whole last step.
const reportWait = 3 * time.Second

// reportLinger is how long such a node stays at least, so that its own
// report of the last step reaches the members still waiting for it: a
// published gossip message is only queued, and a node that closed its host
// at once dropped it (CI, TestFalseReportExcludesOwner).
const reportLinger = time.Second

// awaitReports waits, at most reportWait, until every owner of this node's
// last attempt has reported on it (an excluded or departed owner never
// does), and at least reportLinger.
func (n *Node) awaitReports(ctx context.Context) {
	if !n.reports.any() {
		return // no attempt of the direct scatter: no reports to wait for or to send
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(reportWait)
	linger := time.Now().Add(reportLinger)
	for n.reports.outstanding() > 0 || time.Now().Before(linger) {
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			n.log.Debug("verdict reports of the last step missing", "owners", n.reports.outstanding())
			return
		case <-tick.C:
		}
	}
}

// lastReport returns a copy of what the owners reported of the newest
// attempt any of them reported on.
func (b *reportBook) lastReport() *ContributionReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.attempts) - 1; i >= 0; i-- {
		if a := &b.attempts[i]; len(a.got) > 0 {
			return &ContributionReport{Step: a.step, Owners: slices.Clone(a.got)}
		}
	}
	return nil
}

// publishReport publishes this owner's verdict report of an attempt, in
// the background (the next phase does not wait for gossip), in the node's
// life rather than the attempt's: a node that reached its last step ends
// the step's context at once, and a publication still queued was dropped
// (CI, TestFalseReportExcludesOwner).
func (n *Node) publishReport(rg *mesh.Ring, owned []collective.SegmentReport) {
	if len(owned) == 0 {
		return // a client owns nothing
	}
	rep := newOwnerReport(rg, owned)
	if n.reportTamper != nil {
		n.reportTamper(&rep)
	}
	b, err := encodeReport(rep)
	if err != nil {
		n.log.Debug("verdict report not published", "step", rg.Step+1, "err", err)
		return
	}
	n.wg.Go(func() {
		pctx, cancel := context.WithTimeout(n.life, 5*time.Second)
		defer cancel()
		if err := n.host.Publish(pctx, b); err != nil && n.life.Err() == nil {
			n.log.Debug("publish verdict report", "step", rg.Step+1, "err", err)
		}
	})
}

// onReport checks an owner's verdict report (a peer's bytes, signed by
// from) against what this node sent.
func (n *Node) onReport(from mesh.PeerID, data []byte) {
	r, err := decodeReport(data)
	if err != nil {
		n.log.Warn("bad verdict report", "from", from, "err", err)
		return
	}
	if o, mine := n.reports.check(from, r); mine {
		n.reportOutcomes([]reportOutcome{o})
	}
}

// noteSent records what this node sent in an attempt and checks the
// reports that arrived before it ended.
func (n *Node) noteSent(rg *mesh.Ring, owners []int, res collective.ScatterResult) {
	n.reportOutcomes(n.reports.noteSent(sentAttempt{ring: rg.ID, step: rg.Step + 1, members: slices.Clone(rg.Members),
		owners: owners, rank: rg.Rank(n.self), norms: res.SentNorms}))
}

func (n *Node) reportOutcomes(outs []reportOutcome) {
	for _, o := range outs {
		if o.evidence != "" {
			n.met.reports.WithLabelValues("false").Inc()
			n.exclude(o.from, o.evidence)
			continue
		}
		n.met.reports.WithLabelValues("consistent").Inc()
		if c := o.entry.Cosine; c < opposeCos {
			n.log.Warn("a segment owner saw this node's update point against the other members'; owners exclude a member that does so in 3 of 8 steps: check this node's data and configuration against the run's",
				"step", o.step, "owner", o.from, "cosine", c)
		}
	}
	if len(outs) > 0 {
		n.board.update(func(s *Status) { s.Contribution = n.reports.lastReport() })
	}
}
