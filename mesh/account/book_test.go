package account

import (
	"math"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
)

// TestBookCheck: a member's checks of the owners' reports, including one
// that arrives before the member noted its attempt.
func TestBookCheck(t *testing.T) {
	norms := [][]float32{{1, 2}, {3}, {1}, {2, 2}} // shard·o + segment, o = 2
	attempt := func() sentAttempt {
		return sentAttempt{ring: "r", step: 5, members: []mesh.PeerID{"a", "b"}, owners: []int{0, 1}, rank: 1, norms: norms}
	}
	fromA := func(normSq float64, rejected uint32) Report {
		return Report{Ring: "r", Step: 5, Segments: []ReportSegment{{Shard: 0, Segment: 0, Chunks: 2,
			MedianNormSq: 4, Members: []ReportMember{{NormSq: 1, MinClip: 1, MinFactor: 1}, {NormSq: normSq, Dot: -0.5, MinClip: 0.5, MinFactor: 1, Rejected: rejected}}}}}
	}
	var b book
	if o, mine := b.check("a", fromA(5, 0)); mine || o.evidence != "" {
		t.Fatalf("a report before the attempt: %q, %v", o.evidence, mine)
	}
	outs := b.noteSent(attempt())
	if len(outs) != 1 || outs[0].from != "a" || outs[0].evidence != "" {
		t.Fatalf("held report: %+v, want a consistent one from a", outs)
	}
	if c := b.contribution(); c == nil || c.Step != 5 || len(c.Owners) != 1 || c.Owners[0].Norm != math.Sqrt(5) || c.Owners[0].MinClip != 0.5 ||
		c.Owners[0].Cosine != -0.5/math.Sqrt(5*4) || outs[0].entry.OwnerReport != c.Owners[0] || outs[0].entry.Step != 5 {
		t.Fatalf("contribution report %+v", c)
	}
	if _, mine := b.check("a", fromA(5, 0)); mine {
		t.Fatal("a second report of one owner was checked")
	}
	for _, tc := range []struct {
		name string
		r    Report
		from mesh.PeerID
		want string
	}{
		{"norm", fromA(5.5, 0), "a", "states a norm²"},
		{"rejects a finite contribution", fromA(5, 1), "a", "rejects 1 chunks"},
		{"not its segment", fromA(5, 0), "c", ""},
		{"own report", fromA(5, 0), "b", ""},
		{"another owner's segment", func() Report { r := fromA(5, 0); r.Segments[0].Segment = 1; return r }(), "a", "does not own"},
		{"segment out of range", func() Report { r := fromA(5, 0); r.Segments[0].Segment = 7; return r }(), "a", "does not own"},
		{"shard out of range", func() Report { r := fromA(5, 0); r.Segments[0].Shard = 9; return r }(), "a", "does not own"},
		{"chunk count", func() Report { r := fromA(5, 0); r.Segments[0].Chunks = 3; return r }(), "a", "chunks"},
		{"member count", func() Report {
			r := fromA(5, 0)
			r.Segments[0].Members = append(r.Segments[0].Members, ReportMember{MinClip: 1, MinFactor: 1})
			return r
		}(), "a", "members"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b book
			b.noteSent(attempt())
			o, mine := b.check(tc.from, tc.r)
			if tc.want == "" {
				if mine || o.evidence != "" {
					t.Fatalf("checked: %q, %v", o.evidence, mine)
				}
				return
			}
			if !mine || !strings.Contains(o.evidence, tc.want) {
				t.Fatalf("evidence %q, %v; want it to say %q", o.evidence, mine, tc.want)
			}
		})
	}
}

// TestContributionKeepsItsStep: a late report of an earlier step does not
// displace what the owners reported of the last one.
func TestContributionKeepsItsStep(t *testing.T) {
	members := []mesh.PeerID{"a", "b", "c"}
	attempt := func(step uint64) sentAttempt {
		return sentAttempt{ring: "r", step: step, members: members, owners: []int{0, 1, 2}, rank: 0, norms: [][]float32{{1}, {1}, {1}}}
	}
	report := func(step uint64, seg uint32) Report {
		return Report{Ring: "r", Step: step, Segments: []ReportSegment{{Shard: 0, Segment: seg, Chunks: 1,
			Members: []ReportMember{{NormSq: 1, MinClip: 1, MinFactor: 1}, {NormSq: 1, MinClip: 1, MinFactor: 1}, {NormSq: 1, MinClip: 1, MinFactor: 1}}}}}
	}
	var b book
	b.noteSent(attempt(4))
	b.noteSent(attempt(5))
	if b.contribution() != nil || b.outstanding() != 2 {
		t.Fatalf("before any owner reported: %+v, %d outstanding", b.contribution(), b.outstanding())
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
	c := b.contribution()
	if c == nil || c.Step != 5 || len(c.Owners) != 2 || c.Owners[0].Owner != "b" || c.Owners[1].Owner != "c" {
		t.Fatalf("contribution report %+v, want step 5 from b and c", c)
	}
	if b.outstanding() != 0 {
		t.Fatalf("%d owners outstanding, want 0", b.outstanding())
	}
}

// TestBookHeldReports: reports of attempts not noted yet are held, at
// most maxHeldReports, and dropped once an attempt of a later step is
// noted (no attempt of this member can match them any more).
func TestBookHeldReports(t *testing.T) {
	var b book
	b.check("a", Report{Ring: "next", Step: 5})
	r := Report{Ring: "other", Step: 3}
	for range maxHeldReports + 5 {
		b.check("a", r)
	}
	if len(b.pending) != maxHeldReports {
		t.Fatalf("%d reports held, want the bound %d", len(b.pending), maxHeldReports)
	}
	b.noteSent(sentAttempt{ring: "x", step: 3, members: []mesh.PeerID{"a", "b"}, owners: []int{0, 1}})
	if len(b.pending) != maxHeldReports {
		t.Fatalf("%d reports held after an attempt of their step, want %d (a retry may still match)", len(b.pending), maxHeldReports)
	}
	b.noteSent(sentAttempt{ring: "y", step: 4, members: []mesh.PeerID{"a", "b"}, owners: []int{0, 1}})
	if len(b.pending) != 1 || b.pending[0].r.Ring != "next" {
		t.Fatalf("held after step 4: %+v, want only the report of step 5", b.pending)
	}
}
