package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/intellect-node/intellect-node/train"
)

// The loss-versus-traffic benchmark (make bench-traffic): DiLoCo at M
// members over a grid of H × codec × outer optimizer, on each corpus,
// against one node alone and one node with an M× batch at equal tokens,
// all in this process through diloco.RunLocal with the nodes' averaging
// (the robust direct scatter) and its real codecs. Each DiLoCo run records
// the all-reduce bytes a member sends and receives per inner step; the
// traffic reduction is data-parallel training's bytes over those:
//
//	DP bytes per member per inner step = 2·(M−1)/M × 4 bytes × parameters
//
// (an fp32 ring all-reduce of the gradient each step). Results are appended
// to a JSON-lines file as each run ends, so the benchmark resumes where it
// stopped and the table and plot can be rebuilt without training.

// trafficOptions are the flags of `experiments traffic`.
type trafficOptions struct {
	out, results, preset    string
	seeds, corpora, hs, m   string
	codecs, outers          string
	steps, parallel         int
	decay                   float64 // the inner LR's decay fraction of every run; 0: the preset's
	innerLR                 float64 // every run's inner LR; 0: the preset's
	replot, dryPlan         bool
	budget                  float64 // the loss budget against the M× batch, e.g. 0.03
	require, stretch        float64 // traffic reductions the frontier is read against
	frontierH, frontierCode string  // a point whose extra seeds and Ms the plan adds
}

// trafficCodecs are the benchmark's codecs: the sweep codec and settings
// each stands for (robust direct scatter; compressed codecs with error
// feedback).
var trafficCodecs = map[string]sweepRun{
	"int8":      {Codec: "robust"},
	"q4":        {Codec: "robust-q4"},
	"q2":        {Codec: "robust-q2"},
	"q1":        {Codec: "robust-q1"},
	"topk":      {Codec: "robust-topk", Beta: 0.95},
	"topk-ef1":  {Codec: "robust-topk", Beta: 1},
	"topk-4bit": {Codec: "robust-topk", Beta: 0.95, TopKBits: 4},
}

// trafficOuters are the named outer optimizers: plain averaging, Nesterov
// momentum at MuLoCo's setting, and the same momentum kept by each member
// on its own pseudo-gradients (diloco.Config.WorkerMomentum). trafficOuter
// also reads any other Nesterov setting written nLRmMU (e.g. n0.8m0.6), or
// wLRmMU with the momentum the members'.
var trafficOuters = map[string]outerStep{"plain": {1, 0, 0}, "nesterov": {0.7, 0.6, 0}, "wnesterov": {0.7, 0, 0.6}}

// outerStep is an outer optimizer: its learning rate, the global model's
// momentum and the members' (one of the two is 0).
type outerStep struct{ lr, mu, wmu float32 }

// trafficOuter returns the outer step of an outer optimizer's name.
func trafficOuter(name string) (outerStep, bool) {
	if o, ok := trafficOuters[name]; ok {
		return o, true
	}
	if len(name) < 1 || (name[0] != 'n' && name[0] != 'w') {
		return outerStep{}, false
	}
	lrs, mus, ok := strings.Cut(name[1:], "m")
	if !ok {
		return outerStep{}, false
	}
	lr, err1 := strconv.ParseFloat(lrs, 32)
	mu, err2 := strconv.ParseFloat(mus, 32)
	ok = err1 == nil && err2 == nil && lr > 0 && lr <= 10 && mu >= 0 && mu < 1
	if name[0] == 'w' {
		return outerStep{float32(lr), 0, float32(mu)}, ok
	}
	return outerStep{float32(lr), float32(mu), 0}, ok
}

func trafficMain(args []string) error { return trafficRun(args, os.Stdout, os.Stderr) }

// trafficRun is `experiments traffic` with its table written to stdout and
// its progress to stderr.
func trafficRun(args []string, stdout, stderr io.Writer) error {
	var o trafficOptions
	fs := flag.NewFlagSet("traffic", flag.ContinueOnError)
	fs.StringVar(&o.out, "out", "docs/figures/traffic", "directory for results.jsonl, summary.md and the plots")
	fs.StringVar(&o.results, "results", "", "results file (default OUT/results.jsonl); runs already in it are not run again")
	fs.StringVar(&o.preset, "preset", "tiny", "model preset")
	fs.StringVar(&o.seeds, "seeds", "1", "comma-separated seeds of the grid")
	fs.StringVar(&o.corpora, "corpora", "gosrc,default", "comma-separated corpora: default (embedded arithmetic), gosrc (Go's source as bytes), or shard paths")
	fs.StringVar(&o.hs, "h", "5,10,30,100", "comma-separated H")
	fs.StringVar(&o.m, "m", "4", "DiLoCo members M of the grid")
	fs.StringVar(&o.codecs, "codecs", "int8,q4,q2,topk", "comma-separated codecs: "+strings.Join(sortedKeys(trafficCodecs), ", "))
	fs.StringVar(&o.outers, "outer", "plain,nesterov", "comma-separated outer optimizers: plain (lr 1, μ 0), nesterov (lr 0.7, μ 0.6), wnesterov (the same momentum kept by each member), nLRmMU (Nesterov, lr LR, μ MU, e.g. n0.8m0.6), wLRmMU (members' momentum); a suffix +ovN overlaps the outer step, applying it N inner steps late")
	fs.IntVar(&o.steps, "steps", 2000, "inner steps per member (= the baselines' steps); H = 100 makes steps/100 outer steps")
	fs.IntVar(&o.parallel, "parallel", 1, "runs at the same time")
	fs.Float64Var(&o.innerLR, "inner-lr", 0, "every run's inner learning rate, the baselines' too (0: the preset's; the minimum is a tenth); use its own -out")
	fs.Float64Var(&o.decay, "decay", 0, "fraction of the steps over which every run's inner LR decays to its minimum (0: the preset's, 0.2); use its own -out")
	fs.Float64Var(&o.budget, "budget", 0.03, "loss budget against one node with an M× batch")
	fs.Float64Var(&o.require, "require", 400, "the traffic reduction required of the frontier's point")
	fs.Float64Var(&o.stretch, "stretch", 4400, "the stretch traffic reduction")
	fs.StringVar(&o.frontierH, "point-h", "", "H of a chosen point: the plan adds its seed 2 and M = 2 and 8 (with their baselines)")
	fs.StringVar(&o.frontierCode, "point", "", "codec/outer of the chosen point, e.g. topk/plain")
	fs.BoolVar(&o.replot, "replot", false, "do not train: rebuild summary and plots from the results file")
	fs.BoolVar(&o.dryPlan, "plan", false, "print the runs that would be made and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.results == "" {
		o.results = filepath.Join(o.out, "results.jsonl")
	}
	plan, err := trafficPlan(o)
	if err != nil {
		return err
	}
	if !o.replot {
		bo := benchOptions{results: o.results, preset: o.preset, steps: o.steps, parallel: o.parallel, dryPlan: o.dryPlan}
		if err := runPlan(context.Background(), bo, plan, stderr); err != nil || o.dryPlan {
			return err
		}
	}
	res, err := readResults(o.results)
	if err != nil {
		return err
	}
	return trafficReport(o, plan, res, stdout)
}

// trafficRunOf is DiLoCo ×m at H with a codec and an outer optimizer of
// the benchmark's tables; its name carries all four.
func trafficRunOf(m, h int, codec, outer string) (sweepRun, error) {
	c, ok := trafficCodecs[codec]
	base, lag, ok3 := trafficOverlap(outer)
	step, ok2 := trafficOuter(base)
	if !ok || !ok2 || !ok3 || lag > h {
		return sweepRun{}, fmt.Errorf("codec %q / outer %q: want one of %v / %v, nLRmMU or wLRmMU, +ovN with N ≤ H", codec, outer, sortedKeys(trafficCodecs), sortedKeys(trafficOuters))
	}
	c.Name = fmt.Sprintf("traffic-m%d-h%d-%s-%s", m, h, codec, outer)
	c.Kind, c.M, c.K, c.H, c.LR, c.Mu, c.WMu, c.Overlap = "diloco", m, 1, h, step.lr, step.mu, step.wmu, lag
	return withOpt(c, train.OptimizerMuon), nil
}

// trafficOverlap cuts an outer optimizer's name OUTER+ovN into OUTER and
// N, the overlapped outer step's lag in inner steps (node --overlap; 0
// when there is no suffix: blocking).
func trafficOverlap(name string) (string, int, bool) {
	base, ov, found := strings.Cut(name, "+ov")
	if !found {
		return name, 0, true
	}
	lag, err := strconv.Atoi(ov)
	return base, lag, err == nil && lag >= 1
}

// trafficPlan lists the runs: per corpus and seed the two baselines and
// the grid; the chosen point's extra seed and member counts.
func trafficPlan(o trafficOptions) ([]benchJob, error) {
	seeds, err := parseSeeds(o.seeds)
	if err != nil {
		return nil, err
	}
	hs, err := parseInts(o.hs)
	if err != nil {
		return nil, fmt.Errorf("-h: %w", err)
	}
	m, err := strconv.Atoi(o.m)
	if err != nil || m < 2 {
		return nil, fmt.Errorf("-m %q: want an integer ≥ 2", o.m)
	}
	var runs []sweepRun
	runs = append(runs, singleRun(1, hs[0], train.OptimizerMuon), singleRun(m, hs[0], train.OptimizerMuon))
	for _, h := range hs {
		for _, c := range splitList(o.codecs) {
			for _, ou := range splitList(o.outers) {
				r, err := trafficRunOf(m, h, c, ou)
				if err != nil {
					return nil, err
				}
				runs = append(runs, r)
			}
		}
	}
	var plan []benchJob
	for _, c := range splitList(o.corpora) {
		for _, s := range seeds {
			for _, r := range runs {
				plan = append(plan, benchJob{corpus: c, seed: s, run: r})
			}
		}
	}
	extra, err := pointPlan(o, m)
	plan = append(plan, extra...)
	for i := range plan {
		plan[i].run.Decay, plan[i].run.InnerLR = o.decay, o.innerLR
	}
	return plan, err
}

// pointPlan is the chosen point's extra runs: seed 2 at M, and M = 2 and 8
// (seed 1) with their M× baselines, on every corpus.
func pointPlan(o trafficOptions, m int) ([]benchJob, error) {
	if o.frontierCode == "" {
		return nil, nil
	}
	h, err := strconv.Atoi(o.frontierH)
	if err != nil {
		return nil, fmt.Errorf("-point-h %q: %w", o.frontierH, err)
	}
	codec, outer, _ := strings.Cut(o.frontierCode, "/")
	var plan []benchJob
	for _, c := range splitList(o.corpora) {
		for _, mm := range []int{m, 2, 8} {
			r, err := trafficRunOf(mm, h, codec, outer)
			if err != nil {
				return nil, err
			}
			seed := uint64(1)
			if mm == m {
				seed = 2
			}
			plan = append(plan, benchJob{corpus: c, seed: seed, run: singleRun(1, 5, train.OptimizerMuon)},
				benchJob{corpus: c, seed: seed, run: singleRun(mm, 5, train.OptimizerMuon)}, benchJob{corpus: c, seed: seed, run: r})
		}
	}
	return plan, nil
}

// trafficRow is one DiLoCo result against its baselines of the same corpus
// and seed.
type trafficRow struct {
	corpus, codec, outer string
	seed                 uint64
	m, h                 int
	inner                int     // inner steps per member: whole phases of H within the baselines' steps
	final, one, big      float64 // DiLoCo, 1 node alone, 1 node with an M× batch
	sent, recv           float64 // bytes per member per inner step
	reduction            float64 // DP bytes over the larger of sent and received
}

// trafficRows pairs every DiLoCo result with its baselines, which trained
// steps inner steps.
func trafficRows(res map[string]sweepResult, steps int) []trafficRow {
	base := map[string]float64{}
	for _, r := range res {
		if r.Run.Kind == "single" {
			base[fmt.Sprintf("%s|%d|%d", r.Data, r.Seed, r.Run.K)] = r.Final
		}
	}
	var rows []trafficRow
	for _, r := range res {
		m, h, codec, outer, ok := parseTrafficName(r.Run.Name)
		if !ok {
			continue
		}
		one, ok1 := base[fmt.Sprintf("%s|%d|1", r.Data, r.Seed)]
		big, ok2 := base[fmt.Sprintf("%s|%d|%d", r.Data, r.Seed, m)]
		if !ok1 || !ok2 || !(r.SentPerInner > 0) {
			continue
		}
		dp := ddpBytes(m, r.Params)
		rows = append(rows, trafficRow{corpus: r.Data, codec: codec, outer: outer, seed: r.Seed, m: m, h: h, inner: steps / h * h, final: r.Final,
			one: one, big: big, sent: r.SentPerInner, recv: r.RecvPerInner, reduction: dp / max(r.SentPerInner, r.RecvPerInner)})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].less(rows[j]) })
	return rows
}

// parseTrafficName cuts a traffic run's name into its parts:
// "traffic-m4-h10-topk-ef1-plain-muon" → 4, 10, "topk-ef1", "plain".
func parseTrafficName(name string) (m, h int, codec, outer string, ok bool) {
	rest, found := strings.CutPrefix(name, "traffic-")
	rest = strings.TrimSuffix(rest, "-"+train.OptimizerMuon)
	parts := strings.Split(rest, "-")
	if !found || len(parts) < 4 {
		return 0, 0, "", "", false
	}
	if _, err := fmt.Sscanf(parts[0]+" "+parts[1], "m%d h%d", &m, &h); err != nil {
		return 0, 0, "", "", false
	}
	return m, h, strings.Join(parts[2:len(parts)-1], "-"), parts[len(parts)-1], true
}

func (a trafficRow) less(b trafficRow) bool {
	if a.corpus != b.corpus {
		return a.corpus < b.corpus
	}
	if a.m != b.m || a.seed != b.seed {
		return a.m < b.m || a.m == b.m && a.seed < b.seed
	}
	if a.codec != b.codec || a.outer != b.outer {
		return a.codec+a.outer < b.codec+b.outer
	}
	return a.h < b.h
}

// vsBig and vsOne are the final loss against the M× batch and against one
// node alone (−0.01 is 1 % lower).
func (r trafficRow) vsBig() float64 { return r.final/r.big - 1 }
func (r trafficRow) vsOne() float64 { return r.final/r.one - 1 }

// trafficReport writes summary.md and a plot per corpus, and the table to w.
func trafficReport(o trafficOptions, plan []benchJob, res map[string]sweepResult, w io.Writer) error {
	rows := trafficRows(res, o.steps)
	var b strings.Builder
	writeTrafficTable(&b, o, rows)
	writeFrontier(&b, o, rows)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if o.dryPlan {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "summary.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	for _, c := range splitList(o.corpora) {
		p := trafficPlot(c, rows)
		if err := writeFile(filepath.Join(o.out, "traffic-"+filepath.Base(c)+".svg"), p.writeSVG); err != nil {
			return err
		}
	}
	return nil
}

// writeTrafficTable writes one row per DiLoCo result.
func writeTrafficTable(b *strings.Builder, o trafficOptions, rows []trafficRow) {
	fmt.Fprintf(b, "# Loss against traffic (%s, %d inner steps per member)\n\n", o.preset, o.steps)
	fmt.Fprintf(b, "Traffic reduction: data-parallel fp32 ring all-reduce bytes per member per inner step, 2·(M−1)/M × 4 × parameters, over the larger of the bytes a member sends and receives per inner step (chunk messages of the averaging; control traffic not included).\n\n")
	fmt.Fprintf(b, "A run whose H does not divide %d trains only its whole outer steps (the inner steps column) and so fewer tokens than its baselines; the frontier below leaves it out.\n\n", o.steps)
	b.WriteString("| corpus | M | seed | H | codec | outer | final loss | vs M× batch | vs 1 node | sent B/inner | recv B/inner | × less than DP | inner steps |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %d | %d | %d | %s | %s | %.4f | %s | %s | %.0f | %.0f | %.0f | %d |\n", r.corpus, r.m, r.seed, r.h, r.codec, r.outer,
			r.final, pct(r.vsBig()), pct(r.vsOne()), r.sent, r.recv, r.reduction, r.inner)
	}
}

// writeFrontier says, per codec and outer optimizer, the cheapest point
// within the budget and below one node alone on every corpus (M of the
// grid, trained as many tokens as its baselines; on each corpus the mean
// of its seeds' ratios, since one seed's spread is as large as the
// budget's margin), and which of those reach the required reduction.
func writeFrontier(b *strings.Builder, o trafficOptions, rows []trafficRow) {
	m, _ := strconv.Atoi(o.m)
	type key struct {
		codec, outer string
		h            int
	}
	type onCorpus struct {
		key
		corpus string
	}
	type sums struct {
		big, one float64
		n        int
	}
	per := map[onCorpus]sums{}
	red := map[key]float64{}
	for _, r := range rows {
		if r.m != m || r.inner != o.steps {
			continue
		}
		k := key{r.codec, r.outer, r.h}
		red[k] = math.Max(red[k], r.reduction)
		s := per[onCorpus{k, r.corpus}]
		per[onCorpus{k, r.corpus}] = sums{s.big + r.vsBig(), s.one + r.vsOne(), s.n + 1}
	}
	ok := map[key]int{}
	for kc, s := range per {
		if s.big/float64(s.n) <= o.budget && s.one/float64(s.n) < 0 {
			ok[kc.key]++
		}
	}
	corpora := len(splitList(o.corpora))
	fmt.Fprintf(b, "\n## Points within +%.0f %% of the %d× batch and below one node alone on all %d corpora (M = %d, the mean over seeds)\n\n", 100*o.budget, m, corpora, m)
	var best key
	for k, n := range ok {
		if n < corpora {
			continue
		}
		fmt.Fprintf(b, "- H = %d, %s, %s: %.0f× less than data-parallel", k.h, k.codec, k.outer, red[k])
		for _, c := range splitList(o.corpora) {
			if s := per[onCorpus{k, c}]; s.n > 0 {
				fmt.Fprintf(b, "; %s %s vs the batch, %s vs 1 node (%d seeds)", c, pct(s.big/float64(s.n)), pct(s.one/float64(s.n)), s.n)
			}
		}
		b.WriteString("\n")
		if red[k] > red[best] {
			best = k
		}
	}
	if best.codec == "" {
		b.WriteString("- none\n")
		return
	}
	fmt.Fprintf(b, "\nCheapest: H = %d, %s, %s at %.0f× (required %.0f×: %s; stretch %.0f×: %s).\n", best.h, best.codec, best.outer,
		red[best], o.require, metWord(red[best] >= o.require), o.stretch, metWord(red[best] >= o.stretch))
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// trafficColors colour the plot's lines by codec.
var trafficColors = map[string]string{"int8": "#1f77b4", "q4": "#2ca02c", "q2": "#ff7f0e", "topk": "#d62728", "topk-ef1": "#9467bd", "topk-4bit": "#8c564b"}

// trafficPlot is corpus c's loss (against the M× batch) over the traffic
// reduction, one line per codec and outer optimizer through its H values
// (M of seed 1's largest group), with one node alone as a dashed level.
func trafficPlot(c string, rows []trafficRow) plot {
	p := plot{Title: "Loss against traffic, " + c, XLabel: "× less traffic than data-parallel (log)",
		YLabel: "final loss vs 1 node with an M× batch (%)", XMin: math.NaN(), LogX: true, YZero: true}
	lines := map[string]*line{}
	var one []float64
	var xs []float64
	for _, r := range rows {
		if r.corpus != c || r.seed != 1 || r.m != 4 {
			continue
		}
		name := r.codec + ", " + r.outer
		l := lines[name]
		if l == nil {
			l = &line{Label: name, Color: trafficColors[r.codec], Dashed: r.outer != "plain"}
			lines[name] = l
		}
		l.X, l.Y = append(l.X, r.reduction), append(l.Y, 100*r.vsBig())
		one, xs = append(one, 100*(r.one/r.big-1)), append(xs, r.reduction)
	}
	for _, name := range sortedKeys(lines) {
		l := lines[name]
		sortXY(l)
		p.Lines = append(p.Lines, *l)
	}
	if len(one) > 0 {
		lo, hi := minMax(xs)
		p.Lines = append(p.Lines, line{Label: "1 node alone", Color: "#7f7f7f", Dashed: true, X: []float64{lo, hi}, Y: []float64{one[0], one[0]}})
	}
	return p
}

// sortXY orders a line's points by x.
func sortXY(l *line) {
	idx := make([]int, len(l.X))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return l.X[idx[a]] < l.X[idx[b]] })
	x, y := make([]float64, len(idx)), make([]float64, len(idx))
	for i, j := range idx {
		x[i], y[i] = l.X[j], l.Y[j]
	}
	l.X, l.Y = x, y
}

func minMax(xs []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// splitList splits a comma-separated flag, trimming blanks.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q: want positive integers", s)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: empty", s)
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
