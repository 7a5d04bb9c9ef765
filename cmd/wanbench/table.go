package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// The pure half of `wanbench nodes`: reading the nodes' history.jsonl files,
// reducing them to one row per profile and mode, and printing the table.

// Limits on a history file: it is written by our own node, but read as
// untrusted input all the same.
const (
	maxHistoryLine    = 64 << 10 // bytes in one JSON line
	maxHistoryRecords = 100000   // lines in one file
)

// ErrHistory is returned for a history file that cannot be read.
var ErrHistory = errors.New("wanbench: bad history")

// record is the part of one node's outer-step record (node.OuterRecord, one
// JSON line of <home>/history.jsonl) that the table needs.
type record struct {
	Step          uint64  `json:"step"`
	Members       int     `json:"members"`
	AllReduceSec  float64 `json:"allreduce_sec"`
	ComputeSec    float64 `json:"compute_sec"`
	WallSec       float64 `json:"wall_sec"`
	Utilization   float64 `json:"utilization"`
	BytesSent     int64   `json:"bytes_sent"`
	BytesReceived int64   `json:"bytes_received"`
	Attempts      int     `json:"attempts"`
	ModelHash     string  `json:"model_hash"`
}

// parseHistory reads a history.jsonl stream: one JSON object per line, blank
// lines ignored, unknown fields ignored. Lines over maxHistoryLine bytes,
// more than maxHistoryRecords records, malformed JSON or impossible values
// (negative times or byte counts) are errors.
func parseHistory(r io.Reader) ([]record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxHistoryLine)
	var out []record
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		if len(out) == maxHistoryRecords {
			return nil, fmt.Errorf("%w: more than %d records", ErrHistory, maxHistoryRecords)
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrHistory, line, err)
		}
		if err := rec.check(); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrHistory, line, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHistory, err)
	}
	return out, nil
}

func (r record) check() error {
	for _, v := range []float64{r.AllReduceSec, r.ComputeSec, r.WallSec} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("time %v out of range", v)
		}
	}
	if r.BytesSent < 0 || r.BytesReceived < 0 || r.Members < 0 || r.Attempts < 0 {
		return errors.New("negative count")
	}
	return nil
}

// tableRow is one line of the table: one profile and mode.
type tableRow struct {
	Profile string
	Mode    string
	Nodes   int
	// Samples is the number of (node, outer step) records summarized.
	Samples int
	// AllReduceMedian and AllReduceP90 are over every node's measured steps, in s.
	AllReduceMedian, AllReduceP90 float64
	// Utilization is Σ compute / Σ wall over the measured steps of every node, in [0, 1].
	Utilization float64
	// BytesPerNode is the median of the bytes one node sent in one outer step.
	BytesPerNode float64
	// Note is printed after the table (e.g. "latency-bound"); not a column.
	Note string
}

// summarize reduces the histories of the nodes of one run (one slice per
// node) to a tableRow, dropping every step ≤ warmup. Steps with fewer than
// minMembers members (a ring formed before everybody joined, or after one
// left) are dropped too, so that every row describes the full ring.
func summarize(profile, mode string, nodes [][]record, warmup uint64, minMembers int) (tableRow, error) {
	rw := tableRow{Profile: profile, Mode: mode, Nodes: len(nodes)}
	var ar, bytes []float64
	var compute, wall float64
	for _, recs := range nodes {
		for _, r := range recs {
			if r.Step <= warmup || r.Members < minMembers {
				continue
			}
			ar = append(ar, r.AllReduceSec)
			bytes = append(bytes, float64(r.BytesSent))
			compute += r.ComputeSec
			wall += r.WallSec
		}
	}
	if len(ar) == 0 || wall <= 0 {
		return rw, fmt.Errorf("%w: %s/%s: no outer step after warm-up %d with %d members", ErrHistory, profile, mode, warmup, minMembers)
	}
	rw.Samples = len(ar)
	rw.AllReduceMedian = quantile(ar, 0.5)
	rw.AllReduceP90 = quantile(ar, 0.9)
	rw.Utilization = compute / wall
	rw.BytesPerNode = quantile(bytes, 0.5)
	return rw, nil
}

// largestRing is the most members any ring had after the warm-up, 0 if none.
func largestRing(nodes [][]record, warmup uint64) int {
	k := 0
	for _, recs := range nodes {
		for _, r := range recs {
			if r.Step > warmup {
				k = max(k, r.Members)
			}
		}
	}
	return k
}

// relativeNotes says, per profile with a nocomm row, each mode's utilization
// as a fraction of the nocomm node's: the share of the local ceiling (sim
// compute plus this machine's CPU overheads) that communication left.
func relativeNotes(rows []tableRow) []string {
	ref := map[string]float64{}
	for _, r := range rows {
		if r.Mode == modeNocomm {
			ref[r.Profile] = r.Utilization
		}
	}
	var out []string
	for _, r := range rows {
		if u, ok := ref[r.Profile]; ok && r.Mode != modeNocomm && u > 0 {
			out = append(out, fmt.Sprintf("%s %s: utilization %.2f %% of nocomm's %.2f %% = %.3f", r.Profile, r.Mode, 100*r.Utilization, 100*u, r.Utilization/u))
		}
	}
	return out
}

// quantile returns the q-quantile (0 ≤ q ≤ 1) of xs by linear interpolation
// between closest ranks (the "R-7" definition of R and NumPy's default); xs is
// not modified. It is NaN for an empty slice.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

// tableHeader is the header line of the table, in the order of formatRow.
var tableHeader = []string{"profile", "mode", "nodes", "allreduce_median_s", "allreduce_p90_s", "utilization_pct", "bytes_per_node"}

// formatRow renders a row's fields as the table prints them.
func formatRow(r tableRow) []string {
	return []string{r.Profile, r.Mode, fmt.Sprint(r.Nodes), fmt.Sprintf("%.3f", r.AllReduceMedian),
		fmt.Sprintf("%.3f", r.AllReduceP90), fmt.Sprintf("%.2f", 100*r.Utilization), fmt.Sprintf("%.0f", r.BytesPerNode)}
}

// writeTable prints the header and one line per tableRow, columns aligned with
// spaces; nothing follows the last row.
func writeTable(w io.Writer, rows []tableRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(formatRow(r), "\t"))
	}
	return tw.Flush()
}
