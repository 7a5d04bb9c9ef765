package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// baselineName is the configuration the others are compared against.
const baselineName = "blocking-int8"

// ddpBytes is what data-parallel training of the same model sends per member
// per optimizer step: a ring all-reduce of fp32 gradients, 2(k−1)/k × 4 ×
// params bytes.
func ddpBytes(members int, params int64) float64 {
	k := float64(members)
	return 2 * (k - 1) / k * 4 * float64(params)
}

// summaryRow is one configuration's line of the table.
type summaryRow struct {
	Name        string
	Label       string
	Final       float64 // final eval loss
	Tokens      int64   // tokens at the final evaluation
	VsBaseline  float64 // eval loss / baseline's − 1 at the largest equal token count (NaN for the baseline or without one)
	SentPer     float64 // bytes sent per node per outer step (0 for the single node)
	LessThanDDP float64 // DDP bytes over the same H inner steps / SentPer
	AtH100      float64 // the same at H = 100 (DiLoCo's bytes per outer step do not depend on H)
	HashesOK    bool
	MinRing     int  // smallest ring of any outer step
	Single      bool // the single-node baseline
	points      []point
	ARSec       float64
}

// summarize computes the table from the results.
func summarize(s *setup, results []result) []summaryRow {
	var base *result
	for i := range results {
		if results[i].cfg.Name == baselineName && len(results[i].points) > 0 {
			base = &results[i]
		}
	}
	var rows []summaryRow
	for _, r := range results {
		last := r.points[len(r.points)-1]
		row := summaryRow{Name: r.cfg.Name, Label: r.cfg.Label, Final: last.EvalLoss, Tokens: last.Tokens,
			VsBaseline: math.NaN(), SentPer: r.sentPer, HashesOK: r.hashesOK, MinRing: r.minRing, Single: r.cfg.Single, ARSec: r.arSec,
			LessThanDDP: math.NaN(), AtH100: math.NaN(), points: r.points}
		if base != nil && r.cfg.Name != baselineName {
			if _, a, b, ok := equalTokens(r.points, base.points); ok {
				row.VsBaseline = a/b - 1
			}
		}
		if !r.cfg.Single && r.sentPer > 0 {
			ddp := ddpBytes(r.nodes, s.params)
			row.LessThanDDP = float64(s.inner) * ddp / r.sentPer
			row.AtH100 = 100 * ddp / r.sentPer
		}
		rows = append(rows, row)
	}
	return rows
}

// equalTokens returns the eval losses of a and b at the largest token count
// both series reached exactly while every ring still held all the nodes (a
// ring that lost a member is no longer the configuration asked for, even
// where its token count happens to match).
func equalTokens(a, b []point) (tokens int64, la, lb float64, ok bool) {
	inB := map[int64]float64{}
	for _, p := range b {
		if p.Full {
			inB[p.Tokens] = p.EvalLoss
		}
	}
	for _, p := range a {
		if l, found := inB[p.Tokens]; found && p.Full && p.Tokens >= tokens {
			tokens, la, lb, ok = p.Tokens, p.EvalLoss, l, true
		}
	}
	return tokens, la, lb, ok
}

// writeTable prints the summary as a Markdown table with the comparisons
// against the 1-node baselines below it.
func writeTable(w io.Writer, s *setup, rows []summaryRow) {
	fmt.Fprintf(w, "tiny preset, %d params; %d nodes; H = %d; %d outer steps; %d tokens per inner step per node\n\n",
		s.params, s.nodes, s.inner, s.outer, s.tokensPerStep)
	fmt.Fprintln(w, "| configuration | tokens | final eval loss | perplexity | vs blocking int8 at equal tokens | bytes sent / node / outer step | × less than DDP (this H) | × less than DDP at H=100 | hashes agree | smallest ring | all-reduce s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	var warnings []string
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %.4f | %.3f | %s | %s | %s | %s | %v | %d | %s |\n", r.Label, r.Tokens, r.Final, math.Exp(r.Final),
			pct(r.VsBaseline), bytesOrDash(r.SentPer), ratioOrDash(r.LessThanDDP), ratioOrDash(r.AtH100), r.HashesOK, r.MinRing, secOrDash(r.ARSec))
		if r.MinRing < s.nodes && !r.Single {
			warnings = append(warnings, fmt.Sprintf("- WARNING: %s broke up (a ring of %d < %d nodes): its curve is not the %d-node run asked for\n",
				r.Name, r.MinRing, s.nodes, s.nodes))
		}
	}
	fmt.Fprintln(w)
	byName := map[string]summaryRow{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	compare := func(what, a, b string) {
		ra, okA := byName[a]
		rb, okB := byName[b]
		if !okA || !okB {
			return
		}
		tok, la, lb, ok := equalTokens(ra.points, rb.points)
		if !ok {
			fmt.Fprintf(w, "- %s: no equal token count\n", what)
			return
		}
		fmt.Fprintf(w, "- %s, at %d tokens: eval loss %.4f vs %.4f (%s), perplexity %.3f vs %.3f\n", what, tok, la, lb,
			pct(la/lb-1), math.Exp(la), math.Exp(lb))
	}
	compare("overlapped / blocking (int8)", "overlap-int8", "blocking-int8")
	compare("int8 / fp32 (blocking)", "blocking-int8", "blocking-fp32")
	compare("int8 + error feedback / int8", "blocking-int8-ef", "blocking-int8")
	compare("DiLoCo ×4 int8 / 1 node 4× batch", "blocking-int8", "single-4x-batch")
	compare("DiLoCo ×4 fp32 / 1 node 4× batch", "blocking-fp32", "single-4x-batch")
	fmt.Fprintf(w, "- DDP reference: %.0f bytes sent per member per inner step (ring, fp32 gradients), %.0f per %d inner steps\n",
		ddpBytes(s.nodes, s.params), float64(s.inner)*ddpBytes(s.nodes, s.params), s.inner)
	for _, wn := range warnings {
		io.WriteString(w, wn)
	}
}

func pct(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "—"
	}
	return fmt.Sprintf("%+.2f %%", 100*x)
}

func bytesOrDash(b float64) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f (%.2f MiB)", b, b/(1<<20))
}

func ratioOrDash(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.1f×", x)
}

func secOrDash(x float64) string {
	if x <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.3f", x)
}

// report writes the CSV files, the plots and the summary files into o.out
// and the table to w.
func report(o options, s *setup, results []result, w io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	for _, r := range results {
		if err := writeFile(filepath.Join(o.out, r.cfg.Name+".csv"), func(f io.Writer) error { return writeSeriesCSV(f, r) }); err != nil {
			return err
		}
	}
	rows := summarize(s, results)
	if err := writeFile(filepath.Join(o.out, "summary.csv"), func(f io.Writer) error { return writeSummaryCSV(f, rows) }); err != nil {
		return err
	}
	for name, p := range plots(results) {
		if err := writeFile(filepath.Join(o.out, name), p.writeSVG); err != nil {
			return err
		}
	}
	var table strings.Builder
	writeTable(&table, s, rows)
	if err := writeFile(filepath.Join(o.out, "summary.md"), func(f io.Writer) error {
		_, err := io.WriteString(f, table.String())
		return err
	}); err != nil {
		return err
	}
	_, err := io.WriteString(w, table.String())
	return err
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

func writeSeriesCSV(w io.Writer, r result) error {
	c := csv.NewWriter(w)
	c.Write([]string{"outer_step", "tokens", "eval_loss", "perplexity", "eval_loss_spread_over_nodes"})
	for _, p := range r.points {
		c.Write([]string{strconv.Itoa(p.Step), strconv.FormatInt(p.Tokens, 10), fmtF(p.EvalLoss), fmtF(math.Exp(p.EvalLoss)), fmtF(p.Spread)})
	}
	c.Flush()
	return c.Error()
}

func writeSummaryCSV(w io.Writer, rows []summaryRow) error {
	c := csv.NewWriter(w)
	c.Write([]string{"configuration", "tokens", "final_eval_loss", "perplexity", "vs_blocking_int8", "bytes_sent_per_node_per_outer_step",
		"less_than_ddp", "less_than_ddp_at_h100", "hashes_agree", "smallest_ring", "allreduce_sec"})
	for _, r := range rows {
		c.Write([]string{r.Name, strconv.FormatInt(r.Tokens, 10), fmtF(r.Final), fmtF(math.Exp(r.Final)), fmtF(r.VsBaseline),
			fmtF(r.SentPer), fmtF(r.LessThanDDP), fmtF(r.AtH100), strconv.FormatBool(r.HashesOK), strconv.Itoa(r.MinRing), fmtF(r.ARSec)})
	}
	c.Flush()
	return c.Error()
}

func fmtF(x float64) string { return strconv.FormatFloat(x, 'g', 8, 64) }

// plots returns the figures by file name: eval loss against tokens (whole
// run and its second half), and each configuration's eval loss relative to
// blocking int8 at equal tokens. A configuration whose ring lost a node is
// drawn only up to the last step with every node in the ring.
func plots(results []result) map[string]plot {
	all := plot{Title: "Held-out loss vs tokens (tiny, embedded data)", XLabel: "training tokens", YLabel: "eval loss", XMin: math.NaN()}
	var base *result
	for i := range results {
		if results[i].cfg.Name == baselineName {
			base = &results[i]
		}
	}
	rel := plot{Title: "Eval loss relative to blocking int8 at equal tokens", XLabel: "training tokens",
		YLabel: "eval loss / blocking int8 − 1 (%)", XMin: math.NaN(), YZero: true}
	maxTok := 0.0
	for _, r := range results {
		l := line{Label: r.cfg.Label, Color: r.cfg.Color, Dashed: r.cfg.Single}
		for _, p := range r.points {
			if !p.Full {
				l.Label += fmt.Sprintf(" (full ring until step %d only)", p.Step-1)
				break
			}
			l.X, l.Y = append(l.X, float64(p.Tokens)), append(l.Y, p.EvalLoss)
			maxTok = max(maxTok, float64(p.Tokens))
		}
		all.Lines = append(all.Lines, l)
		if base != nil && r.cfg.Name != baselineName {
			rel.Lines = append(rel.Lines, relativeLine(r, *base))
		}
	}
	tail := all
	tail.Title, tail.XMin = "Held-out loss vs tokens, second half of the run", maxTok/2
	out := map[string]plot{"eval_loss.svg": all, "eval_loss_second_half.svg": tail}
	if base != nil {
		out["eval_loss_relative.svg"] = rel
	}
	return out
}

// relativeLine is r's eval loss over base's at the same token count, in %.
func relativeLine(r, base result) line {
	byTok := map[int64]float64{}
	for _, p := range base.points {
		if p.Full {
			byTok[p.Tokens] = p.EvalLoss
		}
	}
	l := line{Label: r.cfg.Label, Color: r.cfg.Color, Dashed: r.cfg.Single}
	for _, p := range r.points {
		if b, ok := byTok[p.Tokens]; ok && p.Full {
			l.X, l.Y = append(l.X, float64(p.Tokens)), append(l.Y, 100*(p.EvalLoss/b-1))
		}
	}
	return l
}
