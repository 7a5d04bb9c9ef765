package account

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

func testReport() Report {
	return Report{Ring: "ring-1", Step: 7, Segments: []ReportSegment{
		{Shard: 0, Segment: 1, Chunks: 2, MedianNormSq: 3, Members: []ReportMember{
			{NormSq: 4, Dot: 2, MinClip: 1, MinFactor: 0.5}, {NormSq: 9, Dot: -1.5, MinClip: 0.25, MinFactor: 1, Hard: 1},
			{NormSq: math.Inf(1), Rejected: 2}}},
		{Shard: 1, Segment: 1, Chunks: 1, Members: []ReportMember{
			{NormSq: 1, MinClip: 1, MinFactor: 1}, {NormSq: 2, MinClip: 1, MinFactor: 1}, {NormSq: 3, MinClip: 1, MinFactor: 1}}},
	}}
}

// TestReportRoundTrip: a report decodes to itself; every cut of its bytes
// and every out-of-range value is ErrBadReport, never a panic; a report is
// not a mesh message.
func TestReportRoundTrip(t *testing.T) {
	r := testReport()
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, r)
	}
	for i := range b {
		if _, err := Decode(b[:i]); !errors.Is(err, ErrBadReport) {
			t.Fatalf("a report cut at %d of %d bytes: %v", i, len(b), err)
		}
	}
	for name, edit := range map[string]func(*Report){
		"NaN norm":               func(r *Report) { r.Segments[0].Members[0].NormSq = math.NaN() },
		"clip above 1":           func(r *Report) { r.Segments[0].Members[1].MinClip = 1.5 },
		"NaN clip":               func(r *Report) { r.Segments[0].Members[1].MinClip = float32(math.NaN()) },
		"negative factor":        func(r *Report) { r.Segments[0].Members[1].MinFactor = -0.5 },
		"NaN inner product":      func(r *Report) { r.Segments[0].Members[1].Dot = math.NaN() },
		"negative median":        func(r *Report) { r.Segments[1].MedianNormSq = -1 },
		"more flags than chunks": func(r *Report) { r.Segments[1].Members[0].Hard = 2 },
		"no segment":             func(r *Report) { r.Segments = nil },
		"no ring":                func(r *Report) { r.Ring = "" },
		"no chunk":               func(r *Report) { r.Segments[1].Chunks = 0 },
	} {
		bad := testReport()
		edit(&bad)
		if _, err := bad.Encode(); !errors.Is(err, ErrBadReport) {
			t.Errorf("%s: encoded (%v)", name, err)
		}
	}
	if _, err := mesh.Decode(b); err == nil {
		t.Fatal("a verdict report decodes as a mesh message")
	}
}

// TestNewReport: the summary of an owner's segment report per member.
func TestNewReport(t *testing.T) {
	rg := &mesh.Ring{ID: "r", Step: 2, Members: []mesh.PeerID{"a", "b"}}
	owned := []collective.SegmentReport{{Shard: 1, Segment: 0, Verdicts: [][]collective.Verdict{
		{{Norm: 3, Clip: 1, Factor: 1, Dot: 1.5}, {Norm: 1, Clip: 0.5, Factor: 0.75, Flag: collective.FlagHard, Dot: -1}},
		{{Norm: 4, Clip: 1, Factor: 0.5, Dot: 0.25}, {Norm: float32(math.Inf(1)), Flag: collective.FlagRejected}},
	}, MedianNorms: []float32{2, 1}}}
	r := NewReport(rg, owned)
	want := Report{Ring: "r", Step: 3, Segments: []ReportSegment{{Shard: 1, Segment: 0, Chunks: 2, MedianNormSq: 5, Members: []ReportMember{
		{NormSq: 25, Dot: 1.75, MinClip: 1, MinFactor: 0.5},
		{NormSq: math.Inf(1), Dot: -1, MinClip: 0, MinFactor: 0, Hard: 1, Rejected: 1},
	}}}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("report %+v, want %+v", r, want)
	}
	if _, err := r.Encode(); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecodeReport(f *testing.F) {
	b, _ := testReport().Encode()
	f.Add(b)
	f.Add([]byte{WireVersion})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode(data)
		if err != nil {
			return
		}
		again, err := r.Encode()
		if err != nil {
			t.Fatalf("a decoded report does not encode: %v", err)
		}
		if r2, err := Decode(again); err != nil || !reflect.DeepEqual(r2, r) {
			t.Fatalf("re-encoded report decodes to %+v, %v", r2, err)
		}
	})
}
