package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// The scale lab (make test-scale, docs/scale.md): K members of one run in
// this process, each a node of the same code over go-libp2p's in-memory
// mock network, with the sim device. INTELLECT_SCALE lists the K to run
// ("4,8,16,32,64"); without it the lab is skipped. INTELLECT_SCALE_SLOW=F
// is the mixed-speed profile: the last member's inner step is F× the
// others' (F = 1: the same members at one speed, its baseline), every
// member runs the command's default overlapped mode, and
// the table adds the fast members' utilization and the slow member's share
// of rings (docs/scale.md).
//
// Every member's uplink is scaleRate (the all-reduce's send limiter, which
// is what a member's link bounds). Links have no delay: the mock network
// delivers the writes of one stream one at a time, each after the link's
// delay, so a delay would cap a stream at one write per delay where a real
// link pipelines them (latency is the WAN lab's, docs/wan.md).
const (
	scaleRate    = 10 << 20 // bytes per second a member sends
	scaleLatency = 0
	scaleSimStep = 50 * time.Millisecond
	scaleInner   = 10 // inner steps per outer step: 0.5 s of sim compute
	scaleSteps   = 4  // outer steps each member makes
)

// scaleTimeout bounds the run of k members: the lab reports the steps made
// by then.
func scaleTimeout(k int) time.Duration { return time.Minute + 2*time.Duration(k)*time.Second }

func TestScaleLab(t *testing.T) {
	spec := os.Getenv("INTELLECT_SCALE")
	if spec == "" {
		t.Skip("the scale lab runs with INTELLECT_SCALE=4,8,… (make test-scale)")
	}
	slow := 0.0 // no mixed-speed profile
	if s := os.Getenv("INTELLECT_SCALE_SLOW"); s != "" {
		var err error
		if slow, err = strconv.ParseFloat(s, 64); err != nil || slow < 1 {
			t.Fatalf("INTELLECT_SCALE_SLOW: want a factor ≥ 1, got %q", s)
		}
	}
	var rows []scaleRow
	for _, f := range strings.Split(spec, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 2 {
			t.Fatalf("INTELLECT_SCALE: bad member count %q", f)
		}
		r := runScale(t, k, slow)
		rows = append(rows, r)
		t.Logf("K=%d done in %.1f s", k, r.total.Seconds())
		// The table so far: a long run's first rows survive its end.
		table := scaleTable(rows)
		fmt.Print(table)
		if out := os.Getenv("INTELLECT_SCALE_OUT"); out != "" {
			if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range rows {
		if r.hashMismatch > 0 {
			t.Errorf("K=%d: %d steps with differing model hashes", r.k, r.hashMismatch)
		}
	}
}

// scaleRow is what the lab measured of one K.
type scaleRow struct {
	k            int
	total        time.Duration // building the members to the last one stopping
	firstRing    time.Duration // Run started to every member in the first ring
	agreement    []time.Duration
	stepWall     time.Duration // mean wall time of an outer step after the first
	allReduce    time.Duration // mean all-reduce time of a step, from the member's Ready
	transfer     time.Duration // the same from the member's ring: the scatter itself
	bound        time.Duration // 2·(K−1)/K × payload ÷ scaleRate
	payload      int64         // bytes of a member's encoded pseudo-gradient
	gossipBytes  float64       // gossip bytes a member sent and received per step
	gossipLost   float64       // gossip messages and RPCs a member dropped for load, whole run
	conns        float64       // connections per member (most seen)
	streams      float64       // open streams per member (most seen)
	heapPerNode  float64       // MiB of Go heap in use per member
	cpuPerMember float64       // % of a core per member, all parts
	cpuProcess   float64       // % of a core, the whole process (2 cores: 200 %)
	parts        map[string]float64
	probe        float64 // % of a core a spinning thread got before the run: the machine's share for the lab
	load         string  // the machine's 1-minute load average before the run
	steps        int     // outer steps every member completed
	attempts     int     // all-reduce attempts over those steps, all members
	hashMismatch int     // steps whose model hash differs between members
	failed       int     // members whose Run failed before the lab's deadline
	failure      string  // the first such failure
	slow         float64 // the last member's inner step ÷ the others' (0: no mixed-speed profile)
	fastUtil     float64 // compute ÷ wall time of the other members over the steps made
	slowIn       int     // steps whose ring held all k members, the slow one included
}

// scaleNet is the mock network the lab's members live on: each new host is
// linked to every host before it.
type scaleNet struct {
	mu    sync.Mutex
	mn    mocknet.Mocknet
	hosts []host.Host
}

func (s *scaleNet) newHost(key crypto.PrivKey) (host.Host, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	addr := ma.StringCast(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 20000+len(s.hosts)))
	h, err := s.mn.AddPeer(key, addr)
	if err != nil {
		return nil, err
	}
	for _, o := range s.hosts {
		if _, err := s.mn.LinkPeers(h.ID(), o.ID()); err != nil {
			return nil, err
		}
	}
	s.hosts = append(s.hosts, h)
	return h, nil
}

// runScale runs k members for scaleSteps outer steps and measures them.
func runScale(t *testing.T, k int, slow float64) scaleRow {
	ctx, cancel := context.WithTimeout(context.Background(), scaleTimeout(k))
	defer cancel()
	probe, load := cpuProbe(), loadAverage()
	begin := time.Now()
	net := &scaleNet{mn: mocknet.New()}
	net.mn.SetLinkDefaults(mocknet.LinkOptions{Latency: scaleLatency})
	defer net.mn.Close()
	nodes := make([]*Node, k)
	for i := range nodes {
		cfg := Config{Home: t.TempDir(), Run: "scale", Device: "sim", SimStep: scaleSimStep,
			StatusAddr: "off", InnerSteps: scaleInner, MinMembers: k, MaxOuterSteps: scaleSteps,
			MaxSendRate: scaleRate, CheckpointEvery: 1000, Logger: dbgLogger(), Libp2p: net.newHost}
		if slow >= 1 {
			cfg.Overlap = DefaultOverlap
			if i == k-1 {
				cfg.SimStep = time.Duration(slow * float64(scaleSimStep))
			}
		}
		if i > 0 {
			cfg.Bootstrap = nodes[0].host.Addrs()
		}
		n, err := newNode(ctx, cfg)
		if err != nil {
			t.Fatalf("K=%d: member %d: %v", k, i, err)
		}
		defer n.host.Close()
		nodes[i] = n
	}
	row := scaleRow{k: k, probe: probe, load: load, slow: slow}
	w := watchScale(nodes)
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		t.Fatal(err)
	}
	cpu0, start := processCPU(), time.Now()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	for _, n := range nodes {
		wg.Go(func() {
			// The lab's deadline ends a run that is too slow: the table
			// says so. Other errors are counted and the first one shown.
			if err := n.Run(ctx); err != nil && ctx.Err() == nil {
				errMu.Lock()
				if row.failed++; row.failure == "" {
					row.failure = err.Error()
				}
				errMu.Unlock()
			}
		})
	}
	ran := make(chan struct{})
	go func() { wg.Wait(); close(ran) }()
	if !w.sampleUntil(ran, nodes, scaleTimeout(k)+30*time.Second) {
		// A member's shutdown hung (go-libp2p's event bus, docs/scale.md):
		// measure what ran and leave it behind.
		errMu.Lock()
		row.failed++
		row.failure = "a member's Run did not return 30 s after the deadline (its host's Close hung)"
		errMu.Unlock()
	}
	wall, cpu := time.Since(start), processCPU()-cpu0
	pprof.StopCPUProfile()
	w.stop()
	row.total = time.Since(begin)
	row.cpuProcess = 100 * cpu.Seconds() / wall.Seconds()
	row.cpuPerMember = row.cpuProcess / float64(k)
	if dir := os.Getenv("INTELLECT_SCALE_PROF"); dir != "" {
		if err := os.WriteFile(fmt.Sprintf("%s/scale-%d.pprof", dir, k), prof.Bytes(), 0o644); err != nil {
			t.Error(err)
		}
	}
	parts, err := profileParts(prof.Bytes())
	if err != nil {
		t.Errorf("K=%d: cpu profile: %v", k, err)
	}
	row.parts = partShares(parts, k)
	errMu.Lock() // a member left behind may still count its failure
	defer errMu.Unlock()
	w.fill(&row, nodes, start)
	for _, n := range nodes {
		g := n.host.GossipStats()
		row.gossipLost += float64(g.Overloaded+g.Unsent) / float64(k)
	}
	return row
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuProbe spins one thread for 200 ms and returns the % of a core it got:
// below 100 the machine is busy with other work and the lab's wall times
// include waiting for a core.
func cpuProbe() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rusageThread = 1 // RUSAGE_THREAD
	var a, b syscall.Rusage
	if syscall.Getrusage(rusageThread, &a) != nil {
		return 0
	}
	start := time.Now()
	for time.Since(start) < 200*time.Millisecond {
	}
	wall := time.Since(start)
	if syscall.Getrusage(rusageThread, &b) != nil {
		return 0
	}
	used := b.Utime.Nano() + b.Stime.Nano() - a.Utime.Nano() - a.Stime.Nano()
	return 100 * float64(used) / float64(wall.Nanoseconds())
}

// loadAverage is the first field of /proc/loadavg, "?" where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// partShares turns CPU nanoseconds by part into CPU milliseconds per
// member, folding the stream protocols' own ids into averaging (the
// all-reduce's streams) and host.
func partShares(ns map[string]int64, k int) map[string]float64 {
	out := map[string]float64{}
	for part, v := range ns {
		switch {
		case strings.Contains(part, "/scatter/"), strings.Contains(part, "/allreduce/"), strings.Contains(part, "/ring/"):
			part = partAveraging
		case strings.HasPrefix(part, "/"):
			part = p2p.PartHost
		case part == "":
			part = "other"
		}
		out[part] += float64(v) / 1e6 / float64(k)
	}
	return out
}

// scaleWatch follows the members' boards: when each one became ready and
// was handed a ring in each step, and the connections and streams seen.
type scaleWatch struct {
	mu       sync.Mutex
	ready    []map[uint64]time.Time // member → outer step → ready (or later) first seen
	ring     []map[uint64]time.Time // member → outer step → reducing first seen
	conns    float64
	streams  float64
	gossip0  []int64 // gossip bytes of each member when every one was in the first ring
	ringAt   time.Time
	heap     uint64
	done     chan struct{}
	watchers sync.WaitGroup
}

func watchScale(nodes []*Node) *scaleWatch {
	w := &scaleWatch{done: make(chan struct{})}
	for i, n := range nodes {
		w.ready = append(w.ready, map[uint64]time.Time{})
		w.ring = append(w.ring, map[uint64]time.Time{})
		w.watchers.Go(func() { w.follow(i, n) })
	}
	return w
}

// follow records member i's state changes until stop.
func (w *scaleWatch) follow(i int, n *Node) {
	for {
		ch := n.board.changes()
		s := n.board.snapshot()
		now := time.Now()
		w.mu.Lock()
		switch s.State {
		case "ready", "agreeing":
			if _, ok := w.ready[i][s.OuterStep]; !ok {
				w.ready[i][s.OuterStep] = now
			}
		case "reducing":
			if _, ok := w.ready[i][s.OuterStep]; !ok {
				w.ready[i][s.OuterStep] = now
			}
			if _, ok := w.ring[i][s.OuterStep]; !ok {
				w.ring[i][s.OuterStep] = now
			}
		}
		w.mu.Unlock()
		select {
		case <-ch:
		case <-w.done:
			return
		}
	}
}

func (w *scaleWatch) stop() {
	close(w.done)
	w.watchers.Wait()
}

// sampleUntil samples connections, streams, the heap and, once every member
// is in the first ring, the gossip counters, every 250 ms until ran is
// closed (every member stopped: true) or limit has passed (false).
func (w *scaleWatch) sampleUntil(ran <-chan struct{}, nodes []*Node, limit time.Duration) bool {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(limit)
	for {
		var conns, streams int
		for _, n := range nodes {
			cs := n.host.Libp2p().Network().Conns()
			conns += len(cs)
			for _, c := range cs {
				streams += len(c.GetStreams())
			}
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.mu.Lock()
		w.conns = max(w.conns, float64(conns)/float64(len(nodes)))
		w.streams = max(w.streams, float64(streams)/float64(len(nodes)))
		w.heap = max(w.heap, ms.HeapInuse)
		if w.gossip0 == nil && w.inRing(0) == len(nodes) {
			w.ringAt = time.Now()
			for _, n := range nodes {
				w.gossip0 = append(w.gossip0, gossipBytes(n))
			}
		}
		w.mu.Unlock()
		select {
		case <-ran:
			return true
		case <-giveUp:
			return false
		case <-tick.C:
		}
	}
}

// inRing is how many members were handed a ring of step s; w.mu held.
func (w *scaleWatch) inRing(s uint64) int {
	c := 0
	for _, r := range w.ring {
		if _, ok := r[s]; ok {
			c++
		}
	}
	return c
}

// gossipBytes is what n sent and received on gossipsub's streams.
func gossipBytes(n *Node) int64 {
	var b int64
	for proto, tr := range n.host.Bandwidth() {
		if strings.HasPrefix(string(proto), "/meshsub/") {
			b += int64(tr.In + tr.Out)
		}
	}
	return b
}

// fill computes row's figures from the boards, histories and samples.
func (w *scaleWatch) fill(row *scaleRow, nodes []*Node, start time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := len(nodes)
	row.conns, row.streams = w.conns, w.streams
	row.heapPerNode = float64(w.heap) / float64(k) / (1 << 20)
	for s := uint64(0); s < scaleSteps; s++ {
		last, lastRing := latest(w.ready, s), latest(w.ring, s)
		if w.inRing(s) < k || last.IsZero() {
			break
		}
		if s == 0 {
			row.firstRing = lastRing.Sub(start)
		}
		row.agreement = append(row.agreement, lastRing.Sub(last))
	}
	w.fillSteps(row, nodes)
	if w.gossip0 != nil && row.steps > 0 {
		var g int64
		for i, n := range nodes {
			g += gossipBytes(n) - w.gossip0[i]
		}
		row.gossipBytes = float64(g) / float64(k) / float64(row.steps)
	}
}

// fillSteps computes the per-step figures from the members' histories:
// the steps every member completed, their hashes, all-reduce and wall
// times, bytes sent and attempts.
func (w *scaleWatch) fillSteps(row *scaleRow, nodes []*Node) {
	k := len(nodes)
	recs := make([]map[uint64]OuterRecord, k)
	for i, n := range nodes {
		recs[i] = map[uint64]OuterRecord{}
		for _, r := range n.board.historyList() {
			recs[i][r.Step] = r
		}
	}
	var ar, xfer, wall time.Duration
	var sent int64
	var compute, fastWall float64
	for s := uint64(1); s <= scaleSteps; s++ {
		hash, all := recs[0][s].ModelHash, true
		for i, m := range recs {
			r, ok := m[s]
			all = all && ok
			if ok && r.ModelHash != hash {
				row.hashMismatch++
				break
			}
			ar += time.Duration(r.AllReduceSec * float64(time.Second))
			// The record's time runs from Ready; the transfer from the ring.
			xfer += time.Duration(r.AllReduceSec * float64(time.Second))
			if rd, rg := w.ready[i][s-1], w.ring[i][s-1]; !rd.IsZero() && rg.After(rd) {
				xfer -= rg.Sub(rd)
			}
			if s > 1 { // the first step's wall time holds the wait for the first ring
				wall += time.Duration(r.WallSec * float64(time.Second))
			}
			sent += r.BytesSent
			row.attempts += r.Attempts
			if i < k-1 && s > 1 {
				compute, fastWall = compute+r.ComputeSec, fastWall+r.WallSec
			}
		}
		if !all {
			break
		}
		row.steps++
		if recs[0][s].Members == k {
			row.slowIn++
		}
	}
	if fastWall > 0 {
		row.fastUtil = compute / fastWall
	}
	if row.steps == 0 {
		return
	}
	n := time.Duration(row.steps * k)
	row.allReduce, row.transfer = ar/n, xfer/n
	if row.steps > 1 {
		row.stepWall = wall / time.Duration((row.steps-1)*k)
	}
	// A member sends its K−1 foreign segments and, as an owner, the
	// average of its own to K−1 members: 2·(K−1)/K of its payload.
	perMember := sent / int64(n)
	row.payload = perMember * int64(k) / int64(2*(k-1))
	row.bound = time.Duration(float64(perMember) / scaleRate * float64(time.Second))
}

// latest is the latest time any member reached step s in ts.
func latest(ts []map[uint64]time.Time, s uint64) time.Time {
	var l time.Time
	for _, m := range ts {
		if t, ok := m[s]; ok && t.After(l) {
			l = t
		}
	}
	return l
}

// scaleParts are the parts the table shows, in order.
var scaleParts = []string{p2p.PartGossip, p2p.PartDHT, p2p.PartHost, partAgreement, partAveraging, "hashing", partTraining, "other"}

// scaleTable prints the rows as a markdown table.
func scaleTable(rows []scaleRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nscale lab: mocknet, %v link delay, %d MiB/s uplink per member, sim device %d×%v, %d outer steps, GOMAXPROCS %d\n\n",
		scaleLatency, scaleRate>>20, scaleInner, scaleSimStep, scaleSteps, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "| K | first ring s | agreement s/step | s/outer step | all-reduce s from Ready | from ring | bound s | ratio | attempts/step | gossip KiB/member/step | gossip dropped/member | conns/member | streams/member | heap MiB/member | CPU %%/member | process CPU %% | load; spin %% | hashes |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		ag := make([]string, len(r.agreement))
		for i, d := range r.agreement {
			ag[i] = fmt.Sprintf("%.2f", d.Seconds())
		}
		ratio := 0.0
		if r.bound > 0 {
			ratio = r.transfer.Seconds() / r.bound.Seconds()
		}
		hashes := fmt.Sprintf("identical, %d steps", r.steps)
		if r.steps < scaleSteps {
			hashes = fmt.Sprintf("identical, only %d of %d steps in %v", r.steps, scaleSteps, scaleTimeout(r.k))
		}
		if r.hashMismatch > 0 {
			hashes = fmt.Sprintf("%d of %d steps differ", r.hashMismatch, r.steps)
		}
		if r.failed > 0 {
			hashes += fmt.Sprintf("; %d members failed: %.160s", r.failed, r.failure)
		}
		fmt.Fprintf(&b, "| %d | %.1f | %s | %.2f | %.2f | %.2f | %.2f | %.1f× | %.2f | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.0f | %s; %.0f | %s |\n",
			r.k, r.firstRing.Seconds(), strings.Join(ag, " "), r.stepWall.Seconds(), r.allReduce.Seconds(), r.transfer.Seconds(), r.bound.Seconds(), ratio,
			perStep(r.attempts, r), r.gossipBytes/1024, r.gossipLost, r.conns, r.streams, r.heapPerNode, r.cpuPerMember, r.cpuProcess, r.load, r.probe, hashes)
	}
	fmt.Fprintf(&b, "\nCPU per member by part, ms per outer step (the whole run's, from start, ÷ steps made; ms over the run where none was made; pprof label %q):\n\n| K | %s |\n|---|%s\n",
		p2p.PartLabel, strings.Join(scaleParts, " | "), strings.Repeat("---|", len(scaleParts)))
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d |", r.k)
		for _, p := range scaleParts {
			fmt.Fprintf(&b, " %.1f |", r.parts[p]/float64(max(r.steps, 1)))
		}
		fmt.Fprintln(&b)
	}
	if rows[0].slow >= 1 {
		fmt.Fprintf(&b, "\nMixed speeds: the last member's inner step %.3g× the others', overlapped (steps after the first):\n\n| K | fast members' utilization | rings with the slow member |\n|---|---|---|\n", rows[0].slow)
		for _, r := range rows {
			fmt.Fprintf(&b, "| %d | %.3f | %d of %d |\n", r.k, r.fastUtil, r.slowIn, r.steps)
		}
	}
	return b.String()
}

// perStep is v per member and step of r.
func perStep(v int, r scaleRow) float64 {
	if r.steps == 0 {
		return 0
	}
	return float64(v) / float64(r.steps*r.k)
}
