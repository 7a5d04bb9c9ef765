package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTrafficName(t *testing.T) {
	r, err := trafficRunOf(4, 10, "topk-ef1", "plain")
	if err != nil {
		t.Fatal(err)
	}
	m, h, codec, outer, ok := parseTrafficName(r.Name)
	if !ok || m != 4 || h != 10 || codec != "topk-ef1" || outer != "plain" {
		t.Fatalf("%s → %d %d %q %q %v", r.Name, m, h, codec, outer, ok)
	}
	if r.Codec != "robust-topk" || r.Beta != 1 || r.LR != 1 || r.Mu != 0 {
		t.Fatalf("run %+v", r)
	}
	for _, bad := range []string{"single-4x-muon", "traffic-m4", "traffic-mx-h10-q4-plain"} {
		if _, _, _, _, ok := parseTrafficName(bad); ok {
			t.Errorf("%q parses", bad)
		}
	}
	if _, err := trafficRunOf(4, 10, "zip", "plain"); err == nil {
		t.Error("unknown codec accepted")
	}
	r, err = trafficRunOf(4, 30, "q2", "n0.8m0.5")
	if _, _, _, outer, ok := parseTrafficName(r.Name); err != nil || !ok || outer != "n0.8m0.5" || r.LR != 0.8 || r.Mu != 0.5 {
		t.Fatalf("n0.8m0.5: %+v, %v", r, err)
	}
	r, err = trafficRunOf(4, 26, "q2", "nesterov+ov1")
	if _, _, _, outer, ok := parseTrafficName(r.Name); err != nil || !ok || outer != "nesterov+ov1" || r.Overlap != 1 || r.LR != 0.7 {
		t.Fatalf("nesterov+ov1: %+v, %v", r, err)
	}
	for _, bad := range []string{"n0.8", "n0m0.5", "n0.8m1", "x0.8m0.5", "nfast", "plain+ov0", "plain+ov", "plain+ov31", "plain+ovx"} {
		if _, err := trafficRunOf(4, 30, "q2", bad); err == nil {
			t.Errorf("outer %q accepted", bad)
		}
	}
}

// TestTrafficDecay: -decay reaches every run of the plan, baselines
// included, and the run's training options.
func TestTrafficDecay(t *testing.T) {
	o := trafficOptions{seeds: "1", corpora: "gosrc", hs: "60", m: "4", codecs: "q4", outers: "nesterov", decay: 1, innerLR: 2e-3,
		frontierH: "60", frontierCode: "q4/nesterov"}
	plan, err := trafficPlan(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 3+9 {
		t.Fatalf("%d runs, want 12", len(plan))
	}
	for _, j := range plan {
		opts, err := sweepOptions(j.run, j.seed, "tiny", 2000)
		if err != nil {
			t.Fatal(err)
		}
		if opts.LR != 2e-3 || opts.MinLR != 2e-4 {
			t.Errorf("%s: LR %v, MinLR %v", j.run.Name, opts.LR, opts.MinLR)
		}
		if j.run.Decay != 1 || opts.DecayFrac != 1 || opts.LRAt(1000) >= opts.LR {
			t.Errorf("%s: decay %v, DecayFrac %v, LR at step 1000 %v of %v", j.run.Name, j.run.Decay, opts.DecayFrac, opts.LRAt(1000), opts.LR)
		}
	}
	o.decay, o.innerLR = 0, 0
	plan, _ = trafficPlan(o)
	if opts, _ := sweepOptions(plan[0].run, 1, "tiny", 2000); opts.DecayFrac != 0.2 || opts.LR != 3e-3 {
		t.Errorf("no -decay, -inner-lr: DecayFrac %v, LR %v, want the preset's 0.2, 3e-3", opts.DecayFrac, opts.LR)
	}
}

// TestTrafficReport: the table pairs each run with its baselines, the
// reduction is DP bytes over the larger direction, the frontier names the
// cheapest point within budget on every corpus that trained as many tokens
// as its baselines, and the plots are written.
func TestTrafficReport(t *testing.T) {
	o := trafficOptions{out: t.TempDir(), corpora: "a,b", m: "4", preset: "tiny", steps: 100, budget: 0.03, require: 400, stretch: 4400}
	res := map[string]sweepResult{}
	add := func(corpus string, run sweepRun, final, sent float64) {
		r := sweepResult{Run: run, Seed: 1, Data: corpus, Final: final, Eval: []float64{final}, Tokens: []int64{1},
			SentPerInner: sent, RecvPerInner: sent / 2, Params: 1000}
		res[benchJob{corpus: corpus, seed: 1, run: run}.key()] = r
	}
	for _, c := range []string{"a", "b"} {
		add(c, singleRun(1, 5, "muon"), 2.0, 0)
		add(c, singleRun(4, 5, "muon"), 1.8, 0)
		for _, p := range []struct {
			h     int
			codec string
			loss  float64
		}{{5, "int8", 1.82}, {10, "topk", 1.84}, {30, "topk", 1.9}, {40, "topk", 1.83}} {
			r, _ := trafficRunOf(4, p.h, p.codec, "plain")
			add(c, r, p.loss, 6000/float64(p.h*p.h)) // DP: 6000 B per inner step
		}
	}
	var out strings.Builder
	if err := trafficReport(o, nil, res, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"| a | 4 | 1 | 10 | topk | plain | 1.8400 |", "Cheapest: H = 10, topk, plain at 100×", "required 400×: missed"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "H = 30, topk") {
		t.Errorf("a point above the budget is on the frontier:\n%s", s)
	}
	if !strings.Contains(s, "| a | 4 | 1 | 40 | topk | plain | 1.8300 | +1.67 % | -8.50 % | 4 | 2 | 1600 | 80 |") || strings.Contains(s, "H = 40, topk") {
		t.Errorf("H = 40 trains 80 of 100 steps: want it in the table with 80 inner steps, not on the frontier:\n%s", s)
	}
	for _, f := range []string{"summary.md", "traffic-a.svg", "traffic-b.svg"} {
		if _, err := os.Stat(filepath.Join(o.out, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestTrafficFrontierSeedMean: a point is judged by the mean of its
// seeds' ratios on each corpus, so one seed over the budget does not take
// it off the frontier when the mean is within, and one seed within does not
// put it on when the mean is over.
func TestTrafficFrontierSeedMean(t *testing.T) {
	o := trafficOptions{out: t.TempDir(), corpora: "a", m: "4", preset: "tiny", steps: 100, budget: 0.03, require: 400, stretch: 4400}
	res := map[string]sweepResult{}
	add := func(seed uint64, run sweepRun, final, sent float64) {
		r := sweepResult{Run: run, Seed: seed, Data: "a", Final: final, Eval: []float64{final}, Tokens: []int64{1},
			SentPerInner: sent, RecvPerInner: sent, Params: 1000}
		res[benchJob{corpus: "a", seed: seed, run: run}.key()] = r
	}
	for seed, pair := range map[uint64][2]float64{1: {1.0330, 1.0420}, 2: {1.0190, 1.0250}} {
		add(seed, singleRun(1, 5, "muon"), 2.0, 0)
		add(seed, singleRun(4, 5, "muon"), 1.0, 0)
		r10, _ := trafficRunOf(4, 10, "q2", "plain")
		r20, _ := trafficRunOf(4, 20, "q2", "plain")
		add(seed, r10, pair[0], 10)
		add(seed, r20, pair[1], 5)
	}
	var out strings.Builder
	if err := trafficReport(o, nil, res, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "- H = 10, q2, plain: 600× less than data-parallel; a +2.60 % vs the batch, -48.70 % vs 1 node (2 seeds)") {
		t.Errorf("H = 10 (seeds +3.3 %%, +1.9 %%; mean +2.6 %%) is not on the frontier with its mean:\n%s", s)
	}
	if strings.Contains(s, "H = 20, q2") {
		t.Errorf("H = 20 (seeds +4.2 %%, +2.5 %%; mean +3.35 %%) is on the frontier:\n%s", s)
	}
}

func TestParseBytesMetric(t *testing.T) {
	text := `# HELP intellect_p2p_bytes_total x
intellect_p2p_bytes_total{direction="sent",protocol="/meshsub/1.3.0"} 1.5e+06
intellect_p2p_bytes_total{direction="received",protocol="/meshsub/1.3.0"} 42
intellect_other 7
`
	got, err := parseBytesMetric(strings.NewReader(text))
	if err != nil || got["/meshsub/1.3.0|sent"] != 1.5e6 || got["/meshsub/1.3.0|received"] != 42 || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
}
