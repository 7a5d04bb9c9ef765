package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/train"
)

// The convergence benchmark (make bench-convergence): DiLoCo at the int8
// point (node.Int8Point, `--codec int8`; the default q2 point is the traffic
// benchmark's) for M = 2, 4, 8 against both single-node baselines — one
// node with the same batch and steps (1×), one node with an M× batch (equal
// tokens) — on the embedded corpus and on real text, over several seeds.
// Everything runs in this process through diloco.RunLocal with the nodes'
// default averaging — robust, the direct scatter with robust segment owners
// and their exclusion rule (account.Judge) — or, for the fp32
// comparison, the plain float32 mean; the in-memory reducers compute the
// bits of the network's (TestNetworkMatchesReference). Results are appended
// to a JSON-lines file as each run ends, so an interrupted benchmark
// resumes where it stopped and the table and plots can be rebuilt without
// training.

// benchOptions are the flags of `experiments bench`.
type benchOptions struct {
	out, results, preset  string
	seeds, ms, corpora    string
	steps, h, parallel    int
	replot, fp32, dryPlan bool
	opt                   string // inner optimizer of every run (node.DefaultOptimizer)
}

func benchMain(args []string) error { return benchRun(args, os.Stdout, os.Stderr) }

// benchRun is `experiments bench` with its table written to stdout and its
// progress to stderr.
func benchRun(args []string, stdout, stderr io.Writer) error {
	var o benchOptions
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.out, "out", "docs/figures/convergence", "directory for results.jsonl, summary.md and the plots")
	fs.StringVar(&o.results, "results", "", "results file (default OUT/results.jsonl); runs already in it are not run again")
	fs.StringVar(&o.preset, "preset", "tiny", "model preset")
	fs.StringVar(&o.seeds, "seeds", "1,2,3", "comma-separated seeds")
	fs.StringVar(&o.ms, "m", "2,4,8", "comma-separated DiLoCo member counts M")
	fs.StringVar(&o.corpora, "corpora", "default,gosrc", "comma-separated corpora: default (embedded arithmetic), gosrc (Go's source as bytes), or shard paths")
	fs.IntVar(&o.steps, "steps", 600, "inner steps per node (the baselines' optimizer steps)")
	fs.IntVar(&o.h, "h", node.Int8Point.InnerSteps, "inner steps per outer step (H)")
	fs.IntVar(&o.parallel, "parallel", 1, "runs at the same time")
	fs.StringVar(&o.opt, "opt", node.DefaultOptimizer, "inner optimizer of every run: adamw or muon; runs of another than adamw carry it in their names")
	fs.BoolVar(&o.fp32, "fp32", true, "also run DiLoCo with an fp32 all-reduce for the largest M ≤ 4 (the int8 cost)")
	fs.BoolVar(&o.replot, "replot", false, "do not train: rebuild summary and plots from the results file")
	fs.BoolVar(&o.dryPlan, "plan", false, "print the runs that would be made and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.results == "" {
		o.results = filepath.Join(o.out, "results.jsonl")
	}
	if o.opt != train.OptimizerAdamW && o.opt != train.OptimizerMuon {
		return fmt.Errorf("-opt %q: want %s or %s", o.opt, train.OptimizerAdamW, train.OptimizerMuon)
	}
	plan, err := benchPlan(o)
	if err != nil {
		return err
	}
	if !o.replot {
		if err := runPlan(context.Background(), o, plan, stderr); err != nil || o.dryPlan {
			return err // -plan only lists the runs: the summary and plots stay as they are
		}
	}
	res, err := readResults(o.results)
	if err != nil {
		return err
	}
	return benchReport(o, plan, res, stdout)
}

// benchJob is one (corpus, seed, run) of the benchmark.
type benchJob struct {
	corpus string
	seed   uint64
	run    sweepRun
}

func (j benchJob) key() string { return fmt.Sprintf("%s|%d|%s", j.corpus, j.seed, j.run.Name) }

// benchPlan lists the runs: for each corpus and seed, the 1× baseline, and
// for each M the M× baseline and DiLoCo with the defaults (shippedCodec),
// plus, at the largest M ≤ 4, DiLoCo with fp32 (plain mean) and overlapped.
func benchPlan(o benchOptions) ([]benchJob, error) {
	o.opt = cmp.Or(o.opt, train.OptimizerAdamW)
	seeds, err := parseSeeds(o.seeds)
	if err != nil {
		return nil, err
	}
	var ms []int
	for _, f := range strings.Split(o.ms, ",") {
		m, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || m < 2 || m > 64 {
			return nil, fmt.Errorf("-m %q: want integers in 2..64", o.ms)
		}
		ms = append(ms, m)
	}
	runs := []sweepRun{singleRun(1, o.h, o.opt)}
	fp32M := 0
	for _, m := range ms {
		runs = append(runs, singleRun(m, o.h, o.opt), defaultDiLoCo(m, o.h, shippedCodec(), o.opt))
		if m <= 4 {
			fp32M = m
		}
	}
	if o.fp32 && fp32M > 0 {
		runs = append(runs, defaultDiLoCo(fp32M, o.h, "fp32", o.opt), overlapDiLoCo(fp32M, o.h, shippedCodec(), o.opt))
	}
	var plan []benchJob
	for _, c := range strings.Split(o.corpora, ",") {
		for _, s := range seeds {
			for _, r := range runs {
				plan = append(plan, benchJob{corpus: strings.TrimSpace(c), seed: s, run: r})
			}
		}
	}
	return plan, nil
}

func singleRun(k, h int, opt string) sweepRun {
	return withOpt(sweepRun{Name: fmt.Sprintf("single-%dx", k), Kind: "single", M: 1, K: k, H: h}, opt)
}

// withOpt makes r run the inner optimizer opt: AdamW runs keep the names
// the benchmark always gave them; others carry the optimizer ("-muon").
func withOpt(r sweepRun, opt string) sweepRun {
	if opt != "" && opt != train.OptimizerAdamW {
		r.Name += "-" + opt
		r.Optimizer = opt
	}
	return r
}

// shippedCodec is the sweep codec of a node's default averaging
// (node.DefaultAveraging) with int8: "robust" (int8, once quantized), or
// "int8", the ring's plain mean.
func shippedCodec() string {
	if node.DefaultAveraging == node.AveragingRobust {
		return "robust"
	}
	return "int8"
}

// plainCodec is the ring's plain int8 mean, the default averaging before
// robust: the benchmark's older rows (diloco-M-int8) are reported with it
// as a reference, not run again.
const plainCodec = "int8"

// defaultDiLoCo is DiLoCo as a node runs it by default, averaging with
// codec: shippedCodec() by default, "fp32" as --fp32 does (plain mean).
// The run's name carries the codec, so that rows of one averaging are never
// read as another's.
func defaultDiLoCo(m, h int, codec, opt string) sweepRun {
	return withOpt(sweepRun{Name: fmt.Sprintf("diloco-%d-%s", m, codec), Kind: "diloco", M: m, K: 1, H: h,
		LR: node.Int8Point.OuterLR, Mu: node.Int8Point.OuterMomentum, Codec: codec}, opt)
}

// overlapDiLoCo is DiLoCo as a node runs it with --overlap on a link fast
// enough for the average to arrive within one inner step (the default,
// --overlap-steps 0, applies it then), averaging with codec.
func overlapDiLoCo(m, h int, codec, opt string) sweepRun {
	r := defaultDiLoCo(m, h, codec, train.OptimizerAdamW)
	r.Name, r.Overlap = fmt.Sprintf("diloco-%d-%s-overlap1", m, codec), 1
	return withOpt(r, opt)
}

// runPlan runs the jobs not yet in the results file, appending each result.
func runPlan(ctx context.Context, o benchOptions, plan []benchJob, log io.Writer) error {
	done, err := readResults(o.results)
	if err != nil {
		return err
	}
	var todo []benchJob
	for _, j := range plan {
		if _, ok := done[j.key()]; !ok {
			todo = append(todo, j)
		}
	}
	fmt.Fprintf(log, "bench: %d runs, %d already in %s\n", len(plan), len(plan)-len(todo), o.results)
	if o.dryPlan {
		for _, j := range todo {
			fmt.Fprintln(log, j.key())
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(o.results), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(o.results, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	srcs := map[string]train.Source{}
	for _, j := range todo {
		if srcs[j.corpus] == nil {
			if srcs[j.corpus], err = openCorpus(j.corpus); err != nil {
				return err
			}
		}
	}
	return forEachParallel(todo, o.parallel, func(j benchJob) (sweepResult, error) {
		fmt.Fprintf(log, "bench: %s ...\n", j.key())
		r, err := sweepOne(ctx, j.run, j.seed, o.preset, o.steps, srcs[j.corpus])
		r.Data = j.corpus
		return r, err
	}, f)
}

// openCorpus opens a corpus by its bench name.
func openCorpus(name string) (train.Source, error) {
	path := name
	if name == "gosrc" {
		var err error
		if path, err = goSourceShard(os.TempDir()); err != nil {
			return nil, err
		}
	}
	return train.OpenSource(path)
}

// maxResultsBytes bounds one line of the results file.
const maxResultsBytes = 1 << 20

// readResults reads a results file (missing: empty) keyed by benchJob.key.
func readResults(path string) (map[string]sweepResult, error) {
	out := map[string]sweepResult{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), maxResultsBytes)
	for n := 1; sc.Scan(); n++ {
		var r sweepResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if len(r.Eval) == 0 || len(r.Eval) != len(r.Tokens) || !(r.Final > 0) || !finite(r.Final) {
			return nil, fmt.Errorf("%s:%d: incomplete result", path, n)
		}
		out[benchJob{corpus: r.Data, seed: r.Seed, run: r.Run}.key()] = r
	}
	return out, sc.Err()
}

// stat is the mean and range of one run's final loss over seeds.
type stat struct {
	mean, lo, hi float64
	n            int
	curve        []float64 // mean eval curve over the seeds
}

func statOf(rs []sweepResult) stat {
	s := stat{lo: math.Inf(1), hi: math.Inf(-1), n: len(rs)}
	for _, r := range rs {
		s.mean += r.Final / float64(len(rs))
		s.lo, s.hi = min(s.lo, r.Final), max(s.hi, r.Final)
		if s.curve == nil {
			s.curve = make([]float64, len(r.Eval))
		}
		for i := range min(len(s.curve), len(r.Eval)) {
			s.curve[i] += r.Eval[i] / float64(len(rs))
		}
	}
	return s
}

// benchReport writes summary.md and the plots, and the table to w. The table
// and its comparisons are those of the shipped defaults (shippedCodec); the
// plain int8 mean's rows of the same corpora and seeds, when the results file
// has them (the default before robust averaging), follow as a reference.
func benchReport(o benchOptions, plan []benchJob, res map[string]sweepResult, w io.Writer) error {
	o.opt = cmp.Or(o.opt, train.OptimizerAdamW)
	var corpora []string
	seen, planned := map[string]bool{}, map[string]bool{}
	for _, j := range plan {
		planned[fmt.Sprintf("%s|%d", j.corpus, j.seed)] = true
		if !seen[j.corpus] {
			seen[j.corpus], corpora = true, append(corpora, j.corpus)
		}
	}
	// Every result of the plan's corpora and seeds, planned run or not (the
	// reference rows are not planned), by corpus|run in seed order.
	var all []sweepResult
	for _, r := range res {
		if planned[fmt.Sprintf("%s|%d", r.Data, r.Seed)] {
			all = append(all, r)
		}
	}
	sort.Slice(all, func(i, k int) bool { return all[i].Seed < all[k].Seed })
	byRun := map[string][]sweepResult{} // corpus|run → results over seeds
	for _, r := range all {
		byRun[r.Data+"|"+r.Run.Name] = append(byRun[r.Data+"|"+r.Run.Name], r)
	}
	// row is a table row of DiLoCo ×m with codec on corpus c: every column
	// over the seeds its DiLoCo run has; ok when all columns have them.
	row := func(c string, m int, codec, opt string) (one, big, dl stat, ok bool) {
		dlRuns := byRun[c+"|"+defaultDiLoCo(m, o.h, codec, opt).Name]
		same := func(run string) stat { return statOf(sameSeeds(byRun[c+"|"+run], dlRuns)) }
		one, big, dl = same(singleRun(1, o.h, opt).Name), same(singleRun(m, o.h, opt).Name), statOf(dlRuns)
		return one, big, dl, dl.n > 0 && big.n == dl.n && one.n == dl.n
	}
	// pair compares runs a and b of corpus c over the seeds both have.
	pair := func(c, a, b string) (sa, sb stat) {
		ra, rb := byRun[c+"|"+a], byRun[c+"|"+b]
		return statOf(sameSeeds(ra, rb)), statOf(sameSeeds(rb, ra))
	}
	codec := shippedCodec()
	var b strings.Builder
	fmt.Fprintf(&b, "Final held-out loss (%d held-out batches), mean over seeds [min–max]; DiLoCo at the int8 point (`--codec int8`: outer lr %v, momentum %v, %s), H = %d, %d inner steps per node, inner optimizer %s (the baselines' too).\n\n",
		finalEvalBatches, node.Int8Point.OuterLR, node.Int8Point.OuterMomentum, codecText(codec), o.h, o.steps, o.opt)
	b.WriteString("| corpus | M | 1 node, 1× batch | 1 node, M× batch | DiLoCo ×M | vs M× batch | vs 1× | seeds |\n|---|---|---|---|---|---|---|---|\n")
	var notes strings.Builder
	for _, c := range corpora {
		for _, m := range msOf(plan) {
			one, big, dl, ok := row(c, m, codec, o.opt)
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %d |\n", c, m, fmtStat(one), fmtStat(big), fmtStat(dl),
				pct(dl.mean/big.mean-1), pct(dl.mean/one.mean-1), dl.n)
			blocking := defaultDiLoCo(m, o.h, codec, o.opt).Name
			if d, fp := pair(c, blocking, defaultDiLoCo(m, o.h, "fp32", o.opt).Name); fp.n > 0 {
				fmt.Fprintf(&notes, "- %s, M = %d: %s %s vs fp32 (plain mean) %s: **%s** (%s)\n", c, m, codecName(codec), fmtStat(d), fmtStat(fp), pct(d.mean/fp.mean-1), seedsText(fp.n))
			}
			if ov, d := pair(c, overlapDiLoCo(m, o.h, codec, o.opt).Name, blocking); ov.n > 0 {
				fmt.Fprintf(&notes, "- %s, M = %d: overlapped (average applied after 1 inner step) %s vs blocking %s: **%s** (%s)\n", c, m, fmtStat(ov), fmtStat(d), pct(ov.mean/d.mean-1), seedsText(ov.n))
			}
		}
	}
	if notes.Len() > 0 {
		b.WriteString("\n" + notes.String())
	}
	if o.opt != train.OptimizerAdamW {
		b.WriteString(reference(o, plan, corpora, codec, codec, train.OptimizerAdamW, "AdamW",
			fmt.Sprintf("AdamW as the inner optimizer (before %s; the same runs, AdamW's own baselines)", o.opt), row, pair))
	} else if codec != plainCodec {
		b.WriteString(reference(o, plan, corpora, codec, plainCodec, o.opt, "plain int8 mean",
			fmt.Sprintf("plain int8 mean (before %s became the default; ring all-reduce, otherwise the same runs)", codecName(codec)), row, pair))
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "summary.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	for _, c := range corpora {
		p := benchPlot(c, o, plan, byRun)
		name := filepath.Join(o.out, "eval-"+corpusFile(c)+".svg")
		if err := writeFile(name, p.writeSVG); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// reference is the summary's reference section: the rows of an earlier
// default — refCodec with refOpt, each against its own baselines — that
// the results have, with the shipped runs' loss relative to them over
// common seeds. what names the earlier default in the text.
func reference(o benchOptions, plan []benchJob, corpora []string, codec, refCodec, refOpt, what, title string,
	row func(c string, m int, codec, opt string) (one, big, dl stat, ok bool),
	pair func(c, a, b string) (sa, sb stat)) string {
	var b, notes strings.Builder
	for _, c := range corpora {
		for _, m := range msOf(plan) {
			one, big, dl, ok := row(c, m, refCodec, refOpt)
			if !ok {
				continue
			}
			ref := defaultDiLoCo(m, o.h, refCodec, refOpt).Name
			sh, rf := pair(c, defaultDiLoCo(m, o.h, codec, o.opt).Name, ref)
			vs := "—"
			if rf.n > 0 {
				vs = fmt.Sprintf("%s (%s)", pct(sh.mean/rf.mean-1), seedsText(rf.n))
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d |\n", c, m, fmtStat(dl),
				pct(dl.mean/big.mean-1), pct(dl.mean/one.mean-1), vs, dl.n)
			if d, fp := pair(c, ref, defaultDiLoCo(m, o.h, "fp32", refOpt).Name); fp.n > 0 {
				fmt.Fprintf(&notes, "- %s, M = %d, %s: %s vs fp32 (plain mean) %s: %s (%s)\n", c, m, what, fmtStat(d), fmtStat(fp), pct(d.mean/fp.mean-1), seedsText(fp.n))
			}
			if ov, d := pair(c, overlapDiLoCo(m, o.h, refCodec, refOpt).Name, ref); ov.n > 0 {
				fmt.Fprintf(&notes, "- %s, M = %d, %s: overlapped %s vs blocking %s: %s (%s)\n", c, m, what, fmtStat(ov), fmtStat(d), pct(ov.mean/d.mean-1), seedsText(ov.n))
			}
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "\nReference: " + title + ":\n\n" +
		"| corpus | M | DiLoCo ×M, " + what + " | vs M× batch | vs 1× | shipped vs " + what + " | seeds |\n|---|---|---|---|---|---|---|\n" +
		b.String() + "\n" + notes.String()
}

// seedsText is "1 seed" or "n seeds".
func seedsText(n int) string {
	if n == 1 {
		return "1 seed"
	}
	return fmt.Sprintf("%d seeds", n)
}

// codecName is a codec's short name in the summary.
func codecName(codec string) string {
	switch codec {
	case "robust":
		return "robust"
	case "int8":
		return "int8 mean"
	}
	return codec
}

// codecText describes a DiLoCo codec in the summary's heading.
func codecText(codec string) string {
	switch codec {
	case "robust":
		return "robust averaging: int8 direct scatter, each segment owner clips contributions to 2× the median norm and takes one CenteredClip step"
	case "int8":
		return "int8 ring all-reduce, plain mean"
	}
	return codec
}

// sameSeeds returns the results of rs whose seed is among those of ref.
func sameSeeds(rs, ref []sweepResult) []sweepResult {
	var out []sweepResult
	for _, r := range rs {
		for _, x := range ref {
			if r.Seed == x.Seed {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

func msOf(plan []benchJob) []int {
	seen := map[int]bool{}
	var ms []int
	for _, j := range plan {
		if j.run.Kind == "diloco" && !seen[j.run.M] {
			seen[j.run.M], ms = true, append(ms, j.run.M)
		}
	}
	sort.Ints(ms)
	return ms
}

func fmtStat(s stat) string {
	if s.n == 0 {
		return "—"
	}
	if s.n == 1 {
		return fmt.Sprintf("%.4f", s.mean)
	}
	return fmt.Sprintf("%.4f [%.4f–%.4f]", s.mean, s.lo, s.hi)
}

func corpusFile(c string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, strings.TrimSuffix(filepath.Base(c), train.ShardExt))
}

// benchPlot draws the mean eval curves of corpus c against inner steps per
// node: the baselines dashed, DiLoCo solid, one colour per M.
func benchPlot(c string, o benchOptions, plan []benchJob, byRun map[string][]sweepResult) plot {
	o.opt = cmp.Or(o.opt, train.OptimizerAdamW)
	colors := map[int]string{1: "#7f7f7f", 2: "#2ca02c", 4: "#1f77b4", 8: "#d62728", 16: "#9467bd"}
	p := plot{Title: fmt.Sprintf("Held-out loss, %s (mean over seeds)", c), XLabel: "inner steps per node",
		YLabel: "eval loss", XMin: float64(o.steps) / 10}
	add := func(label, color, run string, dashed bool) {
		s := statOf(byRun[c+"|"+run])
		if s.n == 0 {
			return
		}
		l := line{Label: label, Color: color, Dashed: dashed}
		for i, y := range s.curve {
			l.X, l.Y = append(l.X, float64((i+1)*o.h)), append(l.Y, y)
		}
		p.Lines = append(p.Lines, l)
	}
	add("1 node, 1× batch", colors[1], singleRun(1, o.h, o.opt).Name, true)
	for _, m := range msOf(plan) {
		add(fmt.Sprintf("1 node, %d× batch", m), colors[m], singleRun(m, o.h, o.opt).Name, true)
		add(fmt.Sprintf("DiLoCo ×%d (%s)", m, codecName(shippedCodec())), colors[m], defaultDiLoCo(m, o.h, shippedCodec(), o.opt).Name, false)
	}
	return p
}

// forEachParallel runs fn over jobs, n at a time, writing each result as a
// JSON line to w as it ends; the failures are returned after all ended.
func forEachParallel(jobs []benchJob, n int, fn func(benchJob) (sweepResult, error), w io.Writer) error {
	ch := make(chan benchJob)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Go(func() {
			for j := range ch {
				r, err := fn(j)
				mu.Lock()
				if err == nil {
					b, _ := json.Marshal(r)
					_, err = fmt.Fprintf(w, "%s\n", b)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", j.key(), err))
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	return errors.Join(errs...)
}
