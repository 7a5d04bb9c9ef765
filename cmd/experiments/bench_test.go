package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRuns(t *testing.T) {
	rs, err := parseRuns("single:k=4; diloco:m=8,h=5,lr=1,mu=0,codec=fp32,ov=1", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].K != 4 || rs[0].H != 20 || rs[1].M != 8 || rs[1].H != 5 || rs[1].LR != 1 ||
		rs[1].Mu != 0 || rs[1].Codec != "fp32" || rs[1].Overlap != 1 {
		t.Fatalf("parsed %+v", rs)
	}
	for _, bad := range []string{"dilo:m=2", "diloco:m", "diloco:m=x", "diloco:q=1", "diloco:m=0", "diloco:codec=int4"} {
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
	if len(res) != 5 { // 1×, 2×, DiLoCo int8, fp32, overlapped
		t.Fatalf("%d results, want 5", len(res))
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
