package node

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

func testReport() ownerReport {
	return ownerReport{Ring: "ring-1", Step: 7, Segments: []reportSegment{
		{Shard: 0, Segment: 1, Chunks: 2, MedianNormSq: 3, Members: []reportMember{
			{NormSq: 4, Dot: 2, MinClip: 1, MinFactor: 0.5}, {NormSq: 9, Dot: -1.5, MinClip: 0.25, MinFactor: 1, Hard: 1},
			{NormSq: math.Inf(1), Rejected: 2}}},
		{Shard: 1, Segment: 1, Chunks: 1, Members: []reportMember{
			{NormSq: 1, MinClip: 1, MinFactor: 1}, {NormSq: 2, MinClip: 1, MinFactor: 1}, {NormSq: 3, MinClip: 1, MinFactor: 1}}},
	}}
}

func TestReportRoundTrip(t *testing.T) {
	r := testReport()
	b, err := encodeReport(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeReport(b)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, r)
	}
	for i := range b { // every cut is an error, never a panic
		if _, err := decodeReport(b[:i]); err == nil {
			t.Fatalf("a report cut at %d of %d bytes decoded", i, len(b))
		}
	}
	bad := testReport()
	bad.Segments[0].Members[0].NormSq = math.NaN()
	if _, err := encodeReport(bad); err == nil {
		t.Fatal("a NaN norm encoded")
	}
	bad = testReport()
	bad.Segments[0].Members[1].MinClip = 1.5
	if _, err := encodeReport(bad); err == nil {
		t.Fatal("a clip scale above 1 encoded")
	}
	bad = testReport()
	bad.Segments[0].Members[1].Dot = math.NaN()
	if _, err := encodeReport(bad); err == nil {
		t.Fatal("a NaN inner product encoded")
	}
	bad = testReport()
	bad.Segments[1].MedianNormSq = -1
	if _, err := encodeReport(bad); err == nil {
		t.Fatal("a negative median norm² encoded")
	}
	if _, err := mesh.Decode(b); err == nil {
		t.Fatal("a verdict report decodes as a mesh message")
	}
}

// TestNewOwnerReport: the summary of an owner's segment report per member.
func TestNewOwnerReport(t *testing.T) {
	rg := &mesh.Ring{ID: "r", Step: 2, Members: []mesh.PeerID{"a", "b"}}
	owned := []collective.SegmentReport{{Shard: 1, Segment: 0, Verdicts: [][]collective.Verdict{
		{{Norm: 3, Clip: 1, Factor: 1, Dot: 1.5}, {Norm: 1, Clip: 0.5, Factor: 0.75, Flag: collective.FlagHard, Dot: -1}},
		{{Norm: 4, Clip: 1, Factor: 0.5, Dot: 0.25}, {Norm: float32(math.Inf(1)), Flag: collective.FlagRejected}},
	}, MedianNorms: []float32{2, 1}}}
	r := newOwnerReport(rg, owned)
	want := ownerReport{Ring: "r", Step: 3, Segments: []reportSegment{{Shard: 1, Segment: 0, Chunks: 2, MedianNormSq: 5, Members: []reportMember{
		{NormSq: 25, Dot: 1.75, MinClip: 1, MinFactor: 0.5},
		{NormSq: math.Inf(1), Dot: -1, MinClip: 0, MinFactor: 0, Hard: 1, Rejected: 1},
	}}}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("report %+v, want %+v", r, want)
	}
	if _, err := encodeReport(r); err != nil {
		t.Fatal(err)
	}
}

// TestReportBookCheck: a member's checks of the owners' reports, including
// one that arrives before the member ended its attempt.
func TestReportBookCheck(t *testing.T) {
	norms := [][]float32{{1, 2}, {3}, {1}, {2, 2}} // shard·o + segment, o = 2
	attempt := func() sentAttempt {
		return sentAttempt{ring: "r", step: 5, members: []mesh.PeerID{"a", "b"}, owners: []int{0, 1}, rank: 1, norms: norms}
	}
	fromA := func(normSq float64, rejected uint32) ownerReport {
		return ownerReport{Ring: "r", Step: 5, Segments: []reportSegment{{Shard: 0, Segment: 0, Chunks: 2,
			MedianNormSq: 4, Members: []reportMember{{NormSq: 1, MinClip: 1, MinFactor: 1}, {NormSq: normSq, Dot: -0.5, MinClip: 0.5, MinFactor: 1, Rejected: rejected}}}}}
	}
	var b reportBook
	if o, mine := b.check("a", fromA(5, 0)); mine || o.evidence != "" {
		t.Fatalf("a report before the attempt: %q, %v", o.evidence, mine)
	}
	outs := b.noteSent(attempt())
	if len(outs) != 1 || outs[0].from != "a" || outs[0].evidence != "" {
		t.Fatalf("held report: %+v, want a consistent one from a", outs)
	}
	if c := b.lastReport(); c == nil || c.Step != 5 || len(c.Owners) != 1 || c.Owners[0].Norm != math.Sqrt(5) || c.Owners[0].MinClip != 0.5 ||
		c.Owners[0].Cosine != -0.5/math.Sqrt(5*4) || outs[0].entry != c.Owners[0] || outs[0].step != 5 {
		t.Fatalf("contribution report %+v", c)
	}
	if _, mine := b.check("a", fromA(5, 0)); mine {
		t.Fatal("a second report of one owner was checked")
	}
	for _, tc := range []struct {
		name string
		r    ownerReport
		from mesh.PeerID
		want string
	}{
		{"norm", fromA(5.5, 0), "a", "states a norm²"},
		{"rejects a finite contribution", fromA(5, 1), "a", "rejects 1 chunks"},
		{"not its segment", fromA(5, 0), "c", ""},
		{"another owner's segment", func() ownerReport { r := fromA(5, 0); r.Segments[0].Segment = 1; return r }(), "a", "does not own"},
		{"chunk count", func() ownerReport { r := fromA(5, 0); r.Segments[0].Chunks = 3; return r }(), "a", "chunks"},
		{"member count", func() ownerReport {
			r := fromA(5, 0)
			r.Segments[0].Members = append(r.Segments[0].Members, reportMember{MinClip: 1, MinFactor: 1})
			return r
		}(), "a", "members"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b reportBook
			b.noteSent(attempt())
			o, mine := b.check(tc.from, tc.r)
			ev := o.evidence
			if tc.want == "" {
				if mine || ev != "" {
					t.Fatalf("checked: %q, %v", ev, mine)
				}
				return
			}
			if !mine || !strings.Contains(ev, tc.want) {
				t.Fatalf("evidence %q, %v; want it to say %q", ev, mine, tc.want)
			}
		})
	}
}

// TestLastReportKeepsItsStep: a late report of an earlier step does not
// displace what the owners reported of the last one (it did, and the
// contribution report of a node on a slow machine lost an owner).
func TestLastReportKeepsItsStep(t *testing.T) {
	members := []mesh.PeerID{"a", "b", "c"}
	attempt := func(step uint64) sentAttempt {
		return sentAttempt{ring: "r", step: step, members: members, owners: []int{0, 1, 2}, rank: 0, norms: [][]float32{{1}, {1}, {1}}}
	}
	report := func(step uint64, seg uint32) ownerReport {
		return ownerReport{Ring: "r", Step: step, Segments: []reportSegment{{Shard: 0, Segment: seg, Chunks: 1,
			Members: []reportMember{{NormSq: 1, MinClip: 1, MinFactor: 1}, {NormSq: 1, MinClip: 1, MinFactor: 1}, {NormSq: 1, MinClip: 1, MinFactor: 1}}}}}
	}
	var b reportBook
	b.noteSent(attempt(4))
	b.noteSent(attempt(5))
	if b.lastReport() != nil {
		t.Fatal("a contribution report before any owner reported")
	}
	for _, r := range []struct {
		from mesh.PeerID
		step uint64
		seg  uint32
	}{{"b", 5, 1}, {"c", 4, 2}, {"c", 5, 2}} {
		if o, mine := b.check(r.from, report(r.step, r.seg)); !mine || o.evidence != "" {
			t.Fatalf("%s's report of step %d: %q, %v", r.from, r.step, o.evidence, mine)
		}
	}
	c := b.lastReport()
	if c == nil || c.Step != 5 || len(c.Owners) != 2 || c.Owners[0].Owner != "b" || c.Owners[1].Owner != "c" {
		t.Fatalf("contribution report %+v, want step 5 from b and c", c)
	}
	if b.outstanding() != 0 {
		t.Fatalf("%d owners outstanding, want 0", b.outstanding())
	}
}

func FuzzDecodeReport(f *testing.F) {
	b, _ := encodeReport(testReport())
	f.Add(b)
	f.Add([]byte{reportWire})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeReport(data)
		if err != nil {
			return
		}
		again, err := encodeReport(r)
		if err != nil {
			t.Fatalf("a decoded report does not encode: %v", err)
		}
		if r2, err := decodeReport(again); err != nil || !reflect.DeepEqual(r2, r) {
			t.Fatalf("re-encoded report decodes to %+v, %v", r2, err)
		}
	})
}
