package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/node"
)

// historyLine is one node.OuterRecord line as the node writes it.
const historyLine = `{"step":%d,"time":"2026-11-22T02:39:41.288157039Z","members":%d,"loss":0.36,"eval_loss":0.29,` +
	`"allreduce_sec":%g,"compute_sec":%g,"wall_sec":%g,"utilization":0.67,"bytes_sent":%d,"bytes_received":19206868,"model_hash":"b42b","attempts":1}`

func line(step, members int, ar, compute, wall float64, sent int64) string {
	return fmt.Sprintf(historyLine, step, members, ar, compute, wall, sent)
}

// The node's history lines, read by node.DecodeHistory, summarize as the
// table expects.
func TestSummarizeNodeHistory(t *testing.T) {
	in := line(0, 0, 0, 0, 0, 0) + "\n" + line(1, 4, 3.14, 12.5, 18.7, 19206868) + "\n\n" + line(2, 4, 1.25, 11.2, 13.9, 19206000) + "\n"
	recs, err := node.DecodeHistory(strings.NewReader(in))
	if err != nil || len(recs) != 3 {
		t.Fatalf("got %d records, %v", len(recs), err)
	}
	if r := recs[1]; r.Step != 1 || r.Members != 4 || r.AllReduceSec != 3.14 || r.BytesReceived != 19206868 || r.Attempts != 1 || r.ModelHash != "b42b" {
		t.Errorf("record 1 = %+v", r)
	}
	r, err := summarize("usa", modeBlocking, [][]node.OuterRecord{recs}, 0, 4)
	if err != nil || r.Samples != 2 || math.Abs(r.Utilization-(12.5+11.2)/(18.7+13.9)) > 1e-12 {
		t.Fatalf("summary %+v, %v", r, err)
	}
}

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3} // sorted: 1 2 3 4 5
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {0.9, 4.6}, {1, 5}, {0.25, 2}} {
		if got := quantile(xs, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Error("quantile sorted its input")
	}
	if got := quantile([]float64{1, 2, 3, 4}, 0.5); got != 2.5 {
		t.Errorf("even median = %v, want 2.5", got)
	}
	if !math.IsNaN(quantile(nil, 0.5)) {
		t.Error("quantile of nothing is not NaN")
	}
}

func TestSummarize(t *testing.T) {
	a := []node.OuterRecord{
		{Step: 1, Members: 4, AllReduceSec: 100, ComputeSec: 10, WallSec: 200, BytesSent: 1}, // warm-up: dropped
		{Step: 2, Members: 4, AllReduceSec: 1, ComputeSec: 10, WallSec: 11, BytesSent: 300},
		{Step: 3, Members: 4, AllReduceSec: 2, ComputeSec: 10, WallSec: 12, BytesSent: 100},
	}
	b := []node.OuterRecord{
		{Step: 2, Members: 3, AllReduceSec: 50, ComputeSec: 10, WallSec: 90, BytesSent: 7}, // ring without everyone: dropped
		{Step: 3, Members: 4, AllReduceSec: 3, ComputeSec: 10, WallSec: 13, BytesSent: 200},
	}
	r, err := summarize("usa", modeBlocking, [][]node.OuterRecord{a, b}, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.Nodes != 2 || r.Samples != 3 {
		t.Errorf("nodes %d samples %d, want 2 and 3", r.Nodes, r.Samples)
	}
	if r.AllReduceMedian != 2 || math.Abs(r.AllReduceP90-2.8) > 1e-12 {
		t.Errorf("all-reduce median %v p90 %v, want 2 and 2.8", r.AllReduceMedian, r.AllReduceP90)
	}
	if want := 30.0 / 36; math.Abs(r.Utilization-want) > 1e-12 {
		t.Errorf("utilization %v, want %v", r.Utilization, want)
	}
	if r.BytesPerNode != 200 {
		t.Errorf("bytes per node %v, want 200", r.BytesPerNode)
	}
	if _, err := summarize("usa", modeBlocking, [][]node.OuterRecord{a}, 3, 4); !errors.Is(err, ErrHistory) {
		t.Errorf("all steps in warm-up: err = %v, want ErrHistory", err)
	}
}

func TestWriteTable(t *testing.T) {
	rows := []tableRow{
		{Profile: "usa", Mode: modeBlocking, Nodes: 4, AllReduceMedian: 1.3374, AllReduceP90: 2.2281, Utilization: 0.68051, BytesPerNode: 19206868},
		{Profile: "usa-europe", Mode: modeNocomm, Nodes: 1, AllReduceMedian: 0.058, AllReduceP90: 0.064, Utilization: 0.9565, BytesPerNode: 0},
	}
	var b bytes.Buffer
	if err := writeTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("table has %d lines, want 3:\n%s", len(lines), b.String())
	}
	want := [][]string{tableHeader,
		{"usa", "blocking", "4", "1.337", "2.228", "68.05", "19206868"},
		{"usa-europe", "nocomm", "1", "0.058", "0.064", "95.65", "0"}}
	for i, l := range lines {
		if got := strings.Fields(l); strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d = %q, want fields %q", i, l, want[i])
		}
	}
	// Columns are aligned: every field of a column starts at the same offset.
	if strings.Index(lines[1], "blocking") != strings.Index(lines[0], "mode") {
		t.Errorf("columns not aligned:\n%s", b.String())
	}
}

func TestUtilizationSVG(t *testing.T) {
	rows := []tableRow{
		{Profile: "usa", Mode: modeBlocking, Utilization: 0.9},
		{Profile: "usa", Mode: modeNocomm, Utilization: 0.99},
		{Profile: "global<x>", Mode: modeOverlapped, Utilization: 0.2},
	}
	var b bytes.Buffer
	if err := utilizationSVG(&b, rows); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"<svg", "</svg>", "usa blocking 90.00 %", "usa nocomm 99.00 %", "usa intellect-1 95.70 %", "global&lt;x&gt; overlapped 20.00 %"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if strings.Contains(s, "<x>") {
		t.Error("profile name not escaped")
	}
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
}

func FuzzSummarize(f *testing.F) {
	f.Add([]byte(line(1, 4, 3.14, 12.5, 18.7, 19206868) + "\n"))
	f.Add([]byte("{}\n\n{\"step\":2}"))
	f.Add([]byte("{\"wall_sec\":1e-300,\"members\":1,\"step\":1}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := node.DecodeHistory(bytes.NewReader(b))
		if err != nil {
			return
		}
		if r, err := summarize("p", "m", [][]node.OuterRecord{recs}, 0, 0); err == nil {
			if math.IsNaN(r.Utilization) || math.IsNaN(r.AllReduceMedian) || r.AllReduceP90 < r.AllReduceMedian {
				t.Fatalf("bad summary %+v of %+v", r, recs)
			}
		}
	})
}

func TestLargestRingAndRelative(t *testing.T) {
	nodes := [][]node.OuterRecord{{{Step: 1, Members: 6}, {Step: 2, Members: 4}}, {{Step: 3, Members: 3}}}
	if k := largestRing(nodes, 1); k != 4 {
		t.Errorf("largest ring after warm-up = %d, want 4", k)
	}
	if k := largestRing(nodes, 3); k != 0 {
		t.Errorf("largest ring with everything in warm-up = %d, want 0", k)
	}
	notes := relativeNotes([]tableRow{
		{Profile: "usa", Mode: modeBlocking, Utilization: 0.45},
		{Profile: "usa", Mode: modeNocomm, Utilization: 0.9},
		{Profile: "global", Mode: modeBlocking, Utilization: 0.5}, // no reference: no note
	})
	if len(notes) != 1 || !strings.HasSuffix(notes[0], "= 0.500") || !strings.HasPrefix(notes[0], "usa blocking") {
		t.Errorf("notes = %q", notes)
	}
}

// TestResultRows: one results.md row per overlapped mode, held to 99 % with
// the same profile's no-comm ceiling beside it, and one per blocking run.
func TestResultRows(t *testing.T) {
	rows := []tableRow{
		{Profile: "usa", Mode: modeBlocking, Nodes: 4, AllReduceMedian: 0.72, AllReduceP90: 0.85, Utilization: 0.95},
		{Profile: "usa", Mode: modeNocomm, Nodes: 1, Utilization: 0.9905},
		{Profile: "usa", Mode: modeOverlapped, Nodes: 4, Utilization: 0.9915},
		{Profile: "global", Mode: modeOrder, Nodes: 6, Utilization: 0.987},
	}
	got := resultRows(rows)
	if len(got) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(got), got)
	}
	if r := got[1]; r.Figure != "overlapped utilization, usa, 4 nodes" || r.Met != "yes" || r.Measured != "99.15 % (no-comm node 99.05 %)" {
		t.Errorf("usa overlapped: %+v", r)
	}
	if r := got[2]; r.Met != "no" || r.Measured != "98.70 %" {
		t.Errorf("global overlapped+order: %+v", r)
	}
	if r := got[0]; r.Target != "" || !strings.HasPrefix(r.Measured, "median 0.720 s, p90 0.850 s") {
		t.Errorf("usa blocking: %+v", r)
	}
}
