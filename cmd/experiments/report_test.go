package main

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

func TestDDPBytes(t *testing.T) {
	// Ring all-reduce of fp32: 2(k−1)/k × 4 bytes per parameter per member.
	for _, c := range []struct {
		k      int
		params int64
		want   float64
	}{{2, 1000, 4000}, {4, 1000, 6000}, {8, 1 << 20, 7 * (1 << 20)}} {
		if got := ddpBytes(c.k, c.params); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("ddpBytes(%d, %d) = %v, want %v", c.k, c.params, got, c.want)
		}
	}
}

func testResults() []result {
	pts := func(losses ...float64) []point {
		var p []point
		for i, l := range losses {
			p = append(p, point{Step: i + 1, Tokens: int64(i+1) * 1000, EvalLoss: l, Full: true})
		}
		return p
	}
	return []result{
		{cfg: configs[0], points: pts(3, 2), nodes: 4, sentPer: 1.5e6, hashesOK: true, minRing: 4},
		{cfg: configs[1], points: pts(3.1, 2.02), nodes: 4, sentPer: 1.5e6, hashesOK: true, minRing: 3},
		{cfg: configs[4], points: pts(3.5, 2.2), nodes: 1, hashesOK: true, minRing: 1},
	}
}

func TestSummarize(t *testing.T) {
	s := &setup{nodes: 4, inner: 20, params: 1e6}
	rows := summarize(s, testResults())
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	base, over, single := rows[0], rows[1], rows[2]
	if !math.IsNaN(base.VsBaseline) || math.Abs(over.VsBaseline-0.01) > 1e-12 || math.Abs(single.VsBaseline-0.1) > 1e-12 {
		t.Fatalf("vs baseline: %v %v %v", base.VsBaseline, over.VsBaseline, single.VsBaseline)
	}
	// DDP: 6e6 bytes per inner step; 20 steps = 1.2e8; / 1.5e6 sent = 80×; at H=100, 400×.
	if math.Abs(base.LessThanDDP-80) > 1e-9 || math.Abs(base.AtH100-400) > 1e-9 {
		t.Fatalf("× less than DDP: %v, at H=100 %v", base.LessThanDDP, base.AtH100)
	}
	if !math.IsNaN(single.LessThanDDP) {
		t.Fatalf("single node has a DDP ratio %v", single.LessThanDDP)
	}
	var b strings.Builder
	writeTable(&b, s, rows)
	if strings.Count(b.String(), "WARNING") != 1 || !strings.Contains(b.String(), "overlap-int8 broke up (a ring of 3 < 4 nodes)") {
		t.Errorf("want one break-up warning, for overlap-int8:\n%s", b.String())
	}
	for _, want := range []string{"+1.00 %", "80.0×", "400.0×", "overlapped / blocking (int8), at 2000 tokens: eval loss 2.0200 vs 2.0000 (+1.00 %)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestEqualTokens(t *testing.T) {
	full := []point{{Tokens: 100, EvalLoss: 3, Full: true}, {Tokens: 200, EvalLoss: 2, Full: true}, {Tokens: 300, EvalLoss: 1.5, Full: true}}
	// A ring that lost a member: 100, 200, then 250 and 300 tokens; 300
	// matches the full run's count but is not the same configuration.
	broken := []point{{Tokens: 100, EvalLoss: 3.1, Full: true}, {Tokens: 200, EvalLoss: 2.2, Full: true}, {Tokens: 250, EvalLoss: 1.7}, {Tokens: 300, EvalLoss: 1.6}}
	tok, a, b, ok := equalTokens(broken, full)
	if !ok || tok != 200 || a != 2.2 || b != 2 {
		t.Fatalf("equalTokens = %d %v %v %v", tok, a, b, ok)
	}
	if _, _, _, ok := equalTokens(broken[2:], full); ok {
		t.Fatal("no common token count, but ok")
	}
}

func TestPlotsAreWellFormedSVG(t *testing.T) {
	ps := plots(testResults())
	for _, name := range []string{"eval_loss.svg", "eval_loss_second_half.svg", "eval_loss_relative.svg"} {
		p, ok := ps[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		var b strings.Builder
		if err := p.writeSVG(&b); err != nil {
			t.Fatal(err)
		}
		polylines := 0
		d := xml.NewDecoder(strings.NewReader(b.String()))
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
				polylines++
			}
		}
		if polylines != len(p.Lines) {
			t.Errorf("%s: %d polylines, want %d", name, polylines, len(p.Lines))
		}
	}
	// The relative plot is against the baseline at equal tokens: overlap is +1 % at the end.
	rel := ps["eval_loss_relative.svg"]
	if y := rel.Lines[0].Y; math.Abs(y[len(y)-1]-1) > 1e-9 {
		t.Fatalf("relative overlap line %v", y)
	}
}

func TestTicks(t *testing.T) {
	got := ticks(0, 1.2e6, 6)
	if len(got) < 4 || len(got) > 8 || got[0] != 0 {
		t.Fatalf("ticks %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("not increasing: %v", got)
		}
	}
	for v, want := range map[float64]string{1.5e6: "1.5M", 250000: "250k", 2.25: "2.25", 0: "0", 3: "3"} {
		if s := fmtTick(v); s != want {
			t.Errorf("fmtTick(%v) = %q, want %q", v, s, want)
		}
	}
}
