package main

// End-to-end tests of the run manifest: joiners configured by the manifest
// alone, contradicting flags, and nodes of other manifests bridged into a
// running network (a stalling and a hijacking case).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/node"
)

// simArgs makes a node cheap: the sim device, a few ms per inner step.
var simArgs = []string{"--device", "sim", "--sim-step", "5ms"}

// exitErr waits for p to exit and returns the error `start` printed (its
// last line "intellect-node start: …"); it fails if p succeeds or takes
// longer than a minute.
func exitErr(t *testing.T, p *proc) string {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not exit\n%s", p.name, p.logText())
	}
	if p.err == nil {
		t.Fatalf("%s exited 0, want an error\n%s", p.name, p.logText())
	}
	lines := strings.Split(strings.TrimSpace(p.logText()), "\n")
	msg, ok := strings.CutPrefix(lines[len(lines)-1], "intellect-node start: ")
	if !ok {
		t.Fatalf("%s printed no command error\n%s", p.name, p.logText())
	}
	return msg
}

// TestJoinerFromManifest: a joiner given only --bootstrap (and local flags)
// gets the run manifest, trains in the creator's rings and ends with the
// same model hashes; joiners with a contradicting flag or another pinned
// manifest refuse to start and say why.
func TestJoinerFromManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process e2e test")
	}
	const steps = 3
	local := append([]string{"--min-members", "2", "--max-outer-steps", fmt.Sprint(steps)}, simArgs...)
	a := startNode(t, "a", "", append([]string{"--run", "m13", "--preset", "tiny", "--inner-steps", "4"}, local...)...)
	boot := bootstrapAddr(t, a)
	raw, err := os.ReadFile(filepath.Join(a.home, node.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	id := node.ManifestID(raw)

	bad := startNode(t, "bad", "", append([]string{"--bootstrap", boot, "--inner-steps", "10", "--preset", "tiny"}, local...)...)
	want := fmt.Sprintf("flag --inner-steps 10 contradicts the run manifest %s: inner_steps = 4", id[:12])
	if msg := exitErr(t, bad); !strings.Contains(msg, want) || strings.Contains(msg, "--preset tiny contradicts") {
		t.Errorf("contradicting joiner: want %q (and nothing on --preset), got %q", want, msg)
	}
	pinned := startNode(t, "pinned", "", append([]string{"--bootstrap", boot, "--manifest", strings.Repeat("0", 64)}, local...)...)
	if msg := exitErr(t, pinned); !strings.Contains(msg, "does not match its id") || !strings.Contains(msg, id) {
		t.Errorf("joiner pinned to another manifest: want a mismatch naming %s, got %q", id, msg)
	}

	b := startNode(t, "b", "", append([]string{"--bootstrap", boot}, local...)...)
	for _, p := range []*proc{a, b} {
		select {
		case <-p.done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s did not finish %d outer steps\n%s", p.name, steps, p.logText())
		}
		if p.err != nil {
			t.Fatalf("%s exited with %v", p.name, p.err)
		}
	}
	got, err := os.ReadFile(filepath.Join(b.home, node.ManifestFile))
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("joiner's manifest differs from the creator's: %v\n%s\n%s", err, got, raw)
	}
	ha, hb := byStep(readHistoryFile(t, a)), byStep(readHistoryFile(t, b))
	for s := uint64(1); s <= steps; s++ {
		if ha[s].ModelHash == "" || ha[s].ModelHash != hb[s].ModelHash || ha[s].Members != 2 {
			t.Errorf("step %d: a %+v, b %+v: want one ring of 2, same hash", s, ha[s], hb[s])
		}
	}
}

// TestOtherManifestsNeverMeet is a stalling case (3 nodes with
// another model and other hyperparameters) and a hijacking case (3 nodes
// with the same flags, but their own run manifest) against a running
// 2-node network of the same run name. The intruders' own creator is their
// first bootstrap peer, the network's first member their second, so they
// are connected to the network but hold another manifest. The network
// keeps its model and its pace: every step a ring of its 2 members, no
// adoption, no fetch; the intruders train among themselves.
func TestOtherManifestsNeverMeet(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process e2e test")
	}
	netArgs := []string{"--run", "shared", "--preset", "tiny", "--inner-steps", "4"}
	cases := map[string][]string{
		"stalling":  {"--run", "shared", "--preset", "small", "--inner-steps", "3", "--outer-lr", "0.7"},
		"hijacking": netArgs,
	}
	for name, intruder := range cases {
		t.Run(name, func(t *testing.T) { otherManifestNeverMeets(t, netArgs, intruder) })
	}
}

func otherManifestNeverMeets(t *testing.T, netArgs, intruderArgs []string) {
	local := append([]string{"--min-members", "2", "--sim-step", "50ms"}, simArgs[:2]...)
	a := startNode(t, "a", "", append(append([]string{}, netArgs...), local...)...)
	boot := bootstrapAddr(t, a)
	b := startNode(t, "b", "", append(append([]string{}, netArgs...), append(local, "--bootstrap", boot)...)...)
	stepOf := func(p *proc) uint64 {
		st, err := p.status()
		if err != nil {
			return 0
		}
		return st.OuterStep
	}
	waitFor(t, 2*time.Minute, "the network at outer step 2", func() bool { return stepOf(a) >= 2 }, a, b)

	iLocal := append([]string{"--min-members", "3"}, simArgs...)
	c := startNode(t, "c", "", append(append([]string{}, intruderArgs...), iLocal...)...)
	cBoot := bootstrapAddr(t, c)
	d := startNode(t, "d", "", append(append([]string{}, intruderArgs...), append(iLocal, "--bootstrap", cBoot, "--bootstrap", boot)...)...)
	e := startNode(t, "e", "", append(append([]string{}, intruderArgs...), append(iLocal, "--bootstrap", cBoot, "--bootstrap", boot)...)...)
	all := []*proc{a, b, c, d, e}
	waitFor(t, 3*time.Minute, "the intruders at their outer step 2", func() bool { return stepOf(c) >= 2 }, all...)
	from := stepOf(a)
	waitFor(t, 2*time.Minute, "the network 4 outer steps further", func() bool { return stepOf(a) >= from+4 }, all...)

	ha, hc := readHistoryFile(t, a), readHistoryFile(t, c)
	for _, r := range ha[1:] {
		if r.Members != 2 {
			t.Errorf("network step %d reduced over %d members, want its 2", r.Step, r.Members)
		}
	}
	for _, r := range hc[1:] {
		if r.Members != 3 {
			t.Errorf("intruders' step %d reduced over %d members, want their 3", r.Step, r.Members)
		}
	}
	for _, p := range all {
		checkNeverFetched(t, p)
	}
	if ha[len(ha)-1].ModelHash == hc[len(hc)-1].ModelHash {
		t.Errorf("network and intruders hold the same model")
	}
	logPace(t, ha, from)
}

// checkNeverFetched checks that p has neither fetched nor adopted a model,
// nor tried to: no fetch observed or failed, none in progress.
func checkNeverFetched(t *testing.T, p *proc) {
	t.Helper()
	done, err1 := p.metric("intellect_model_fetch_duration_seconds", nil)
	failed, err2 := p.metric("intellect_model_fetch_failures_total", nil)
	st, err3 := p.status()
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	if done != 0 || failed != 0 || st.Download != nil {
		t.Errorf("%s: %v fetches, %v failed, in progress %+v; want none", p.name, done, failed, st.Download)
	}
}

// logPace logs the network's mean time per outer step before and after
// step from (when the intruders were up).
func logPace(t *testing.T, h []node.OuterRecord, from uint64) {
	var before, after []time.Duration
	for i := 2; i < len(h); i++ {
		d := h[i].Time.Sub(h[i-1].Time)
		if h[i].Step <= from {
			before = append(before, d)
		} else {
			after = append(after, d)
		}
	}
	t.Logf("network time per outer step: %v before the intruders (%d steps), %v with them (%d steps)",
		mean(before), len(before), mean(after), len(after))
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}
