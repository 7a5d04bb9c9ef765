package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/intellect-node/intellect-node/internal/nat"
	"github.com/intellect-node/intellect-node/internal/results"
	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/train"
)

// The targets the NAT lab checks (docs/nat.md).
const (
	directWithin     = 10 * time.Second // a cone pair must connect directly this soon after joining
	directTarget     = 0.95             // … in at least this fraction of cone pairs
	utilTolerance    = 0.05             // NAT utilization and all-reduce time within 5 % of no-NAT
	relayBudgetBytes = 1 << 20          // relayed bytes per outer step
)

// pairResult is one pair of members in one run.
type pairResult struct {
	I, J   int
	Kinds  [2]nat.Kind
	Delay  time.Duration // to a direct connection after the later joined
	Direct bool          // it connected directly at all
}

// runResult is what one run of one case produced.
type runResult struct {
	Case       caseSpec
	Run        int
	Dir        string
	Wall       time.Duration
	Err        error
	Hist       histSummary
	Pairs      []pairResult
	RelayBytes float64 // relayCount.Streams: the figure
	RelaySvc   float64 // relayCount.Service: go-libp2p's count, a cross-check
	Notes      []string
}

// collect reads the members' histories and turns the run's observations
// into res. It runs after the lab is closed.
func (r *labRun) collect(res *runResult) {
	var hists [][]node.OuterRecord
	var final []int
	for i, m := range r.members {
		recs, err := node.ReadHistory(m.home)
		if err != nil {
			r.note("%s: history: %v", m.name, err)
		}
		hists = append(hists, withEndModel(recs, endModel(m.home, m.statusJSON)))
		if !(r.cs.Event == leave && i == r.cs.EventSite) {
			final = append(final, i)
		}
		r.savePeers(m, "end")
		r.note("%s", r.peerLines(m))
	}
	if r.metrics != nil {
		os.WriteFile(filepath.Join(r.dir, r.members[0].name+".metrics.txt"), r.metrics, 0o644)
	}
	res.Hist = summarizeHistories(hists, final, r.c.Warmup, len(final))
	res.RelayBytes, res.RelaySvc = r.relay.Streams, r.relay.Service
	for i := range r.members {
		for j := i + 1; j < len(r.members); j++ {
			d, ok := r.pairs.delay(i, j)
			res.Pairs = append(res.Pairs, pairResult{I: i, J: j, Kinds: [2]nat.Kind{r.cs.Kinds[i], r.cs.Kinds[j]}, Delay: d, Direct: ok})
		}
	}
	res.Notes = r.notes
}

// endModel returns, as a status JSON, the model a member ended with: the
// step and hash of the checkpoint it wrote at exit (node.json), else its
// last /v1/status (which may predate a sync finished just before exit).
func endModel(home string, statusJSON []byte) []byte {
	dir, err := train.ResolveCheckpoint(filepath.Join(home, "checkpoints"))
	if err != nil {
		return statusJSON
	}
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if err != nil {
		return statusJSON
	}
	var nj struct {
		Step uint64 `json:"step"`
		Hash string `json:"hash"`
	}
	if json.Unmarshal(b, &nj) != nil || nj.Hash == "" {
		return statusJSON
	}
	out, _ := json.Marshal(node.Status{OuterStep: nj.Step, ModelHash: nj.Hash})
	return out
}

// withEndModel adds to a member's history the model it ended with (a
// status JSON, endModel), when that is a later step: a member that only
// syncs (left out of every ring behind a symmetric NAT) records no outer
// step of its own, yet ends holding the network's model. Members 0: not a
// step it reduced.
func withEndModel(recs []node.OuterRecord, statusJSON []byte) []node.OuterRecord {
	var st node.Status
	if json.Unmarshal(statusJSON, &st) != nil || st.ModelHash == "" {
		return recs
	}
	if n := len(recs); n > 0 && recs[n-1].Step >= st.OuterStep {
		return recs
	}
	return append(recs, node.OuterRecord{Step: st.OuterStep, ModelHash: st.ModelHash})
}

// relayPerStep is the relayed bytes divided by the outer steps reached.
func (res runResult) relayPerStep() float64 {
	return res.RelayBytes / float64(max(res.Hist.MaxStep, 1))
}

// hashes says whether the members ended with the same model.
func (res runResult) hashes() string {
	h := res.Hist
	switch {
	case h.CommonStep == 0:
		return "no common step"
	case h.Identical && len(h.Splits) == 0:
		return fmt.Sprintf("identical (step %d)", h.CommonStep)
	case h.Identical:
		return fmt.Sprintf("identical at %d, split at %v", h.CommonStep, h.Splits)
	default:
		return fmt.Sprintf("DIFFER at %d (splits %v)", h.CommonStep, h.Splits)
	}
}

// directSummary is e.g. "5/6, slowest 1.2s" over every pair of the run.
func (res runResult) directSummary() string {
	n, slowest := 0, time.Duration(0)
	for _, p := range res.Pairs {
		if p.Direct {
			n++
			slowest = max(slowest, p.Delay)
		}
	}
	s := fmt.Sprintf("%d/%d", n, len(res.Pairs))
	if n > 0 {
		s += fmt.Sprintf(", slowest %.1fs", slowest.Seconds())
	}
	return s
}

func (res runResult) oneLine() string {
	s := fmt.Sprintf("steps %d–%d, ring ≤ %d, hashes %s, direct pairs %s, relayed %.0f B (relay service: %.0f B), %.0fs",
		res.Hist.MinStep, res.Hist.MaxStep, res.Hist.MaxRing, res.hashes(), res.directSummary(), res.RelayBytes, res.RelaySvc, res.Wall.Seconds())
	if res.Err != nil {
		s += fmt.Sprintf(" — %v (logs: %s)", res.Err, res.Dir)
	}
	return s
}

// report is the figures over every run.
type report struct {
	c       config
	results []runResult
	figures []figure
}

// figure is one target with what was measured.
type figure struct {
	Name, Target, Measured string
	OK                     bool
}

func newReport(c config, runs []runResult) *report {
	rp := &report{c: c, results: runs}
	rp.figures = []figure{rp.coneDirect(), rp.versusNoNAT(), rp.relay(), rp.identical()}
	return rp
}

// coneDirect: cone–cone pairs direct within directWithin, over every run,
// with the median and slowest time to a direct connection.
func (rp *report) coneDirect() figure {
	var delays []float64
	n, ok := 0, 0
	for _, res := range rp.results {
		for _, p := range res.Pairs {
			if p.Kinds != [2]nat.Kind{nat.Cone, nat.Cone} {
				continue
			}
			n++
			if p.Direct {
				delays = append(delays, p.Delay.Seconds())
				ok += btoi(p.Delay <= directWithin)
			}
		}
	}
	f := figure{Name: "cone NAT pairs direct ≤ 10 s after joining", Target: "≥ 95 %"}
	if n == 0 {
		f.Measured = "no cone pair run"
		return f
	}
	frac := float64(ok) / float64(n)
	f.Measured, f.OK = fmt.Sprintf("%.0f %% (%d/%d)", 100*frac, ok, n), frac >= directTarget
	if len(delays) > 0 {
		f.Measured += fmt.Sprintf("; direct after median %.1f s, slowest %.1f s", median(delays), slices.Max(delays))
	}
	return f
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// versusNoNAT: case a's utilization and all-reduce time against nonat's.
func (rp *report) versusNoNAT() figure {
	f := figure{Name: "case a vs no-NAT: utilization, all-reduce time", Target: "within 5 %"}
	base, nb := rp.mean("nonat")
	natted, na := rp.mean("a")
	if nb == 0 || na == 0 || math.IsNaN(base.Utilization+natted.Utilization) {
		f.Measured = "no full-ring steps to compare"
		return f
	}
	du := natted.Utilization/base.Utilization - 1
	da := natted.AllReduceSec/base.AllReduceSec - 1
	f.Measured = fmt.Sprintf("util %.3f vs %.3f (%+.1f %%), all-reduce %.3fs vs %.3fs (%+.1f %%)",
		natted.Utilization, base.Utilization, 100*du, natted.AllReduceSec, base.AllReduceSec, 100*da)
	f.OK = du >= -utilTolerance && da <= utilTolerance
	return f
}

// mean averages the utilization and all-reduce time over a case's runs
// that had full-ring steps, and returns how many did.
func (rp *report) mean(name string) (histSummary, int) {
	var s histSummary
	n := 0
	for _, res := range rp.results {
		if res.Case.Name == name && res.Hist.Samples > 0 {
			s.Utilization += res.Hist.Utilization
			s.AllReduceSec += res.Hist.AllReduceSec
			n++
		}
	}
	if n > 0 {
		s.Utilization /= float64(n)
		s.AllReduceSec /= float64(n)
	}
	return s, n
}

// relay: the most relayed bytes per outer step in any run.
func (rp *report) relay() figure {
	worst := 0.0
	for _, res := range rp.results {
		worst = max(worst, res.relayPerStep())
	}
	return figure{Name: "bytes through the relay per outer step (worst run)", Target: "< 1 MiB",
		Measured: fmt.Sprintf("%.1f KiB", worst/1024), OK: worst < relayBudgetBytes && len(rp.results) > 0}
}

// identical: every run ended with one model on its members.
func (rp *report) identical() figure {
	ok, n := 0, 0
	for _, res := range rp.results {
		n++
		if res.Hist.Identical && res.Hist.MinStep >= 1 && res.Err == nil {
			ok++
		}
	}
	return figure{Name: "runs ending with identical hashes, all steps done", Target: "all",
		Measured: fmt.Sprintf("%d/%d", ok, n), OK: n > 0 && ok == n}
}

// verdict fails unless every figure meets its target.
func (rp *report) verdict() error {
	var errs []error
	for _, f := range rp.figures {
		if !f.OK {
			errs = append(errs, fmt.Errorf("natlab: %s: %s, target %s", f.Name, f.Measured, f.Target))
		}
	}
	return errors.Join(errs...)
}

// write prints the per-run table and the figures.
func (rp *report) write(w io.Writer) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "case\trun\tsteps\tring\thashes\tdirect pairs\trelayed/step\tutil\tall-reduce\tend")
	for _, res := range rp.results {
		fmt.Fprintf(tw, "%s\t%d\t%d–%d\t%d\t%s\t%s\t%.1f KiB\t%.3f\t%.3fs\t%s\n", res.Case.Name, res.Run,
			res.Hist.MinStep, res.Hist.MaxStep, res.Hist.MaxRing, res.hashes(), res.directSummary(),
			res.relayPerStep()/1024, res.Hist.Utilization, res.Hist.AllReduceSec, endOf(res))
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, f := range rp.figures {
		fmt.Fprintf(w, "%-4s %s: %s (target %s)\n", map[bool]string{true: "ok", false: "FAIL"}[f.OK], f.Name, f.Measured, f.Target)
	}
}

// rows returns the figures as rows of docs/results.md, stamped with the
// command, the binary's commit, this machine and now.
func (rp *report) rows(args []string, now time.Time) []results.Row {
	rows := make([]results.Row, len(rp.figures))
	for i, f := range rp.figures {
		rows[i] = results.Row{Figure: f.Name, Target: f.Target, Measured: f.Measured,
			Met: map[bool]string{true: "yes", false: "no"}[f.OK], Page: "nat.md"}
	}
	results.Stamp(rows, args, rp.c.Bin, now)
	return rows
}

func endOf(res runResult) string {
	if res.Err == nil {
		return "finished"
	}
	return strings.ReplaceAll(res.Err.Error(), "\n", "; ")
}

// writeMarkdown writes the results, the command and every run's evidence
// lines to path.
func (rp *report) writeMarkdown(path, command string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## natlab %s\n\n`%s` (binary %s, preset %s, H=%d × %v, %d outer steps, profile %s, rate scale %.3f)\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), command, rp.c.Bin, rp.c.Preset, rp.c.Inner, rp.c.SimStep, rp.c.Outer, rp.c.Profile, rp.c.rateScale)
	b.WriteString("| target | measured | goal | |\n|---|---|---|---|\n")
	for _, f := range rp.figures {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f.Name, f.Measured, f.Target, map[bool]string{true: "ok", false: "**FAIL**"}[f.OK])
	}
	b.WriteString("\n| case | run | steps | max ring | hashes | direct pairs | relayed / step | util | all-reduce | end |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, res := range rp.results {
		fmt.Fprintf(&b, "| %s | %d | %d–%d | %d | %s | %s | %.1f KiB | %.3f | %.3f s | %s |\n", res.Case.Name, res.Run,
			res.Hist.MinStep, res.Hist.MaxStep, res.Hist.MaxRing, res.hashes(), res.directSummary(),
			res.relayPerStep()/1024, res.Hist.Utilization, res.Hist.AllReduceSec, endOf(res))
	}
	b.WriteString("\nEvidence (each member's `/v1/peers` when the first member reached the event step, else its last; events):\n\n")
	for _, res := range rp.results {
		fmt.Fprintf(&b, "- case %s run %d (%s):\n", res.Case.Name, res.Run, res.Case.About)
		for _, n := range res.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
