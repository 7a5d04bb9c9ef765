package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/intellect-node/intellect-node/internal/results"
	"github.com/intellect-node/intellect-node/internal/wan"
	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/train"
)

// `wanbench nodes` runs intellect-node sim nodes in each profile's emulated
// WAN, once per mode, and prints the utilization table (docs/wan-results.md).

// Modes of a run. modeNocomm is the no-communication reference: a lone node
// (--min-members 1, no peers) started beside the blocking run on host 0.
const (
	modeBlocking   = "blocking"
	modeOverlapped = "overlapped"
	modeOrder      = "overlapped+order"
	modeNocomm     = "nocomm"
)

// Ports inside every namespace.
const (
	nodePort     = 4001
	statusPort   = 8080
	nocommPort   = 4002
	nocommStatus = 8081
)

// ErrNodes is returned when a node run did not produce a usable table row.
var ErrNodes = errors.New("wanbench nodes: run failed")

// nodesConfig is everything `wanbench nodes` needs; flags fill it.
type nodesConfig struct {
	Profiles []string
	Modes    []string
	Bin      string // intellect-node binary
	Dir      string // work dir: one sub-dir per run with homes and logs
	Preset   string
	Inner    int           // H
	SimStep  time.Duration // one inner step
	// SlowStep, if set, is the last host's inner step instead (a
	// mixed-speed run: one member slower than the others).
	SlowStep time.Duration
	Outer    uint64 // outer steps per run
	Warmup   uint64 // first outer steps not counted
	Shards   int
	Nodes    int    // 0: one per host of the profile; more: the profile is widened (see wan.Widen)
	SVG      string // plot path; "" for none
	// OrderProfiles get an extra run in mode overlapped+order when the
	// binary has --ring-order; the other modes then pin --ring-order sorted.
	OrderProfiles []string
	hasOrder      bool // the binary has --ring-order
	// NodeFlags are appended to every member's command line (e.g.
	// "--averaging robust"), not to the no-comm reference's.
	NodeFlags []string
	Log       *slog.Logger
}

// outerStep is the compute time of one outer step.
func (c nodesConfig) outerStep() time.Duration { return time.Duration(c.Inner) * c.SimStep }

// modelBytes is the int8 bytes a node contributes per outer step: one per
// parameter of the preset (the scale of INTELLECT-1's 10 GB for 10 B).
func (c nodesConfig) modelBytes() (float64, error) {
	m, err := train.Preset(c.Preset)
	if err != nil {
		return 0, err
	}
	return float64(m.NumParams()), nil
}

// runTimeout bounds one run of profile p at rate scale: start-up plus every
// outer step at three times its compute time and its int8 all-reduce over
// the profile's slowest path.
func (c nodesConfig) runTimeout(p wan.Profile, scale float64) time.Duration {
	bytes, _ := c.modelBytes()
	slowest := math.Inf(1)
	for _, q := range p.Paths {
		if q.RateMbit > 0 {
			slowest = min(slowest, q.RateMbit*scale*1e6/8)
		}
	}
	reduce := time.Duration(2 * bytes / float64(len(p.Hosts)) / slowest * float64(time.Second))
	return 90*time.Second + time.Duration(c.Outer)*3*(c.outerStep()+reduce)
}

func cmdNodes(ctx context.Context, args []string) error {
	c, err := parseNodes(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		fmt.Println("SKIP: wanbench nodes needs root (network namespaces, TUN devices)")
		return nil
	}
	rows, err := runNodes(ctx, c)
	if c.SVG != "" && len(rows) > 0 {
		if werr := writeUtilizationSVG(c.SVG, rows); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	for _, r := range rows {
		if r.Note != "" {
			fmt.Printf("note: %s %s: %s\n", r.Profile, r.Mode, r.Note)
		}
	}
	for _, l := range relativeNotes(rows) {
		fmt.Println("vs nocomm:", l)
	}
	if len(rows) > 0 {
		fmt.Println()
		if werr := writeTable(os.Stdout, rows); werr != nil {
			err = errors.Join(err, werr)
		}
		rr := resultRows(rows)
		results.Stamp(rr, append([]string{"wanbench", "nodes"}, args...), c.Bin, time.Now())
		err = errors.Join(err, results.Write(os.Stdout, rr))
	}
	return err
}

func parseNodes(args []string) (nodesConfig, error) {
	fs := flag.NewFlagSet("nodes", flag.ContinueOnError)
	var c nodesConfig
	profiles := fs.String("profiles", "usa,usa-europe,global", "comma-separated profiles")
	modes := fs.String("modes", "blocking,overlapped", "comma-separated modes: blocking, overlapped, overlapped+order (a nocomm row comes with blocking)")
	fs.StringVar(&c.Bin, "bin", "intellect-node", "intellect-node binary")
	fs.StringVar(&c.Dir, "dir", "", "work dir for homes and logs (default: a new temp dir)")
	fs.StringVar(&c.Preset, "preset", "small", "model preset: sets the all-reduced vector's size")
	fs.IntVar(&c.Inner, "inner-steps", 20, "inner steps per outer step (H)")
	fs.DurationVar(&c.SimStep, "sim-step", 750*time.Millisecond, "simulated duration of one inner step")
	fs.DurationVar(&c.SlowStep, "slow-step", 0, "mixed speeds: the last host's simulated inner step `duration` (0: as -sim-step)")
	fs.Uint64Var(&c.Outer, "outer-steps", 3, "outer steps per run")
	fs.Uint64Var(&c.Warmup, "warmup", 1, "first outer steps not counted")
	fs.IntVar(&c.Shards, "shards", node.DefaultShards, "parallel rings of the all-reduce (--shards)")
	fs.IntVar(&c.Nodes, "nodes", 0, "nodes per run (0: one per host of the profile; more widens the profile)")
	fs.StringVar(&c.SVG, "svg", "", "write the utilization plot here")
	orderProfiles := fs.String("order-profiles", "global", "profiles that also run mode overlapped+order (--ring-order latency; the other modes use --ring-order sorted) when the binary has --ring-order")
	verbose := fs.Bool("v", false, "log progress to stderr")
	nodeFlags := fs.String("node-flags", "", "extra flags for every member, separated by spaces (e.g. \"--averaging robust\")")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.NodeFlags = strings.Fields(*nodeFlags)
	c.Profiles = splitList(*profiles)
	c.Modes = splitList(*modes)
	c.OrderProfiles = splitList(*orderProfiles)
	if *verbose {
		c.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	} else {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, c.validate()
}

func (c nodesConfig) validate() error {
	for _, m := range c.Modes {
		switch m {
		case modeBlocking, modeOverlapped, modeOrder:
		default:
			return fmt.Errorf("unknown mode %q", m)
		}
	}
	for _, p := range c.Profiles {
		if _, err := wan.Lookup(p); err != nil {
			return err
		}
	}
	switch {
	case c.Inner < 1 || c.SimStep <= 0 || c.SlowStep < 0:
		return errors.New("-inner-steps and -sim-step must be positive, -slow-step not negative")
	case c.Outer <= c.Warmup:
		return fmt.Errorf("-outer-steps %d must exceed -warmup %d", c.Outer, c.Warmup)
	case c.Nodes < 0 || c.Nodes > 64:
		return fmt.Errorf("-nodes %d out of range 0..64", c.Nodes)
	}
	_, err := c.modelBytes()
	return err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// runNodes runs every profile × mode and returns the rows it could measure,
// with the errors of the others joined.
func runNodes(ctx context.Context, c nodesConfig) ([]tableRow, error) {
	bin, err := exec.LookPath(c.Bin)
	if err != nil {
		return nil, err
	}
	if c.Bin, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "wanbench-nodes-"); err != nil {
			return nil, err
		}
	}
	c.hasOrder = hasFlag(c.Bin, "ring-order")
	bytes, _ := c.modelBytes()
	fmt.Printf("nodes: preset %s (%.0f int8 bytes/outer step), H=%d × %v = %v compute/outer step, %d outer steps (first %d warm-up), work dir %s\n",
		c.Preset, bytes, c.Inner, c.SimStep, c.outerStep(), c.Outer, c.Warmup, c.Dir)
	var rows []tableRow
	var errs []error
	for _, pn := range c.Profiles {
		p, _ := wan.Lookup(pn)
		scale := p.Scale(bytes, c.SimStep, c.Inner)
		fmt.Printf("nodes: %s: rate scale %.4f\n", pn, scale)
		if c.Nodes > len(p.Hosts) {
			if p, err = wan.Widen(p, c.Nodes); err != nil {
				return rows, err
			}
		}
		for _, mode := range c.modesFor(pn) {
			if ctx.Err() != nil {
				return rows, errors.Join(append(errs, ctx.Err())...)
			}
			rs, err := runOne(ctx, c, p, mode, scale)
			rows = append(rows, rs...)
			if err != nil {
				errs = append(errs, err)
				fmt.Fprintf(os.Stderr, "nodes: %s %s: %v\n", p.Name, mode, err)
			}
		}
	}
	return rows, errors.Join(errs...)
}

// runOne builds profile p's network, runs one node per host in the given
// mode (plus the nocomm node beside a blocking run) until they exit after
// c.Outer outer steps, and summarizes their histories.
func runOne(ctx context.Context, c nodesConfig, p wan.Profile, mode string, scale float64) ([]tableRow, error) {
	dir := filepath.Join(c.Dir, p.Name+"-"+strings.ReplaceAll(mode, "+", "-"))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.runTimeout(p, scale))
	defer cancel()
	start := time.Now()
	n, err := wan.Start(ctx, p, wan.Options{RateScale: scale, Log: c.Log})
	if err != nil {
		return nil, err
	}
	defer n.Close()
	run := &nodeRun{c: c, n: n, dir: dir, mode: mode}
	defer run.closeLogs()
	werr := run.startAndWait(ctx)
	fidelity := run.fidelity()
	n.Close()
	fmt.Printf("nodes: %s %s: %d nodes, %.0fs%s\n", p.Name, mode, len(p.Hosts), time.Since(start).Seconds(), fidelity)
	rows, rerr := run.summarize(p.Name)
	if werr != nil {
		return rows, fmt.Errorf("%w: %s %s: %v (logs in %s)", ErrNodes, p.Name, mode, werr, dir)
	}
	if rerr != nil {
		return rows, fmt.Errorf("%w: %v (logs in %s)", ErrNodes, rerr, dir)
	}
	return rows, nil
}

// nodeRun is one run's nodes in one network.
type nodeRun struct {
	c      nodesConfig
	n      *wan.Net
	dir    string
	mode   string
	procs  []*wan.Proc
	nocomm *wan.Proc
	logs   []*os.File
}

func (r *nodeRun) home(name string) string { return filepath.Join(r.dir, name) }

// nodeArgs is host i's command line, without --bootstrap.
func (r *nodeRun) nodeArgs(i int) []string {
	c := r.c
	name := r.n.Hosts[i].Name
	step := c.SimStep
	if c.SlowStep > 0 && i == len(r.n.Hosts)-1 {
		step = c.SlowStep
	}
	args := []string{c.Bin, "start", "--device", "sim", "--sim-step", step.String(), "--preset", c.Preset,
		"--inner-steps", fmt.Sprint(c.Inner), "--max-outer-steps", fmt.Sprint(c.Outer),
		"--min-members", fmt.Sprint(len(r.n.Hosts)), "--shards", fmt.Sprint(c.Shards),
		"--listen", fmt.Sprintf("/ip4/{addr}/tcp/%d", nodePort), "--status", fmt.Sprintf("127.0.0.1:%d", statusPort),
		"--home", r.home(name), "--run", "wan-" + r.n.Profile.Name + "-" + strings.ReplaceAll(r.mode, "+", "-"), "--checkpoint-every", "1000000"}
	args = append(args, c.NodeFlags...)
	switch r.mode {
	case modeBlocking:
		args = append(args, "--overlap=false")
	case modeOverlapped:
		args = append(args, "--overlap")
	case modeOrder:
		return append(args, "--overlap", "--ring-order", "latency")
	}
	if c.hasOrder {
		args = append(args, "--ring-order", "sorted")
	}
	return args
}

// nocommArgs is the lone reference node: same compute, no peers, loopback only.
func (r *nodeRun) nocommArgs() []string {
	c := r.c
	return []string{c.Bin, "start", "--device", "sim", "--sim-step", c.SimStep.String(), "--preset", c.Preset,
		"--inner-steps", fmt.Sprint(c.Inner), "--max-outer-steps", fmt.Sprint(c.Outer), "--min-members", "1",
		"--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", nocommPort), "--status", fmt.Sprintf("127.0.0.1:%d", nocommStatus),
		"--home", r.home(modeNocomm), "--run", "nocomm-" + r.n.Profile.Name, "--checkpoint-every", "1000000"}
}

// start starts argv on host i through the harness (so Close stops it),
// logging to <dir>/<name>.log.
func (r *nodeRun) start(i int, name string, argv []string) (*wan.Proc, error) {
	f, err := os.Create(filepath.Join(r.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	r.logs = append(r.logs, f)
	cmd := r.n.Command(i, argv...)
	cmd.Stdout, cmd.Stderr = f, f
	return r.n.StartCommand(i, cmd)
}

func (r *nodeRun) closeLogs() {
	for _, f := range r.logs {
		f.Close()
	}
}

// startAndWait starts node 0, reads its peer id, starts the others
// bootstrapping from it, and waits until all have exited.
func (r *nodeRun) startAndWait(ctx context.Context) error {
	p0, err := r.start(0, r.n.Hosts[0].Name, r.nodeArgs(0))
	if err != nil {
		return err
	}
	r.procs = append(r.procs, p0)
	id, err := r.peerID(ctx, p0)
	if err != nil {
		return fmt.Errorf("node 0: %w", err)
	}
	boot := fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", r.n.Hosts[0].Addr, nodePort, id)
	for i := 1; i < len(r.n.Hosts); i++ {
		p, err := r.start(i, r.n.Hosts[i].Name, append(r.nodeArgs(i), "--bootstrap", boot))
		if err != nil {
			return err
		}
		r.procs = append(r.procs, p)
	}
	if r.mode == modeBlocking {
		if r.nocomm, err = r.start(0, modeNocomm, r.nocommArgs()); err != nil {
			return err
		}
	}
	return r.wait(ctx)
}

// peerID polls node 0's status API until it reports its peer id.
func (r *nodeRun) peerID(ctx context.Context, p *wan.Proc) (string, error) {
	hc := r.n.HTTPClient(0)
	hc.Timeout = 2 * time.Second
	c := node.NewClient(fmt.Sprintf("127.0.0.1:%d", statusPort), node.WithHTTPClient(hc))
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if s, err := c.Status(ctx); err == nil && s.PeerID != "" {
			return s.PeerID, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-p.Done():
			return "", fmt.Errorf("exited before serving its status: %v", p.Wait())
		case <-tick.C:
		}
	}
}

// wait waits for every node (and the nocomm node) to exit or ctx to end.
func (r *nodeRun) wait(ctx context.Context) error {
	all := append([]*wan.Proc(nil), r.procs...)
	if r.nocomm != nil {
		all = append(all, r.nocomm)
	}
	var errs []error
	for _, p := range all {
		select {
		case <-p.Done():
		case <-ctx.Done():
			return fmt.Errorf("%s still running: %w", p.Host.Name, ctx.Err())
		}
		if err := p.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Host.Name, err))
		}
	}
	return errors.Join(errs...)
}

// fidelity reports packets the hosts dropped before the emulator (the machine
// was too busy) and the links' queue drops, as a suffix for the run's line.
func (r *nodeRun) fidelity() string {
	var hostDrops, queueDrops, lossDrops uint64
	for i := range r.n.Hosts {
		if d, err := r.n.HostDrops(i); err == nil {
			hostDrops += d
		}
	}
	for _, l := range r.n.Forwarder().Stats().Links {
		queueDrops += uint64(l.QueueDrops)
		lossDrops += uint64(l.LossDrops)
	}
	return fmt.Sprintf(", link queue drops %d, random-loss drops %d, host TUN drops %d (non-zero: emulator fell behind)", queueDrops, lossDrops, hostDrops)
}

// summarize reads every node's history and returns the mode's row and,
// beside a blocking run, the nocomm row.
func (r *nodeRun) summarize(profile string) ([]tableRow, error) {
	var hist [][]node.OuterRecord
	var errs []error
	slowRead := false // the last host's history is hist's last
	for i, h := range r.n.Hosts {
		recs, err := node.ReadHistory(r.home(h.Name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hist = append(hist, recs)
		slowRead = i == len(r.n.Hosts)-1
	}
	var rows []tableRow
	rw, err := summarize(profile, r.mode, hist, r.c.Warmup, len(r.n.Hosts))
	if err != nil {
		// No step had every node in the ring: report the largest ring that
		// formed, marked, rather than nothing.
		if k := largestRing(hist, r.c.Warmup); k > 0 {
			if rw, err = summarize(profile, r.mode, hist, r.c.Warmup, k); err == nil {
				rw.Note = fmt.Sprintf("only %d of %d nodes were in the ring after warm-up; nodes = ring size", k, len(r.n.Hosts))
			}
		}
	}
	if err == nil {
		rows = append(rows, rw)
	}
	errs = append(errs, err)
	if r.c.SlowStep > 0 && slowRead && len(hist) > 1 {
		// Mixed speeds: what the others' utilization is beside the slow
		// member, over the steps whose ring held every member.
		if fr, err := summarize(profile, r.mode+"-fast", hist[:len(hist)-1], r.c.Warmup, len(r.n.Hosts)); err == nil {
			fr.Note = fmt.Sprintf("the %d members at -sim-step %v beside one at -slow-step %v, steps with all %d in the ring", len(hist)-1, r.c.SimStep, r.c.SlowStep, len(r.n.Hosts))
			rows = append(rows, fr)
		}
	}
	if r.nocomm != nil {
		recs, err := node.ReadHistory(r.home(modeNocomm))
		if err == nil {
			var nr tableRow
			if nr, err = summarize(profile, modeNocomm, [][]node.OuterRecord{recs}, r.c.Warmup, 1); err == nil {
				rows = append(rows, nr)
			}
		}
		errs = append(errs, err)
	}
	return rows, errors.Join(errs...)
}

// modesFor is the modes run on profile pn: -modes, plus overlapped+order
// where -order-profiles asks for it and the binary supports it.
func (c nodesConfig) modesFor(pn string) []string {
	modes := append([]string(nil), c.Modes...)
	if c.hasOrder && slices.Contains(c.OrderProfiles, pn) && !slices.Contains(modes, modeOrder) {
		modes = append(modes, modeOrder)
	}
	return modes
}

// hasFlag reports whether `bin start -h` lists --name.
func hasFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "start", "-h").CombinedOutput()
	return strings.Contains(string(out), "  -"+name+" ")
}
