package soak

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// samples builds samples from "t member step hash" lines.
func samples(lines ...string) []Sample {
	var out []Sample
	for _, l := range lines {
		var t float64
		var m, h string
		var st uint64
		if _, err := fmt.Sscan(l, &t, &m, &st, &h); err != nil {
			panic(l)
		}
		out = append(out, Sample{T: sec(t), Member: m, Step: st, Hash: h})
	}
	return out
}

func TestSplits(t *testing.T) {
	ss := samples(
		"1 a 1 x", "1 b 1 x", // agree
		"10 a 2 y", "11 b 2 z", // split during the partition [5, 20)
		"30 a 3 p", "31 b 3 q", // split 11 s after the heal: inside the heal window of 15 s
		"40 c 1 w",                         // c resumed a fork's step-1 checkpoint at 40 (its restart window)
		"50 a 4 r", "50 b 4 s", "51 c 4 r", // split long after: a failure (one per pair of hashes)
		"52 d 1 v", // another fork's step 1 seen long after, d never restarted: a failure
	)
	ws := []Window{{Interval: Interval{sec(5), sec(20)}}, {Interval: Interval{sec(40), sec(40)}, Member: "c"}}
	got := Splits(ss, ws, sec(15))
	type key struct {
		step uint64
		a, b string
	}
	want := map[key]bool{{2, "a", "b"}: true, {3, "a", "b"}: true, {1, "a", "c"}: true, {1, "a", "d"}: false,
		{1, "c", "d"}: true, {4, "a", "b"}: false}
	if len(got) != len(want) {
		t.Fatalf("%d splits, want %d: %+v", len(got), len(want), got)
	}
	for _, s := range got {
		ex, ok := want[key{s.Step, s.A, s.B}]
		if !ok || s.Excused != ex {
			t.Errorf("split %+v: want listed %v, excused %v", s, ok, ex)
		}
	}
	if Splits(samples("1 a 1 x", "2 a 1 y"), nil, 0) != nil {
		t.Error("one member's own two models counted as a split")
	}
	syncing := samples("1 a 1 x", "2 b 1 y")
	syncing[1].Syncing = true
	if Splits(syncing, nil, 0) != nil {
		t.Error("the old model of a member replacing it counted as a split")
	}
}

func TestGapsAndStall(t *testing.T) {
	ss := samples("0 a 0 h", "10 a 1 h", "20 b 0 h", "25 b 1 h", "100 a 2 h", "105 a 5 h")
	ticks := []Tick{{T: sec(30), Up: 2, Linked: 2}, {T: sec(60), Up: 2, Linked: 1}, {T: sec(80), Up: 2, Linked: 2}, {T: sec(95), Up: 2, Linked: 2}}
	gaps := Gaps(ss, ticks, Interval{0, sec(110)})
	g := gaps[0]
	if g.From != sec(25) || g.To != sec(100) {
		t.Fatalf("longest gap %v–%v, want 25 s–100 s (a jump of 3 steps is a fetch, not a step)", g.From, g.To)
	}
	if g.Linked != sec(30+20) { // 30→60 and 80→100 (the tick at 95 runs to the gap's end)
		t.Fatalf("linked %v within the gap, want 50 s", g.Linked)
	}
}

func TestPaceAndMaxStep(t *testing.T) {
	ss := samples("0 a 0 h", "30 a 3 h", "60 a 6 h", "90 b 8 h", "120 a 9 h")
	if got := Pace(ss, Interval{0, sec(60)}); got != 6 {
		t.Fatalf("pace %v, want 6 steps/min", got)
	}
	if MaxStep(ss, sec(100)) != 8 {
		t.Fatal("max step")
	}
}

func TestHealTime(t *testing.T) {
	ss := samples(
		"5 a 5 x", "8 b 4 y", // before the heal (t = 10): a's side at 5, b (the side) on its own line
		"12 b 5 z",             // after the heal, still its own line at step 5
		"14 a 6 p", "15 b 3 w", // b restarted from an old checkpoint: not back yet
		"18 a 7 r", "21 b 7 r", // b adopted a's step 7: back on one model at 21 s
	)
	got, ok := HealTime(ss, []string{"b"}, sec(10))
	if !ok || got != sec(11) {
		t.Fatalf("heal time %v %v, want 11 s", got, ok)
	}
	if _, ok := HealTime(ss[:5], []string{"b"}, sec(10)); ok {
		t.Fatal("healed without a common model")
	}
}

func TestStuck(t *testing.T) {
	ss := samples("100 a 10 h", "100 b 10 h", "100 c 3 f", "130 a 12 h", "130 b 12 h", "130 c 3 f",
		"160 a 14 h", "160 b 14 h", "160 c 3 f", "160 d 0 g")
	got := Stuck(ss, Interval{sec(100), sec(160)}, 3)
	if len(got) != 1 || got[0] != "c" {
		t.Fatalf("stuck %v, want [c] (d came late)", got)
	}
	if Stuck(ss[:6], Interval{sec(100), sec(130)}, 3) != nil {
		t.Fatal("stuck while the network made only 2 steps")
	}
}

func TestSlope(t *testing.T) {
	var pts []Point
	for i := range 61 { // an hour, one point a minute: 100 + 10/h, noise ±1
		x := float64(i) / 60
		pts = append(pts, Point{T: time.Duration(x * float64(time.Hour)), V: 100 + 10*x + math.Sin(float64(i))})
	}
	slope, mean, ok := Slope(pts)
	if !ok || math.Abs(slope-10)/10 > 0.1 || math.Abs(mean-107.5) > 1 {
		t.Fatalf("slope %v mean %v ok %v, want ≈ 10/h, ≈ 107.5", slope, mean, ok)
	}
	if _, _, ok := Slope(pts[:2]); ok {
		t.Fatal("a slope from 2 points")
	}
}

func TestScanLog(t *testing.T) {
	log := strings.Join([]string{
		`time=1 level=INFO msg="model synced"`,
		`time=2 level=ERROR msg=checkpoint system=node err="write ` + strings.Repeat("/a-long-path", 40) + `: no space left on device"`,
		`time=3 level=ERROR msg="status API" err=boom`,
		`time=4 level=WARN msg="level=ERROR in a value does not count"`,
		`WARNING: DATA RACE`,
		`panic: runtime error: index out of range`,
		`fatal error: concurrent map writes`,
	}, "\n")
	found, err := ScanLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	var whats []string
	for _, f := range found {
		whats = append(whats, f.What)
	}
	if got := strings.Join(whats, " "); got != "error error race panic fatal" {
		t.Fatalf("found %q", got)
	}
	exp := []Expected{{Member: "chi.1", Contains: "no space left on device", Why: "disk full"}}
	if _, ok := Explained(found[0], "chi.1", exp); !ok {
		t.Error("the disk-full error not explained")
	}
	if _, ok := Explained(found[0], "sfo.1", exp); ok {
		t.Error("another member's error explained")
	}
	if _, ok := Explained(found[2], "chi.1", []Expected{{Member: "chi.1", Contains: "DATA RACE"}}); ok {
		t.Error("a race explained away")
	}
}
