package soak

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/intellect-node/intellect-node/internal/results"
)

// The soak's pass/fail thresholds (docs/soak.md).
const (
	// MaxStall: no outer step anywhere for longer than this while at least
	// two running members are connected fails the soak.
	MaxStall = 60 * time.Second
	// MinPaceRatio: outer steps per minute under faults over the fault-free
	// pace of the same run.
	MinPaceRatio = 0.5
	// MinSlopeSpan: resource slopes are judged only when the last half of
	// the run is at least this long (shorter halves are noise).
	MinSlopeSpan = 10 * time.Minute
	// StuckSteps: a member that makes no step in the quiet phase while the
	// network makes this many is stuck.
	StuckSteps = 3
)

// Resource is a per-process figure sampled from a member's /metrics.
type Resource struct {
	// Metric is the Prometheus name; Unit divides values for printing.
	Metric, Label string
	Unit          float64
	// Floor and Frac: growth over the last half, per hour, may not exceed
	// max(Floor, Frac × the mean) (in Metric's units).
	Floor, Frac float64
}

// Resources are the figures whose slopes the soak checks.
var Resources = []Resource{
	{Metric: "go_goroutines", Label: "goroutines", Unit: 1, Floor: 100, Frac: 0.25},
	{Metric: "process_open_fds", Label: "fds", Unit: 1, Floor: 20, Frac: 0.25},
	{Metric: "process_resident_memory_bytes", Label: "RSS MiB", Unit: 1 << 20, Floor: 64 << 20, Frac: 0.25},
	// The Go heap in use: what a leak of the node's own grows, apart from
	// the runtime's and the race detector's memory that RSS counts too.
	{Metric: "go_memstats_heap_inuse_bytes", Label: "heap MiB", Unit: 1 << 20, Floor: 32 << 20, Frac: 0.25},
}

// PartitionRecord is one partition as injected.
type PartitionRecord struct {
	At, Healed time.Duration
	Side       []string // the minority side's members
	HealTime   time.Duration
	Healed1    bool // the sides were seen back on one model (HealTime valid)
}

// Resume is one restart of a killed member with its home.
type Resume struct {
	Member string
	At     time.Duration
	// Checkpoint is the newest complete checkpoint's step when it was
	// killed; HasCheckpoint false when it had written none yet.
	Checkpoint    uint64
	HasCheckpoint bool
	// FirstStep is the step of its first status after the restart.
	FirstStep uint64
	// Unchecked: the harness stopped or killed the restarted member
	// before it served a status, so nothing was checked.
	Unchecked bool
	// Err says why it did not resume (empty when it did).
	Err string
}

// Report is what a soak observed, and its verdict.
type Report struct {
	Seed                    uint64
	Baseline, Faults, Quiet Interval
	HealWindow              time.Duration
	Setup                   string // device, preset, H, members: one line
	Injected, Skipped       map[Kind]int
	Samples                 []Sample
	Ticks                   []Tick
	// Windows are the network disturbances (partitions, flaps, rate drops)
	// and the members' restarts.
	Windows    []Window
	Partitions []PartitionRecord
	Resumes    []Resume
	// Usage[member][metric] are the long-lived members' resource readings.
	Usage map[string]map[string][]Point
	// Findings are the log lines counted against members, by member;
	// Explained counts those that injected faults explain, by reason.
	Findings  map[string][]Finding
	Explained map[string]int
	// Failures are what the runner saw fail (an exit nobody asked for, a
	// leave that hung, a joiner never synced…).
	Failures []string
	// Notes are printed, not judged.
	Notes []string
}

// Verdict returns every reason the soak fails; none means it passed.
func (r *Report) Verdict() []string {
	var out []string
	for _, s := range Splits(r.Samples, r.Windows, r.HealWindow) {
		if !s.Excused {
			out = append(out, fmt.Sprintf("outer step %d: %s has %.12s and %s has %.12s (seen at %v and %v), outside every partition and restart and their heal windows",
				s.Step, s.A, s.HashA, s.B, s.HashB, s.SeenA.Round(time.Second), s.SeenB.Round(time.Second)))
		}
	}
	out = append(out, r.finalFailures()...)
	if g := r.longestStall(); g.Linked > MaxStall {
		out = append(out, fmt.Sprintf("no outer step from %v to %v with members connected for %v (> %v)", g.From.Round(time.Second), g.To.Round(time.Second), g.Linked.Round(time.Second), MaxStall))
	}
	if base, faults := Pace(r.Samples, r.Baseline), Pace(r.Samples, r.Faults); faults < MinPaceRatio*base {
		out = append(out, fmt.Sprintf("pace under faults %.2f outer steps/min < %.1f × the fault-free %.2f", faults, MinPaceRatio, base))
	}
	for _, rs := range r.Resumes {
		if rs.Err != "" {
			out = append(out, fmt.Sprintf("%s did not resume from its home at %v: %s", rs.Member, rs.At.Round(time.Second), rs.Err))
		}
	}
	out = append(out, r.slopeFailures()...)
	for _, m := range slices.Sorted(mapKeys(r.Findings)) {
		for _, f := range r.Findings[m] {
			out = append(out, fmt.Sprintf("%s log line %d (%s): %s", m, f.Number, f.What, f.Short()))
		}
	}
	return append(out, r.Failures...)
}

// finalStretch is the end of the quiet phase from a heal window after the
// last disturbance or restart ended: every member must hold one model
// then, with no excuse. Empty when the quiet phase is too short for it.
func (r *Report) finalStretch() Interval {
	from := r.Quiet.From + r.HealWindow
	for _, w := range r.Windows {
		from = max(from, w.To+r.HealWindow)
	}
	return Interval{min(from, r.Quiet.To), r.Quiet.To}
}

// finalFailures: at the end every pair of members at one step holds one
// model, with no excuse, and no member sat through the quiet phase
// without a step while the others made StuckSteps.
func (r *Report) finalFailures() []string {
	var out []string
	fin := r.finalStretch()
	var last []Sample
	for _, s := range r.Samples {
		if fin.From < fin.To && (fin.Contains(s.T) || s.T == fin.To) {
			last = append(last, s)
		}
	}
	for _, s := range Splits(last, nil, 0) {
		out = append(out, fmt.Sprintf("at the end (after %v): outer step %d: %s has %.12s and %s has %.12s",
			fin.From.Round(time.Second), s.Step, s.A, s.HashA, s.B, s.HashB))
	}
	for _, m := range Stuck(r.Samples, r.Quiet, StuckSteps) {
		out = append(out, fmt.Sprintf("%s made no outer step in the quiet phase while the others made %d or more", m, StuckSteps))
	}
	return out
}

// longestStall is the gap of the fault and quiet phases with the most
// time with members connected.
func (r *Report) longestStall() Gap {
	var worst Gap
	for _, g := range Gaps(r.Samples, r.Ticks, Interval{r.Baseline.From, r.Quiet.To}) {
		if g.Linked > worst.Linked {
			worst = g
		}
	}
	return worst
}

func (r *Report) slopeFailures() []string {
	var out []string
	if r.Quiet.To-r.Baseline.From < 2*MinSlopeSpan {
		return nil
	}
	for _, m := range slices.Sorted(mapKeys(r.Usage)) {
		for _, res := range Resources {
			slope, mean, ok := Slope(r.Usage[m][res.Metric])
			if limit := max(res.Floor, res.Frac*mean); ok && slope > limit {
				out = append(out, fmt.Sprintf("%s: %s grow by %.1f per hour over the last half (limit %.1f, mean %.1f)",
					m, res.Label, slope/res.Unit, limit/res.Unit, mean/res.Unit))
			}
		}
	}
	return out
}

// Write prints the soak's table: faults injected by kind, steps made,
// longest gap, heal times, resumes, resource slopes, log findings, then
// the verdict.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "\nsoak: seed %d; %s\n", r.Seed, r.Setup)
	fmt.Fprintf(w, "phases: fault-free %v, faults %v, quiet %v (heal window %v)\n\n",
		dur(r.Baseline), dur(r.Faults), dur(r.Quiet), r.HealWindow)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tinjected\tskipped")
	for _, k := range Kinds() {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", k, r.Injected[k], r.Skipped[k])
	}
	tw.Flush()
	base, faults := Pace(r.Samples, r.Baseline), Pace(r.Samples, r.Faults)
	g := r.longestStall()
	fmt.Fprintf(w, "\nouter steps: %d in all; fault-free %.2f/min, under faults %.2f/min (%.2f×, target ≥ %.1f)\n",
		MaxStep(r.Samples, r.Quiet.To), base, faults, faults/base, MinPaceRatio)
	fmt.Fprintf(w, "longest gap without an outer step: %v (%v to %v), %v of it with members connected (limit %v)\n",
		(g.To - g.From).Round(time.Second), g.From.Round(time.Second), g.To.Round(time.Second), g.Linked.Round(time.Second), MaxStall)
	fmt.Fprintf(w, "partitions: %s\n", r.healLine())
	fmt.Fprintf(w, "splits: %s\n", r.splitLine())
	fmt.Fprintf(w, "resumes after kill -9: %s\n", r.resumeLine())
	r.writeSlopes(w)
	fmt.Fprintf(w, "logs: %s\n", r.logLine())
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if v := r.Verdict(); len(v) > 0 {
		fmt.Fprintf(w, "\nFAIL (%d):\n  %s\n", len(v), strings.Join(v, "\n  "))
	} else {
		fmt.Fprintln(w, "\nPASS")
	}
}

func dur(iv Interval) time.Duration { return (iv.To - iv.From).Round(time.Second) }

// HealTimes returns the heal times of the partitions whose sides were seen
// back on one model, sorted.
func (r *Report) HealTimes() []time.Duration {
	var hs []time.Duration
	for _, p := range r.Partitions {
		if p.Healed1 {
			hs = append(hs, p.HealTime)
		}
	}
	slices.Sort(hs)
	return hs
}

func (r *Report) healLine() string {
	hs := r.HealTimes()
	if len(hs) == 0 {
		return fmt.Sprintf("%d, none seen back on one model after its heal", len(r.Partitions))
	}
	return fmt.Sprintf("%d; sides back on one model %v (median) %v (max) after the heal, %d of %d seen",
		len(r.Partitions), hs[len(hs)/2].Round(100*time.Millisecond), hs[len(hs)-1].Round(100*time.Millisecond), len(hs), len(r.Partitions))
}

func (r *Report) splitLine() string {
	in, out := 0, 0
	for _, s := range Splits(r.Samples, r.Windows, r.HealWindow) {
		if s.Excused {
			in++
		} else {
			out++
		}
	}
	return fmt.Sprintf("%d pairs of models at one step within a partition's or restart's heal window (allowed), %d outside (must be 0)", in, out)
}

func (r *Report) resumeLine() string {
	var fromCkpt, fresh, failed, unchecked int
	for _, rs := range r.Resumes {
		switch {
		case rs.Err != "":
			failed++
		case rs.Unchecked:
			unchecked++
		case rs.HasCheckpoint:
			fromCkpt++
		default:
			fresh++
		}
	}
	return fmt.Sprintf("%d; %d from their newest checkpoint, %d before their first checkpoint, %d stopped before their first status, %d failed",
		len(r.Resumes), fromCkpt, fresh, unchecked, failed)
}

func (r *Report) writeSlopes(w io.Writer) {
	judged := r.Quiet.To-r.Baseline.From >= 2*MinSlopeSpan
	fmt.Fprintf(w, "resource slopes over the last half, per hour (judged: %v):\n", judged)
	for _, m := range slices.Sorted(mapKeys(r.Usage)) {
		var parts []string
		for _, res := range Resources {
			if slope, mean, ok := Slope(r.Usage[m][res.Metric]); ok {
				parts = append(parts, fmt.Sprintf("%s %+.1f/h (mean %.1f)", res.Label, slope/res.Unit, mean/res.Unit))
			}
		}
		if len(parts) == 0 {
			parts = []string{"too few readings"}
		}
		fmt.Fprintf(w, "  %s: %s\n", m, strings.Join(parts, ", "))
	}
}

func (r *Report) logLine() string {
	count := map[string]int{}
	for _, fs := range r.Findings {
		for _, f := range fs {
			count[f.What]++
		}
	}
	exp := "none"
	if len(r.Explained) > 0 {
		var parts []string
		for _, why := range slices.Sorted(mapKeys(r.Explained)) {
			parts = append(parts, fmt.Sprintf("%d %s", r.Explained[why], why))
		}
		exp = strings.Join(parts, ", ")
	}
	return fmt.Sprintf("panics %d, races %d, fatal %d, unexplained errors %d; errors explained by faults: %s",
		count["panic"], count["race"], count["fatal"], count["error"], exp)
}

// Rows returns the soak's figures as rows of docs/results.md (command,
// commit, machine and date left for results.Stamp).
func (r *Report) Rows() []results.Row {
	base, faults := Pace(r.Samples, r.Baseline), Pace(r.Samples, r.Faults)
	g := r.longestStall()
	out := 0
	for _, s := range Splits(r.Samples, r.Windows, r.HealWindow) {
		if !s.Excused {
			out++
		}
	}
	met := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	minutes := dur(Interval{r.Baseline.From, r.Quiet.To})
	hs := r.HealTimes()
	heal := "none seen"
	if len(hs) > 0 {
		heal = fmt.Sprintf("median %v, max %v", hs[len(hs)/2].Round(100*time.Millisecond), hs[len(hs)-1].Round(100*time.Millisecond))
	}
	v := r.Verdict()
	return []results.Row{
		{Figure: fmt.Sprintf("soak %v, seed %d: members at one step with different models after the heal window", minutes, r.Seed),
			Target: "none", Measured: fmt.Sprintf("%d (%d partitions; sides on one model again %s after the heal)", out, len(r.Partitions), heal), Met: met(out == 0), Page: "soak.md"},
		{Figure: "soak: longest time without an outer step while ≥ 2 members are connected", Target: "≤ 60 s",
			Measured: fmt.Sprintf("%v (gap %v)", g.Linked.Round(time.Second), (g.To - g.From).Round(time.Second)), Met: met(g.Linked <= MaxStall), Page: "soak.md"},
		{Figure: "soak: outer steps per minute under faults vs fault-free, same run", Target: "≥ 0.5×",
			Measured: fmt.Sprintf("%.2f× (%.2f vs %.2f/min)", faults/base, faults, base), Met: met(faults >= MinPaceRatio*base), Page: "soak.md"},
		{Figure: "soak: every check (resumes, resource slopes, logs, exits)", Target: "pass",
			Measured: fmt.Sprintf("%d failures; %s", len(v), r.resumeLine()), Met: met(len(v) == 0), Page: "soak.md"},
	}
}
