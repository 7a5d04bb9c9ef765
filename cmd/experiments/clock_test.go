package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClock: a run's record n ends at n·H inner steps × step ÷ utilization;
// the table gives each run's end and when its curve first reached the
// lowest loss every curve reaches; bad curves are refused.
func TestClock(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "results.jsonl")
	var lines []string
	for _, r := range []sweepResult{
		{Run: sweepRun{Name: "single-1x-muon", Kind: "single", H: 10}, Seed: 1, Data: "c", Final: 2.0, Eval: []float64{2.5, 2.2, 2.0}, Tokens: []int64{1, 2, 3}},
		{Run: sweepRun{Name: "traffic-m4-h20-q2-plain-muon", Kind: "diloco", H: 20}, Seed: 1, Data: "c", Final: 1.8, Eval: []float64{2.3, 1.9}, Tokens: []int64{4, 8}},
	} {
		b, _ := json.Marshal(r)
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "clock.svg")
	var out strings.Builder
	err := runClock([]string{"-step", "360s", "-svg", svg,
		"-curve", "one node=" + file + "|c|1|single-1x-muon@1",
		"-curve", "q2, H = 20=" + file + "|c|1|traffic-m4-h20-q2-plain-muon@0.5"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	// 360 s steps: one node's 30 steps end at 3 h and reach 2.0 there, its
	// lowest; q2's second record, 40 steps at half speed, ends at 8 h and is
	// the first at or under 2.0.
	for _, want := range []string{"| one node (utilization 100.0 %) | 2.0000 | 3.00 | 3.00 |", "| q2, H = 20 (utilization 50.0 %) | 1.8000 | 8.00 | 8.00 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := os.Stat(svg); err != nil {
		t.Error(err)
	}
	if h := clockHours(3, 26, time.Second, 0.5); h != 78.0*2/3600 {
		t.Errorf("clockHours = %v", h)
	}
	for _, bad := range []string{"x", "a=" + file + "|c|1|single-1x-muon", "a=" + file + "|c|1|single-1x-muon@0", "a=" + file + "|c|1|single-1x-muon@1.5", "a=" + file + "|c|single-1x-muon@1"} {
		var c clockCurves
		if err := c.Set(bad); err == nil {
			t.Errorf("curve %q accepted", bad)
		}
	}
	if err := runClock([]string{"-curve", "a=" + file + "|c|2|single-1x-muon@1"}, &out); err == nil {
		t.Error("a run not in the file was accepted")
	}
}
