package account

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// Verdict reports: after each robust all-reduce every segment owner
// publishes on Topic, signed like every gossip message, what its rule saw
// and did per member: the norm of the member's contribution to the segment
// and the clip scale and CenteredClip factor applied to it (their minimum
// over the segment's chunks), and how many chunks it clipped hard or
// rejected. Each member checks its own entry against what it sent
// (collective.ScatterResult.SentNorms, the norms the owner's code computes,
// bit for bit): an owner that misstates a member's norm, or rejects a
// finite contribution, is excluded, and the signed report is the evidence.
// The clip scales and factors themselves depend on the other members'
// contributions, which only an audit (audit.go) sees.

// Topic names the gossip topic of verdict reports under the run's key
// (p2p.Config.Topics); it carries nothing else.
const Topic = "account/1"

// WireVersion is the first byte of an encoded Report: the layout version.
const WireVersion = 0xA6

// Report limits, checked before allocating.
const (
	maxReportSegments = 64
	maxReportShard    = 1 << 12
	maxReportChunks   = 1 << 24
	maxReportRingID   = 128
	// MaxReportSize keeps a report under the gossip size limit (64 KiB).
	MaxReportSize = 60 << 10
	// reportMemberSize is the fixed part of one member's entry: NormSq,
	// Dot, MinClip, MinFactor; its two counts take a byte each at least.
	reportMemberSize = 24
)

// ErrBadReport is the error of a malformed verdict report.
var ErrBadReport = errors.New("account: malformed verdict report")

// Report is one owner's verdict report of one attempt.
type Report struct {
	Ring     string // the mesh ring id (the attempt)
	Step     uint64 // the outer step the attempt completes
	Segments []ReportSegment
}

// ReportSegment is what the owner's rule saw of one segment of one shard.
type ReportSegment struct {
	Shard, Segment, Chunks uint32
	// MedianNormSq is Σ over chunks of the squared norm of the coordinate
	// median the rule started from (SegmentReport.MedianNorms).
	MedianNormSq float64
	Members      []ReportMember // in ring rank order
}

// ReportMember is one member's contribution to one segment.
type ReportMember struct {
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

// NewReport summarises the segments an owner's attempt over rg owned.
func NewReport(rg *mesh.Ring, owned []collective.SegmentReport) Report {
	rep := Report{Ring: rg.ID, Step: rg.Step + 1}
	for _, sr := range owned {
		seg := ReportSegment{Shard: uint32(sr.Shard), Segment: uint32(sr.Segment), Chunks: uint32(len(sr.Verdicts)),
			Members: make([]ReportMember, len(rg.Members))}
		for _, mn := range sr.MedianNorms {
			seg.MedianNormSq += float64(mn) * float64(mn)
		}
		for i := range seg.Members {
			seg.Members[i] = memberEntry(sr.Verdicts, i)
		}
		rep.Segments = append(rep.Segments, seg)
	}
	return rep
}

// memberEntry sums the verdicts of rank i over a segment's chunks.
func memberEntry(verdicts [][]collective.Verdict, i int) ReportMember {
	m := ReportMember{MinClip: 1, MinFactor: 1}
	for _, chunk := range verdicts {
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
	return m
}

// addNormSq adds one chunk's norm² to a report's NormSq: the owner's
// report (NewReport) and the member's check (sentNormSq) sum alike.
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

// Encode returns r's bytes for Topic; it refuses a report over its limits
// or with values Decode would refuse.
func (r Report) Encode() ([]byte, error) {
	if len(r.Ring) > maxReportRingID || len(r.Segments) > maxReportSegments {
		return nil, fmt.Errorf("%w: over its limits", ErrBadReport)
	}
	b := []byte{WireVersion}
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
	if len(b) > MaxReportSize {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrBadReport, len(b), MaxReportSize)
	}
	if _, err := Decode(b); err != nil {
		return nil, err
	}
	return b, nil
}

// reportReader reads a report's fields; the first error sticks.
type reportReader struct {
	b   []byte
	bad bool
}

// uvarint reads a varint of at most limit.
func (r *reportReader) uvarint(limit uint64) uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > limit {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes reads n bytes.
func (r *reportReader) bytes(n uint64) []byte {
	if r.bad || uint64(len(r.b)) < n {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reportReader) float64() float64 {
	if b := r.bytes(8); b != nil {
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	return 0
}

func (r *reportReader) float32() float32 {
	if b := r.bytes(4); b != nil {
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	}
	return 0
}

// Decode parses a report and checks its values: a peer's bytes. It
// allocates no more than the bytes can hold.
func Decode(b []byte) (Report, error) {
	var rep Report
	if len(b) == 0 || b[0] != WireVersion || len(b) > MaxReportSize {
		return rep, ErrBadReport
	}
	r := &reportReader{b: b[1:]}
	n := r.uvarint(maxReportRingID)
	rep.Ring = string(r.bytes(n))
	rep.Step = r.uvarint(math.MaxUint64)
	nseg := r.uvarint(maxReportSegments)
	if r.bad || n == 0 || nseg == 0 {
		return Report{}, ErrBadReport
	}
	for range nseg {
		s, ok := r.segment()
		if !ok {
			return Report{}, ErrBadReport
		}
		rep.Segments = append(rep.Segments, s)
	}
	if len(r.b) != 0 {
		return Report{}, ErrBadReport
	}
	return rep, nil
}

// segment reads one segment of a report.
func (r *reportReader) segment() (ReportSegment, bool) {
	var s ReportSegment
	shard, seg := r.uvarint(maxReportShard), r.uvarint(mesh.MaxMembers)
	chunks := r.uvarint(maxReportChunks)
	s.MedianNormSq = r.float64()
	k := r.uvarint(mesh.MaxMembers)
	if r.bad || chunks == 0 || k == 0 || uint64(len(r.b)) < k*(reportMemberSize+2) || !(s.MedianNormSq >= 0) {
		return s, false
	}
	s.Shard, s.Segment, s.Chunks = uint32(shard), uint32(seg), uint32(chunks)
	s.Members = make([]ReportMember, k)
	for i := range s.Members {
		m, ok := r.member(chunks)
		if !ok {
			return s, false
		}
		s.Members[i] = m
	}
	return s, true
}

// member reads one member's entry of a segment of chunks chunks.
func (r *reportReader) member(chunks uint64) (ReportMember, bool) {
	m := ReportMember{NormSq: r.float64(), Dot: r.float64(), MinClip: r.float32(), MinFactor: r.float32()}
	hard, rej := r.uvarint(chunks), r.uvarint(chunks)
	ok := !r.bad && hard+rej <= chunks && m.NormSq >= 0 && !math.IsNaN(m.Dot) &&
		m.MinClip >= 0 && m.MinClip <= 1 && m.MinFactor >= 0 && m.MinFactor <= 1
	m.Hard, m.Rejected = uint32(hard), uint32(rej)
	return m, ok
}
