package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/node"
)

func TestParseRuns(t *testing.T) {
	rs, err := parseRuns("single:k=4,decay=0.5; diloco:m=8,h=5,lr=1,mu=0,codec=fp32,ov=1", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].K != 4 || rs[0].H != 20 || rs[0].Decay != 0.5 || rs[1].M != 8 || rs[1].H != 5 || rs[1].LR != 1 ||
		rs[1].Mu != 0 || rs[1].Codec != "fp32" || rs[1].Overlap != 1 || rs[1].Decay != 0 {
		t.Fatalf("parsed %+v", rs)
	}
	// the inner optimizer applies to the single baselines as to DiLoCo
	rs, err = parseRuns("single:k=1,opt=muon; single:k=4,opt=muon; diloco:m=4,h=5,lr=1,mu=0,codec=robust,opt=muon; single:k=4", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 || rs[0].Optimizer != "muon" || rs[1].Optimizer != "muon" || rs[1].K != 4 || rs[2].Optimizer != "muon" || rs[3].Optimizer != "" {
		t.Fatalf("parsed %+v", rs)
	}
	for _, bad := range []string{"dilo:m=2", "diloco:m", "diloco:m=x", "diloco:q=1", "diloco:m=0", "diloco:codec=int4", "single:k=4,opt=sgd", "diloco:m=4,opt=", "diloco:decay=0", "diloco:decay=1.5"} {
		if _, err := parseRuns(bad, 20); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestBenchPlan(t *testing.T) {
	plan, err := benchPlan(benchOptions{seeds: "1,2", ms: "2,4,8", corpora: "default,gosrc", h: 20, fp32: true})
	if err != nil {
		t.Fatal(err)
	}
	// per corpus and seed: 1×, then (M×, DiLoCo) for each M, then fp32 and overlapped at M = 4
	if want := 2 * 2 * (1 + 2*3 + 2); len(plan) != want {
		t.Fatalf("%d runs, want %d", len(plan), want)
	}
	keys := map[string]bool{}
	for _, j := range plan {
		if keys[j.key()] {
			t.Errorf("run %s planned twice", j.key())
		}
		keys[j.key()] = true
	}
	if _, err := benchPlan(benchOptions{seeds: "1", ms: "1", corpora: "default", h: 20}); err == nil {
		t.Error("-m 1 accepted")
	}
}

// The benchmark measures what a node does by default: robust averaging
// (int8), and plain mean for fp32 as --fp32 implies; the run names say which,
// so that the older plain int8 mean rows are never read as robust ones.
func TestBenchPlanShippedDefaults(t *testing.T) {
	if node.DefaultAveraging != node.AveragingRobust || shippedCodec() != "robust" {
		t.Fatalf("default averaging %q, shipped codec %q", node.DefaultAveraging, shippedCodec())
	}
	plan, err := benchPlan(benchOptions{seeds: "1", ms: "2,4,8", corpora: "gosrc", h: 5, fp32: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]sweepRun{
		"diloco-2-robust":          {Codec: "robust", M: 2},
		"diloco-4-robust":          {Codec: "robust", M: 4},
		"diloco-8-robust":          {Codec: "robust", M: 8},
		"diloco-4-fp32":            {Codec: "fp32", M: 4},
		"diloco-4-robust-overlap1": {Codec: "robust", M: 4, Overlap: 1},
	}
	for _, j := range plan {
		r := j.run
		if r.Kind != "diloco" {
			continue
		}
		w, ok := want[r.Name]
		if !ok {
			t.Errorf("unexpected DiLoCo run %s (codec %s)", r.Name, r.Codec)
			continue
		}
		delete(want, r.Name)
		if r.Codec != w.Codec || r.M != w.M || r.Overlap != w.Overlap || r.H != node.Int8Point.InnerSteps || r.LR != node.Int8Point.OuterLR {
			t.Errorf("%s: %+v", r.Name, r)
		}
		if r.Mu != node.Int8Point.OuterMomentum {
			t.Errorf("%s: outer momentum %v, want %v", r.Name, r.Mu, node.Int8Point.OuterMomentum)
		}
	}
	for name := range want {
		t.Errorf("%s not planned", name)
	}
}

// fakeResults holds gosrc results made up for the report tests.
type fakeResults map[string]sweepResult

// add records run's result at seed with final loss final.
func (res fakeResults) add(run string, seed uint64, final float64) {
	r := sweepResult{Run: sweepRun{Name: run}, Seed: seed, Data: "gosrc", Tokens: []int64{1, 2}, Eval: []float64{3, final}, Final: final}
	res[benchJob{corpus: r.Data, seed: seed, run: r.Run}.key()] = r
}

// reportOf returns the summary benchReport prints for plan and res,
// failing t unless it has every line of want.
func reportOf(t *testing.T, o benchOptions, plan []benchJob, res fakeResults, want ...string) string {
	t.Helper()
	var w strings.Builder
	if err := benchReport(o, plan, res, &w); err != nil {
		t.Fatal(err)
	}
	sum := w.String()
	for _, s := range want {
		if !strings.Contains(sum, s) {
			t.Errorf("summary lacks %q:\n%s", s, sum)
		}
	}
	return sum
}

// The summary's table and comparisons are the shipped defaults' rows; the
// plain int8 mean's rows follow as a reference, compared over common seeds.
func TestBenchReportShippedDefaults(t *testing.T) {
	res := fakeResults{}
	add := res.add
	for _, seed := range []uint64{1, 2} {
		add("single-1x", seed, 2.4)
		add("single-4x", seed, 2.0)
		add("diloco-4-robust", seed, 2.04)
		add("diloco-4-fp32", seed, 2.02)
		add("diloco-4-robust-overlap1", seed, 2.0604)
	}
	add("diloco-4-int8", 1, 2.06)         // one seed only: compared with robust on seed 1
	add("diloco-4-int8-overlap1", 1, 2.1) // the old overlapped run
	add("diloco-4-robust", 9, 1.0)        // a seed outside the plan: ignored
	out := t.TempDir()
	o := benchOptions{out: out, seeds: "1,2", ms: "4", corpora: "gosrc", h: 5, steps: 10, fp32: true}
	plan, err := benchPlan(o)
	if err != nil {
		t.Fatal(err)
	}
	sum := reportOf(t, o, plan, res,
		"robust averaging",
		"| gosrc | 4 | 2.4000 [2.4000–2.4000] | 2.0000 [2.0000–2.0000] | 2.0400 [2.0400–2.0400] | +2.00 % | -15.00 % | 2 |",
		"robust 2.0400 [2.0400–2.0400] vs fp32 (plain mean) 2.0200 [2.0200–2.0200]: **+0.99 %** (2 seeds)",
		"overlapped (average applied after 1 inner step) 2.0604 [2.0604–2.0604] vs blocking 2.0400 [2.0400–2.0400]: **+1.00 %** (2 seeds)",
		"Reference: plain int8 mean",
		"| gosrc | 4 | 2.0600 | +3.00 % | -14.17 % | -0.97 % (1 seed) | 1 |",
		"plain int8 mean: overlapped 2.1000 vs blocking 2.0600: +1.94 % (1 seed)",
	)
	if file, err := os.ReadFile(filepath.Join(out, "summary.md")); err != nil || string(file) != sum {
		t.Errorf("summary.md differs from the table printed (%v)", err)
	}
	svg, err := os.ReadFile(filepath.Join(out, "eval-gosrc.svg"))
	if err != nil || !strings.Contains(string(svg), "DiLoCo ×4 (robust)") {
		t.Errorf("plot lacks the robust DiLoCo line (%v)", err)
	}
}

// -plan lists the runs and leaves the results, summary and plots alone.
func TestBenchPlanOnly(t *testing.T) {
	out := t.TempDir()
	var log strings.Builder
	if err := benchRun([]string{"-out", out, "-m", "4", "-seeds", "1", "-corpora", "gosrc", "-plan"}, io.Discard, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "gosrc|1|diloco-4-robust-overlap1") {
		t.Errorf("plan:\n%s", log.String())
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("-plan wrote %d files", len(ents))
	}
}

func TestReadResultsRejects(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"garbage":    "not json\n",
		"incomplete": `{"run":{"name":"x"},"seed":1,"data":"default","tokens":[1],"eval":[],"final":1}` + "\n",
		"nan":        `{"run":{"name":"x"},"seed":1,"data":"default","tokens":[1],"eval":[2],"final":null}` + "\n",
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := readResults(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if r, err := readResults(filepath.Join(dir, "missing")); err != nil || len(r) != 0 {
		t.Errorf("missing file: %v, %d results", err, len(r))
	}
}

// A miniature benchmark end to end: it trains, writes results, summary and
// a well-formed plot, and a second run resumes without training again.
func TestBenchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains")
	}
	out := t.TempDir()
	args := []string{"-out", out, "-steps", "4", "-h", "2", "-m", "2", "-seeds", "1", "-corpora", "default"}
	if err := benchRun(args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	res, err := readResults(filepath.Join(out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5 { // 1×, 2×, DiLoCo robust, fp32, overlapped robust
		t.Fatalf("%d results, want 5", len(res))
	}
	opt := node.DefaultOptimizer
	for _, name := range []string{defaultDiLoCo(2, 2, "robust", opt).Name, defaultDiLoCo(2, 2, "fp32", opt).Name, overlapDiLoCo(2, 2, "robust", opt).Name} {
		if _, ok := res["default|1|"+name]; !ok {
			t.Errorf("no result of %s", name)
		}
	}
	for k, r := range res {
		if len(r.Eval) != 2 || !(r.Final > 0) {
			t.Errorf("%s: curve %v final %v", k, r.Eval, r.Final)
		}
	}
	sum, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil || !strings.Contains(string(sum), "| default | 2 |") {
		t.Fatalf("summary: %v\n%s", err, sum)
	}
	svg, err := os.ReadFile(filepath.Join(out, "eval-default.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Errorf("plot is not well-formed XML: %v", err)
	}
	before, _ := os.Stat(filepath.Join(out, "results.jsonl"))
	if err := benchRun(args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(filepath.Join(out, "results.jsonl"))
	if after.Size() != before.Size() {
		t.Errorf("second run trained again: results grew from %d to %d bytes", before.Size(), after.Size())
	}
}

// TestBenchReportOtherOptimizer: with -opt muon every run of the plan
// carries the optimizer in its name and its sweep run, the table is Muon's
// against Muon's own baselines, and AdamW's rows of the results file are
// the reference, each against AdamW's baselines.
func TestBenchReportOtherOptimizer(t *testing.T) {
	o := benchOptions{out: t.TempDir(), seeds: "1", ms: "4", corpora: "gosrc", h: 5, steps: 10, fp32: true, opt: "muon"}
	plan, err := benchPlan(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range plan {
		if !strings.HasSuffix(j.run.Name, "-muon") || j.run.Optimizer != "muon" {
			t.Fatalf("planned run %+v", j.run)
		}
	}
	res := fakeResults{}
	add := func(run string, final float64) { res.add(run, 1, final) }
	add("single-1x-muon", 2.2)
	add("single-4x-muon", 1.85)
	add("diloco-4-robust-muon", 1.887)
	add("single-1x", 2.4)
	add("single-4x", 2.0)
	add("diloco-4-robust", 2.06)
	reportOf(t, o, plan, res,
		"inner optimizer muon (the baselines' too)",
		"| gosrc | 4 | 2.2000 | 1.8500 | 1.8870 | +2.00 % | -14.23 % | 1 |",
		"Reference: AdamW as the inner optimizer",
		"| gosrc | 4 | 2.0600 | +3.00 % | -14.17 % | -8.40 % (1 seed) | 1 |",
	)
}
