package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/node"
)

func init() {
	register("demo", "start a small local network on 127.0.0.1 and show it training", runDemo)
}

// demoNode is one node process started by the demo.
type demoNode struct {
	name   string
	home   string
	status string
	cmd    *exec.Cmd
	done   chan error
}

func runDemo(args []string) error {
	fs := newFlagSet("demo", "[--nodes N] [--outer-steps N] [--inner-steps H] [--dir DIR] [--port P]")
	nodes := fs.Int("nodes", 3, "nodes started at the beginning (the first waits until all of them agree on a ring)")
	outer := fs.Int("outer-steps", 12, "outer steps the network trains; a further node joins at a third of them, node2 leaves at two thirds")
	inner := fs.Int("inner-steps", node.CodecPoint(node.DefaultCodec).InnerSteps, "inner steps per outer step (H)")
	preset := fs.String("preset", "tiny", "model preset")
	dir := fs.String("dir", "", "directory for the nodes' homes and logs (default: a new temporary one)")
	port := fs.Int("port", 8650, "status API port of the first node; the others use the next ones")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *nodes < 2 || *outer < 6 || *inner < 1 {
		return fmt.Errorf("want --nodes ≥ 2, --outer-steps ≥ 6 and --inner-steps ≥ 1")
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "intellect-demo-")
		if err != nil {
			return err
		}
		*dir = d
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{self: self, dir: *dir, port: *port, args: []string{"--run", "demo", "--preset", *preset,
		"--inner-steps", fmt.Sprint(*inner), "--max-outer-steps", fmt.Sprint(*outer)}}
	defer d.stopAll()
	return d.run(ctx, *nodes, uint64(*outer))
}

type demo struct {
	self  string
	dir   string
	port  int
	args  []string
	nodes []*demoNode
	boot  string
}

func (d *demo) start(extra ...string) (*demoNode, error) {
	i := len(d.nodes)
	n := &demoNode{name: fmt.Sprintf("node%d", i+1), status: fmt.Sprintf("127.0.0.1:%d", d.port+i), done: make(chan error, 1)}
	n.home = filepath.Join(d.dir, n.name)
	logf, err := os.Create(filepath.Join(d.dir, n.name+".log"))
	if err != nil {
		return nil, err
	}
	args := append([]string{"start", "--home", n.home, "--listen", "/ip4/127.0.0.1/tcp/0", "--status", n.status}, d.args...)
	if d.boot != "" {
		args = append(args, "--bootstrap", d.boot)
	}
	n.cmd = exec.Command(d.self, append(args, extra...)...)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { n.done <- n.cmd.Wait(); logf.Close() }()
	d.nodes = append(d.nodes, n)
	fmt.Printf("started %s: web page http://%s/  (log %s)\n", n.name, n.status, logf.Name())
	return n, nil
}

func (d *demo) stopAll() {
	for _, n := range d.nodes {
		if n.cmd.ProcessState == nil {
			n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, n := range d.nodes {
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			n.cmd.Process.Kill()
		}
	}
}

func (d *demo) run(ctx context.Context, initial int, outer uint64) error {
	fmt.Printf("intellect-node demo: %d nodes on 127.0.0.1 train one model (homes and logs in %s)\n", initial, d.dir)
	first, err := d.start("--min-members", fmt.Sprint(initial))
	if err != nil {
		return err
	}
	var s node.Status
	if err := d.waitStatus(ctx, first, func(s node.Status) bool { return len(s.Addrs) > 0 }, &s); err != nil {
		return err
	}
	d.boot = s.Addrs[0]
	for i := 1; i < initial; i++ {
		if _, err := d.start("--min-members", fmt.Sprint(initial)); err != nil {
			return err
		}
	}
	joinAt, leaveAt := outer/3, 2*outer/3
	joined, left := false, false
	lastPrinted := ^uint64(0)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("interrupted: stopping the nodes")
			return nil
		case <-tick.C:
		}
		st, alive := d.poll()
		if alive == 0 {
			break
		}
		step := maxStep(st)
		if step != lastPrinted {
			lastPrinted = step
			d.printRow(step, st)
		}
		if !joined && step >= joinAt {
			joined = true
			fmt.Printf("-- a new node joins at outer step %d and fetches the live model from its peers\n", step)
			if _, err := d.start(); err != nil {
				return err
			}
		}
		if !left && step >= leaveAt {
			left = true
			fmt.Printf("-- node2 leaves gracefully (SIGTERM) at outer step %d\n", step)
			d.nodes[1].cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	return d.summary()
}

// poll reads every running node's status; st[i] is nil for a stopped node.
func (d *demo) poll() (st []*node.Status, alive int) {
	st = make([]*node.Status, len(d.nodes))
	for i, n := range d.nodes {
		select {
		case err := <-n.done:
			n.done <- err // keep it for later readers
			continue
		default:
		}
		alive++
		if s, err := node.NewClient(n.status).Status(context.Background()); err == nil {
			st[i] = &s
		}
	}
	return st, alive
}

func maxStep(st []*node.Status) uint64 {
	var m uint64
	for _, s := range st {
		if s != nil && s.OuterStep > m {
			m = s.OuterStep
		}
	}
	return m
}

func (d *demo) printRow(step uint64, st []*node.Status) {
	var b strings.Builder
	fmt.Fprintf(&b, "outer %3d |", step)
	for i, s := range st {
		switch {
		case s == nil:
			fmt.Fprintf(&b, " %s: -- |", d.nodes[i].name)
		case s.Download != nil && s.Download.BytesTotal > 0 && (s.State == "joining" || s.State == "syncing"):
			fmt.Fprintf(&b, " %s: %s %d%% |", d.nodes[i].name, s.State, 100*s.Download.BytesDone/s.Download.BytesTotal)
		default:
			h := s.ModelHash
			if len(h) > 8 {
				h = h[:8]
			}
			fmt.Fprintf(&b, " %s: %s step %d eval %.3f hash %s %d members |", d.nodes[i].name, s.State, s.OuterStep, s.EvalLoss, h, len(s.Members))
		}
	}
	fmt.Println(b.String())
}

func (d *demo) waitStatus(ctx context.Context, n *demoNode, cond func(node.Status) bool, out *node.Status) error {
	for i := 0; ; i++ {
		s, err := node.NewClient(n.status).Status(ctx)
		if err == nil && cond(s) {
			*out = s
			return nil
		}
		select {
		case err := <-n.done:
			return fmt.Errorf("%s exited: %v (see %s.log)", n.name, err, filepath.Join(d.dir, n.name))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if i > 300 {
			return fmt.Errorf("%s did not come up (see its log in %s)", n.name, d.dir)
		}
	}
}

func (d *demo) summary() error {
	hashes := map[string][]string{}
	first, last := -1.0, 0.0
	for _, n := range d.nodes {
		recs, err := node.ReadHistory(n.home)
		if err != nil || len(recs) == 0 {
			continue
		}
		if recs[0].Step == 0 && first < 0 {
			first = recs[0].EvalLoss
		}
		r := recs[len(recs)-1]
		key := fmt.Sprintf("outer step %d, hash %.12s", r.Step, r.ModelHash)
		hashes[key] = append(hashes[key], n.name)
		last = r.EvalLoss
	}
	fmt.Println("final models:")
	for k, v := range hashes {
		fmt.Printf("  %s: %s\n", k, strings.Join(v, ", "))
	}
	if first > 0 {
		fmt.Printf("held-out loss: %.3f for the initial model → %.3f at the end (%.0f %% of the first value)\n", first, last, 100*last/first)
	}
	fmt.Printf("logs, histories and checkpoints are in %s\n", d.dir)
	return nil
}
