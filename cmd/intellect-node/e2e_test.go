package main

// End-to-end tests: real intellect-node processes on 127.0.0.1 with real
// libp2p hosts, DHT and gossipsub, talking through their REST APIs.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/intellect-node/intellect-node/p2p/scatter"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "intellect-e2e")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "intellect-node")
	out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building intellect-node: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one node process.
type proc struct {
	t    *testing.T
	name string
	home string
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu  sync.Mutex
	log strings.Builder
}

// startNode starts a node with its own home dir (reused if home != "").
func startNode(t *testing.T, name, home string, args ...string) *proc {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	os.Remove(filepath.Join(home, "api.addr"))
	all := append([]string{"start", "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0",
		"--status", "127.0.0.1:0", "--log-level", "info"}, args...)
	p := &proc{t: t, name: name, home: home, cmd: exec.Command(binPath, all...), done: make(chan struct{})}
	stderr, _ := p.cmd.StderrPipe()
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("---- log of %s ----\n%s", p.name, p.logText())
		}
	})
	return p
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// api returns the node's status API address once it is listening.
func (p *proc) api() string {
	p.t.Helper()
	var addr string
	waitFor(p.t, 60*time.Second, p.name+" status API", func() bool {
		b, err := os.ReadFile(filepath.Join(p.home, "api.addr"))
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != ""
	}, p)
	return addr
}

// client reads the node's REST API.
func (p *proc) client() *node.Client { return node.NewClient(p.api()) }

// metric returns the sum over p's /metrics samples of family name whose
// labels include every pair of match: a counter's or gauge's value, a
// histogram's count of observations.
func (p *proc) metric(name string, match map[string]string) (float64, error) {
	resp, err := http.Get("http://" + p.api() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		if labelsMatch(m, match) {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, nil
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := match[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(match)
}

// averagingBytesSent is what p has sent so far on the averaging streams
// (ring all-reduce and robust scatter).
func (p *proc) averagingBytesSent() (float64, error) {
	var sum float64
	for _, proto := range []string{ring.ProtocolID, scatter.ProtocolID} {
		v, err := p.metric("intellect_p2p_bytes_total", map[string]string{"protocol": proto, "direction": "sent"})
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func (p *proc) status() (node.Status, error) {
	return p.client().Status(context.Background())
}

// waitFor polls cond every 100 ms until it holds or the timeout passes; it
// fails early if any of procs exits.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, p := range procs {
			select {
			case <-p.done:
				t.Fatalf("waiting for %s: %s exited: %v\n%s", what, p.name, p.err, p.logText())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bootstrapAddr returns a node's first full multiaddr.
func bootstrapAddr(t *testing.T, p *proc) string {
	t.Helper()
	var s node.Status
	waitFor(t, 30*time.Second, p.name+" addrs", func() bool {
		var err error
		s, err = p.status()
		return err == nil && len(s.Addrs) > 0
	}, p)
	return s.Addrs[0]
}

// byStep indexes a history by outer step.
func byStep(h []node.OuterRecord) map[uint64]node.OuterRecord {
	m := make(map[uint64]node.OuterRecord, len(h))
	for _, r := range h {
		m[r.Step] = r
	}
	return m
}

// e2eArgs are the training flags of every e2e node: tiny model, short outer steps.
var e2eArgs = []string{"--run", "e2e", "--preset", "tiny", "--inner-steps", "8"}

func TestThreeNodesTrainOneModel(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process e2e test")
	}
	t.Run("blocking", func(t *testing.T) { threeNodesTrainOneModel(t, "--overlap=false") })
	// Each member applies the average when it arrives, at an inner step of
	// its own (the default): the global models must still agree bit for bit.
	t.Run("overlapped", func(t *testing.T) { threeNodesTrainOneModel(t) })
}

func threeNodesTrainOneModel(t *testing.T, extra ...string) {
	const nodes, steps = 3, 4
	args := append(append(append([]string{}, e2eArgs...), extra...), "--min-members", fmt.Sprint(nodes),
		"--max-outer-steps", fmt.Sprint(steps))
	a := startNode(t, "a", "", args...)
	boot := bootstrapAddr(t, a)
	st, err := a.status()
	if err != nil || st.Params == 0 {
		t.Fatalf("a's status: %+v, %v", st, err)
	}
	b := startNode(t, "b", "", append(args, "--bootstrap", boot)...)
	c := startNode(t, "c", "", append(args, "--bootstrap", boot)...)
	ps := []*proc{a, b, c}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(4 * time.Minute):
			t.Fatalf("%s did not finish %d outer steps in time\n%s", p.name, steps, p.logText())
		}
		if p.err != nil {
			t.Fatalf("%s exited with %v\n%s", p.name, p.err, p.logText())
		}
	}
	// The processes have exited; their final history is in the log as JSON
	// lines written at exit (the API is gone). Read it from the history file.
	hist := make([]map[uint64]node.OuterRecord, len(ps))
	for i, p := range ps {
		hist[i] = byStep(readHistoryFile(t, p))
	}
	var first, last float64
	for s := uint64(1); s <= steps; s++ {
		r0, ok := hist[0][s]
		if !ok {
			t.Fatalf("a has no record of outer step %d", s)
		}
		if r0.Members != nodes {
			t.Errorf("step %d: ring of %d members, want %d", s, r0.Members, nodes)
		}
		for i := 1; i < len(ps); i++ {
			ri := hist[i][s]
			if ri.ModelHash != r0.ModelHash || ri.EvalLoss != r0.EvalLoss {
				t.Errorf("step %d: %s has hash %s eval %v; a has %s eval %v", s, ps[i].name,
					ri.ModelHash, ri.EvalLoss, r0.ModelHash, r0.EvalLoss)
			}
		}
		if s == 1 {
			first = r0.EvalLoss
		}
		last = r0.EvalLoss
	}
	if !(last < first) {
		t.Errorf("eval loss did not fall: step 1 %v, step %d %v", first, steps, last)
	}
	checkWireBytes(t, st.Params, hist[0], nodes)
}

// checkWireBytes checks that the bytes one member sends per outer step are
// about a sixteenth of what an fp32 ring all-reduce would send: the default
// codec's 2-bit values, its tables and framing.
func checkWireBytes(t *testing.T, params int64, h map[uint64]node.OuterRecord, k int) {
	t.Helper()
	fp32 := float64(2*(k-1)) / float64(k) * float64(params) * 4
	for s, r := range h {
		if r.Attempts != 1 {
			continue
		}
		ratio := float64(r.BytesSent) / fp32
		t.Logf("step %d: sent %d bytes = %.3f × an fp32 ring all-reduce (%d params)", s, r.BytesSent, ratio, params)
		if ratio < 0.0625 || ratio > 0.075 {
			t.Errorf("step %d: bytes sent %.3f × fp32, want ≈ 0.0625–0.075 (2-bit values + tables + framing)", s, ratio)
		}
	}
}

func readHistoryFile(t *testing.T, p *proc) []node.OuterRecord {
	t.Helper()
	h, err := node.ReadHistory(p.home)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	return h
}

func TestKilledNodeMidAllReduce(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process e2e test")
	}
	// int8 at 1 MB/s: a transfer long enough to kill c in.
	args := append(append([]string{}, e2eArgs...), "--min-members", "3",
		"--max-outer-steps", "4", "--max-send-rate", "1000000", "--codec", "int8")
	a := startNode(t, "a", "", args...)
	boot := bootstrapAddr(t, a)
	b := startNode(t, "b", "", append(args, "--bootstrap", boot)...)
	c := startNode(t, "c", "", append(args, "--bootstrap", boot)...)
	// Kill c while its all-reduce of outer step 2 moves bytes: c has
	// completed step 1, its mesh state is reducing, and what it has sent on
	// the averaging streams grew between two polls (at 1 MB/s the transfer
	// takes over a second).
	sent := -1.0
	waitFor(t, 3*time.Minute, "c sending its all-reduce of step 2", func() bool {
		st, err := c.status()
		if err != nil || st.OuterStep != 1 || st.State != "reducing" {
			sent = -1
			return false
		}
		now, err := c.averagingBytesSent()
		moving := err == nil && sent >= 0 && now > sent
		sent = now
		return moving
	}, a, b, c)
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	for _, p := range []*proc{a, b} {
		select {
		case <-p.done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s did not finish after c was killed\n%s", p.name, p.logText())
		}
		if p.err != nil {
			t.Fatalf("%s exited with %v", p.name, p.err)
		}
	}
	ha, hb := byStep(readHistoryFile(t, a)), byStep(readHistoryFile(t, b))
	for s := uint64(1); s <= 4; s++ {
		if ha[s].ModelHash == "" || ha[s].ModelHash != hb[s].ModelHash {
			t.Errorf("step %d: a %q b %q", s, ha[s].ModelHash, hb[s].ModelHash)
		}
	}
	if ha[2].Members != 2 || ha[2].Attempts < 2 {
		t.Errorf("step 2 should be redone by the 2 survivors: members %d attempts %d", ha[2].Members, ha[2].Attempts)
	}
}

// TestJoinKillRestart: two nodes train; a third
// joins by live checkpoint transfer and reaches the same model hash; one node
// is SIGKILLed mid-step and restarted from its home directory; all live nodes
// end with identical hashes and a falling eval loss.
func TestJoinKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process e2e test")
	}
	const last = 9
	args := append(append([]string{}, e2eArgs...), "--max-outer-steps", fmt.Sprint(last), "--checkpoint-every", "1")
	a := startNode(t, "a", "", append(args, "--min-members", "2")...)
	boot := bootstrapAddr(t, a)
	b := startNode(t, "b", "", append(args, "--min-members", "2", "--bootstrap", boot)...)
	atStep := func(p *proc, s uint64) func() bool {
		return func() bool { st, err := p.status(); return err == nil && st.OuterStep >= s }
	}
	waitFor(t, 3*time.Minute, "a at outer step 2", atStep(a, 2), a, b)

	c := startNode(t, "c", "", append(args, "--bootstrap", boot)...)
	waitFor(t, 2*time.Minute, "c fetched the live model from its peers", func() bool {
		n, err := c.metric("intellect_model_fetch_duration_seconds", nil)
		return err == nil && n >= 1
	}, a, b, c)
	waitFor(t, 2*time.Minute, "c completes an outer step in the ring", func() bool {
		n, err := c.metric("intellect_outer_steps_total", nil)
		return err == nil && n >= 1
	}, a, b, c)

	// Kill b in the middle of its inner steps, then restart it from its home.
	waitFor(t, time.Minute, "b inside its inner steps", func() bool {
		st, err := b.status()
		return err == nil && st.State == "training"
	}, a, b, c)
	b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.done
	killedAt, _ := a.status()
	waitFor(t, 2*time.Minute, "a and c go on without b", atStep(a, killedAt.OuterStep+1), a, c)
	b2 := startNode(t, "b2", b.home, append(args, "--bootstrap", boot)...)
	checkResumed(t, b2)

	live := []*proc{a, c, b2}
	for _, p := range live {
		select {
		case <-p.done:
		case <-time.After(4 * time.Minute):
			t.Fatalf("%s did not reach outer step %d\n%s", p.name, last, p.logText())
		}
		if p.err != nil {
			t.Fatalf("%s exited with %v", p.name, p.err)
		}
	}
	ha := byStep(readHistoryFile(t, a))
	for _, p := range live[1:] {
		hp := byStep(readHistoryFile(t, p))
		if hp[last].ModelHash == "" || hp[last].ModelHash != ha[last].ModelHash || hp[last].EvalLoss != ha[last].EvalLoss {
			t.Errorf("%s ends at %+v, a at %+v", p.name, hp[last], ha[last])
		}
		for s, r := range hp {
			if ar, ok := ha[s]; ok && ar.ModelHash != r.ModelHash {
				t.Errorf("step %d: %s hash %s, a %s", s, p.name, r.ModelHash, ar.ModelHash)
			}
		}
	}
	if !(ha[last].EvalLoss < ha[1].EvalLoss) {
		t.Errorf("eval loss did not fall: %v → %v", ha[1].EvalLoss, ha[last].EvalLoss)
	}
	rejoined := false
	for s := killedAt.OuterStep + 2; s <= last; s++ {
		rejoined = rejoined || ha[s].Members == 3
	}
	if !rejoined {
		t.Errorf("restarted b never took part again: no ring of 3 after step %d", killedAt.OuterStep+1)
	}
}

// checkResumed checks that p, restarted from its home, resumed from its
// checkpoint: its first status holds an outer step past 0 before it has
// fetched any model (the counter is read after the status, so a step that
// came from a fetch would show there).
func checkResumed(t *testing.T, p *proc) {
	t.Helper()
	var st node.Status
	waitFor(t, time.Minute, p.name+"'s status", func() bool {
		var err error
		st, err = p.status()
		return err == nil
	}, p)
	fetched, err := p.metric("intellect_model_fetch_duration_seconds", nil)
	if err != nil || st.OuterStep == 0 || fetched != 0 {
		t.Fatalf("%s did not resume from its checkpoint: outer step %d, fetches %v (%v)", p.name, st.OuterStep, fetched, err)
	}
}

// TestInterruptWhileJoiningExitsCleanly: SIGINT while a joiner still waits
// for its bootstrap peer (here a TCP listener that accepts and never
// speaks) ends the process with status 0, as SIGINT does later on.
func TestInterruptWhileJoiningExitsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	boot := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/12D3KooWGzBdq1n3vAYU8XBfJpXqyMhqkDuYBFdBTmVZmAEFu2eZ", ln.Addr().(*net.TCPAddr).Port)
	p := startNode(t, "joiner", "", "--device", "sim", "--sim-step", "1ms", "--bootstrap", boot)
	select {
	case c := <-accepted:
		defer c.Close()
	case <-p.done:
		t.Fatalf("exited before dialing its bootstrap peer: %v", p.err)
	case <-time.After(30 * time.Second):
		t.Fatal("never dialed its bootstrap peer")
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30 s after SIGINT")
	}
	if p.err != nil {
		t.Fatalf("exit after SIGINT while joining: %v, want status 0", p.err)
	}
}
