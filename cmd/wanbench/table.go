package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/intellect-node/intellect-node/internal/results"
	"github.com/intellect-node/intellect-node/node"
)

// The pure half of `wanbench nodes`: reducing the nodes' histories
// (node.ReadHistory of each home) to one row per profile and mode, and
// printing the table.

// ErrHistory is returned when the nodes' histories hold no step to summarize.
var ErrHistory = errors.New("wanbench: bad history")

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
func summarize(profile, mode string, nodes [][]node.OuterRecord, warmup uint64, minMembers int) (tableRow, error) {
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
func largestRing(nodes [][]node.OuterRecord, warmup uint64) int {
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

// utilizationTarget is the overlapped utilization the benchmark is held to.
const utilizationTarget = 0.99

// resultRows turns the table into rows of docs/results.md: per profile, the
// overlapped modes' utilization against utilizationTarget (with the same
// run's nocomm ceiling) and the blocking all-reduce time. Command, commit,
// machine and date are the caller's to stamp.
func resultRows(rows []tableRow) []results.Row {
	nocomm := map[string]float64{}
	for _, r := range rows {
		if r.Mode == modeNocomm {
			nocomm[r.Profile] = r.Utilization
		}
	}
	var out []results.Row
	for _, r := range rows {
		switch r.Mode {
		case modeOverlapped, modeOrder:
			measured := fmt.Sprintf("%.2f %%", 100*r.Utilization)
			if u, ok := nocomm[r.Profile]; ok {
				measured += fmt.Sprintf(" (no-comm node %.2f %%)", 100*u)
			}
			out = append(out, results.Row{Figure: fmt.Sprintf("%s utilization, %s, %d nodes", r.Mode, r.Profile, r.Nodes),
				Target: fmt.Sprintf("≥ %.0f %%", 100*utilizationTarget), Measured: measured,
				Met: map[bool]string{true: "yes", false: "no"}[r.Utilization >= utilizationTarget], Page: "wan.md"})
		case modeBlocking:
			out = append(out, results.Row{Figure: fmt.Sprintf("blocking all-reduce time, %s, %d nodes", r.Profile, r.Nodes),
				Measured: fmt.Sprintf("median %.3f s, p90 %.3f s; utilization %.2f %%", r.AllReduceMedian, r.AllReduceP90, 100*r.Utilization),
				Page:     "wan.md"})
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
