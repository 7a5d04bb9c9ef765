package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/internal/nat"
	"github.com/intellect-node/intellect-node/node"
)

// TestRelayBytes: only bytes received on circuit relay streams count; other
// protocols, the sent direction, HELP/TYPE lines and other metrics do not;
// go-libp2p's relay service counter is read beside it.
func TestRelayBytes(t *testing.T) {
	text := `# HELP intellect_p2p_bytes_total Application bytes on libp2p streams by protocol and direction.
# TYPE intellect_p2p_bytes_total counter
intellect_p2p_bytes_total{direction="received",protocol="/libp2p/circuit/relay/0.2.0/hop"} 1000
intellect_p2p_bytes_total{direction="sent",protocol="/libp2p/circuit/relay/0.2.0/hop"} 999
intellect_p2p_bytes_total{direction="received",protocol="/libp2p/circuit/relay/0.2.0/stop"} 2.5e3
intellect_p2p_bytes_total{direction="received",protocol="/intellect/allreduce/1.0.0"} 7e6
intellect_outer_steps_total 8
# TYPE libp2p_relaysvc_data_transferred_bytes_total counter
libp2p_relaysvc_data_transferred_bytes_total 3300
libp2p_relaysvc_connections_total{type="opened"} 40
`
	got, err := relayBytes(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got != (relayCount{Streams: 3500, Service: 3300}) {
		t.Errorf("relayBytes = %+v, want 3500 on streams, 3300 by the service", got)
	}
	if _, err := relayBytes(strings.NewReader(`intellect_p2p_bytes_total{direction="received",protocol="/libp2p/circuit/relay/0.2.0/hop"} x`)); err == nil {
		t.Error("a malformed value must be an error")
	}
}

// TestPairTimer: a pair's delay runs from the later join to the first
// direct observation; relayed or not-connected observations do not count;
// a restart starts the member's pairs over.
func TestPairTimer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newPairTimer(3)
	p.join(0, t0)
	p.join(1, t0.Add(2*time.Second))
	p.observe(0, 1, false, t0.Add(3*time.Second)) // relayed: not yet
	p.observe(1, 0, true, t0.Add(5*time.Second))
	p.observe(0, 1, true, t0.Add(6*time.Second)) // later view of the same pair
	if d, ok := p.delay(0, 1); !ok || d != 3*time.Second {
		t.Errorf("delay(0,1) = %v, %v; want 3s", d, ok)
	}
	if _, ok := p.delay(0, 2); ok {
		t.Error("site 2 never joined, yet its pair has a delay")
	}
	p.join(1, t0.Add(10*time.Second)) // restart
	if _, ok := p.delay(1, 0); ok {
		t.Error("a restart must start the pair over")
	}
	p.observe(0, 1, true, t0.Add(11*time.Second))
	if d, _ := p.delay(1, 0); d != time.Second {
		t.Errorf("after restart delay = %v, want 1s", d)
	}
}

func rec(step uint64, members int, hash string, compute, wall, ar float64) node.OuterRecord {
	return node.OuterRecord{Step: step, Members: members, ModelHash: hash, ComputeSec: compute, WallSec: wall, AllReduceSec: ar}
}

// TestSummarizeHistories: a split (two rings of two) is
// found at every step it lasts; utilization counts full rings after warm-up
// only; a member left out of final does not spoil the common step.
func TestSummarizeHistories(t *testing.T) {
	split := [][]node.OuterRecord{
		{rec(1, 2, "a1", 2, 2.5, 0.5), rec(2, 2, "a2", 2, 2.5, 0.5)},
		{rec(1, 2, "a1", 2, 2.5, 0.5), rec(2, 2, "a2", 2, 2.5, 0.5)},
		{rec(1, 2, "b1", 2, 2.5, 0.5), rec(2, 2, "b2", 2, 2.5, 0.5)},
		{rec(1, 2, "b1", 2, 2.5, 0.5)},
	}
	s := summarizeHistories(split, []int{0, 1, 2, 3}, 0, 4)
	if !slices.Equal(s.Splits, []uint64{1, 2}) || s.Identical || s.CommonStep != 1 || s.MaxRing != 2 {
		t.Errorf("split run: %+v", s)
	}
	if s.MinStep != 1 || s.MaxStep != 2 || s.Samples != 0 || !math.IsNaN(s.Utilization) {
		t.Errorf("split run steps/samples: %+v", s)
	}
	whole := [][]node.OuterRecord{
		{rec(1, 4, "h1", 2, 4, 2), rec(2, 4, "h2", 2, 2.5, 0.5), rec(3, 4, "h3", 2, 2.5, 0.5)},
		{rec(1, 4, "h1", 2, 4, 2), rec(2, 4, "h2", 2, 2.5, 0.5), rec(3, 4, "h3", 2, 2.5, 0.5)},
		{rec(1, 4, "h1", 2, 4, 2), rec(2, 3, "h2", 2, 2, 0.1)}, // leaves after step 2
	}
	s = summarizeHistories(whole, []int{0, 1}, 1, 2)
	if len(s.Splits) != 0 || !s.Identical || s.CommonStep != 3 {
		t.Errorf("whole run: %+v", s)
	}
	if s.Samples != 5 || math.Abs(s.Utilization-10/12.0) > 1e-12 || s.AllReduceSec != 0.5 {
		t.Errorf("utilization %v over %d samples, all-reduce median %v; want 10/12 over 5, 0.5", s.Utilization, s.Samples, s.AllReduceSec)
	}
}

// TestReportFigures: the figures pass and fail where the targets
// say: cone pairs within 10 s, NAT within 5 % of no-NAT, relay < 1 MiB per
// step, identical hashes in every run.
func TestReportFigures(t *testing.T) {
	cone := [2]nat.Kind{nat.Cone, nat.Cone}
	good := []runResult{
		{Case: caseSpec{Name: "nonat"}, Hist: histSummary{MinStep: 8, MaxStep: 8, Identical: true, Samples: 4, Utilization: 0.90, AllReduceSec: 0.30}},
		{Case: caseSpec{Name: "a"}, Hist: histSummary{MinStep: 8, MaxStep: 8, Identical: true, Samples: 4, Utilization: 0.89, AllReduceSec: 0.31},
			RelayBytes: 8 * 100 << 10, Pairs: []pairResult{{Kinds: cone, Direct: true, Delay: 2 * time.Second}}},
	}
	if err := newReport(config{}, good).verdict(); err != nil {
		t.Errorf("good runs fail: %v", err)
	}
	rows := newReport(config{}, good).rows([]string{"natlab", "-repeat", "1"}, time.Now())
	if len(rows) != 4 {
		t.Fatalf("%d results.md rows, want one per figure", len(rows))
	}
	for _, r := range rows {
		if r.Met != "yes" || r.Command != "natlab -repeat 1" || r.Page != "nat.md" || r.Date == "" {
			t.Errorf("results.md row %+v", r)
		}
	}
	for name, mutate := range map[string]func(rs []runResult){
		"pair direct after 11 s": func(rs []runResult) { rs[1].Pairs[0].Delay = 11 * time.Second },
		"pair never direct":      func(rs []runResult) { rs[1].Pairs[0].Direct = false },
		"utilization 6 % lower":  func(rs []runResult) { rs[1].Hist.Utilization = 0.846 },
		"all-reduce 6 % longer":  func(rs []runResult) { rs[1].Hist.AllReduceSec = 0.318 },
		"relay 1 MiB per step":   func(rs []runResult) { rs[1].RelayBytes = 8 << 20 },
		"hashes differ":          func(rs []runResult) { rs[1].Hist.Identical = false },
	} {
		rs := slices.Clone(good)
		rs[1].Pairs = slices.Clone(good[1].Pairs)
		mutate(rs)
		if err := newReport(config{}, rs).verdict(); err == nil {
			t.Errorf("%s: the report passes", name)
		}
	}
}

// TestCases: the cases exist as docs/nat.md lists them, and the cone pairs
// counted for the 95 % figure are the ones between two cone homes.
func TestCases(t *testing.T) {
	cs, err := lookupCases([]string{"d", "a", "nonat", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if names := []string{cs[0].Name, cs[1].Name, cs[2].Name, cs[3].Name, cs[4].Name}; !slices.Equal(names, []string{"nonat", "a", "b", "c", "d"}) {
		t.Errorf("order %v", names)
	}
	if _, err := lookupCases([]string{"e"}); err == nil {
		t.Error("unknown case accepted")
	}
	if got := natPairs(cs[2].Kinds, nat.Cone); !slices.Equal(got, [][2]int{{1, 2}}) {
		t.Errorf("case b cone pairs %v", got)
	}
	if cs[3].Event != restart || cs[3].Kinds[cs[3].EventSite] == nat.Public || cs[4].Event != leave || cs[4].Kinds[cs[4].EventSite] != nat.Public {
		t.Error("case c must restart a NATed member, case d stop the public one")
	}
}

func TestWithEndModel(t *testing.T) {
	recs := []node.OuterRecord{rec(0, 0, "h0", 0, 0, 0)}
	got := withEndModel(recs, []byte(`{"outer_step": 8, "model_hash": "h8"}`))
	if len(got) != 2 || got[1].Step != 8 || got[1].ModelHash != "h8" || got[1].Members != 0 {
		t.Fatalf("a syncing member's end model: %+v", got)
	}
	full := []node.OuterRecord{rec(8, 3, "h8", 1, 1, 0)}
	if got := withEndModel(full, []byte(`{"outer_step": 8, "model_hash": "h8"}`)); len(got) != 1 {
		t.Fatalf("a member that recorded its last step got %+v", got)
	}
	if got := withEndModel(recs, []byte(`not json`)); len(got) != 1 {
		t.Fatalf("a bad status changed the history: %+v", got)
	}
}

func TestEndModelFromCheckpoint(t *testing.T) {
	home := t.TempDir()
	status := []byte(`{"outer_step": 5, "model_hash": "h5"}`)
	if got := endModel(home, status); string(got) != string(status) {
		t.Fatalf("no checkpoint: %s, want the status", got)
	}
	for _, step := range []string{"step-00000007", "step-00000008"} {
		dir := filepath.Join(home, "checkpoints", step)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "node.json"), []byte(`{"step": `+step[len(step)-1:]+`, "hash": "h`+step[len(step)-1:]+`"}`), 0o644)
	}
	got := withEndModel([]node.OuterRecord{rec(0, 0, "h0", 0, 0, 0)}, endModel(home, status))
	if last := got[len(got)-1]; last.Step != 8 || last.ModelHash != "h8" {
		t.Fatalf("end model %+v, want step 8 h8 from the newest checkpoint", last)
	}
}
