package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/intellect-node/intellect-node/train"
)

// The outer loop against an in-memory ring (collective.NewMemRing), the sim
// engine, and fakeMesh: a small stand-in for the mesh goroutine that
// decides a ring once every live member is Ready, drops a blamed member and
// re-decides, and sends the dropped member a fetch.

// fakeMesh is the mesh of a group of test members.
type fakeMesh struct {
	mu        sync.Mutex
	ids       []mesh.PeerID
	live      []bool
	ready     map[uint64]map[int]int // step → rank → inner steps
	events    []chan meshEvent
	seq       int
	completed []uint64
	syncing   map[int]uint64      // rank → step of the model it was told to fetch
	blames    map[mesh.PeerID]int // of the current step's failed attempt
	stragglr  []int
	caughtUp  func(rank int) bool         // nil: every member at least at rank's step
	onReady   func(rank int, step uint64) // called under mu before deciding
}

func newFakeMesh(k int) *fakeMesh {
	f := &fakeMesh{ready: map[uint64]map[int]int{}, completed: make([]uint64, k), stragglr: make([]int, k), syncing: map[int]uint64{}}
	for i := range k {
		f.ids = append(f.ids, mesh.PeerID(fmt.Sprintf("m%d", i)))
		f.live = append(f.live, true)
		f.events = append(f.events, make(chan meshEvent, 64))
	}
	return f
}

// decide sends step's ring to its members once every live member is Ready
// and no member fetching a model of this step or an earlier one is still
// syncing. Caller holds mu.
func (f *fakeMesh) decide(step uint64) {
	for _, at := range f.syncing {
		if at <= step {
			return
		}
	}
	r := &mesh.Ring{ID: fmt.Sprintf("r%d-%d", step, f.seq), Step: step}
	for i, ok := range f.live {
		inner, ready := f.ready[step][i]
		if !ok {
			continue
		}
		if !ready {
			return
		}
		r.Members = append(r.Members, f.ids[i])
		r.Weights = append(r.Weights, float32(inner))
	}
	f.seq++
	for _, id := range r.Members {
		f.events[slices.Index(f.ids, id)] <- meshEvent{ring: r}
	}
}

// fakePort is one member's meshPort.
type fakePort struct {
	f    *fakeMesh
	rank int
}

func (p fakePort) Ready(step uint64, inner int) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.f.ready[step] == nil {
		p.f.ready[step] = map[int]int{}
	}
	p.f.ready[step][p.rank] = inner
	if p.f.onReady != nil {
		p.f.onReady(p.rank, step)
	}
	p.f.decide(step)
}

func (p fakePort) Completed(step uint64, hash string) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.completed[p.rank] = step + 1
}

// Failed counts a blame; a member blamed by two others is dropped, told to
// fetch the next step's model, and the ring decided again without it (the
// real mesh agrees on whom to drop by vote too).
func (p fakePort) Failed(step uint64, bad mesh.PeerID) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	i := slices.Index(p.f.ids, bad)
	if !p.f.live[p.rank] || i < 0 || !p.f.live[i] {
		return
	}
	if p.f.blames == nil {
		p.f.blames = map[mesh.PeerID]int{}
	}
	if p.f.blames[bad]++; p.f.blames[bad] < 2 {
		return
	}
	p.f.blames = nil
	p.f.tellFetch(i, step+1)
	p.f.decide(step)
}

// tellFetch drops member i and asks it to fetch the model of step. Caller
// holds mu.
func (f *fakeMesh) tellFetch(i int, step uint64) {
	f.live[i] = false
	f.syncing[i] = step
	f.events[i] <- meshEvent{fetch: &mesh.Fetch{Step: step}}
}

func (p fakePort) Synced(step uint64, hash string, _ []mesh.Made) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.live[p.rank] = true
	delete(p.f.syncing, p.rank)
	p.f.completed[p.rank] = step
}

func (p fakePort) SyncFailed() {}

func (p fakePort) SetStragglerTicks(ticks int) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.stragglr[p.rank] = ticks
}

func (p fakePort) CaughtUp(ctx context.Context) bool {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.f.caughtUp != nil {
		return p.f.caughtUp(p.rank)
	}
	for _, c := range p.f.completed {
		if c < p.f.completed[p.rank] {
			return false
		}
	}
	return true
}

func (p fakePort) Events() <-chan meshEvent { return p.f.events[p.rank] }

// sharedRings is the in-memory rings every member's testReducer shares;
// kill names, per ring id, a member whose transport dies after a few sends.
type sharedRings struct {
	mu    sync.Mutex
	rings map[string][]*collective.MemTransport
	kill  map[string]mesh.PeerID
}

type testReducer struct {
	s    *sharedRings
	cfg  collective.AllReduceConfig
	self mesh.PeerID
}

func (r testReducer) attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers) (ring.Stats, error) {
	r.s.mu.Lock()
	ts := r.s.rings[rg.ID]
	if ts == nil {
		ts = collective.NewMemRing(len(rg.Members), r.cfg.Shards)
		r.s.rings[rg.ID] = ts
	}
	victim := r.s.kill[rg.ID]
	r.s.mu.Unlock()
	rank := rg.Rank(r.self)
	var tr collective.Transport = ts[rank]
	if victim == r.self {
		tr = collective.DieAfter(ts[rank], 2)
	}
	_, err := collective.AllReduceInto(ctx, tr, rank, rg.Weights, b, r.cfg)
	return ring.Stats{}, err
}

func (r testReducer) failed(rg *mesh.Ring, err error) mesh.PeerID {
	rank, k := rg.Rank(r.self), len(rg.Members)
	bad := (rank - 1 + k) % k
	var pe *collective.PeerError
	if errors.As(err, &pe) && pe.Rank >= 0 && pe.Rank < k {
		bad = pe.Rank
	}
	if bad == rank {
		bad = (rank + 1) % k
	}
	return rg.Members[bad]
}

// member is one test node: its loop and what its hooks saw.
type member struct {
	l       *outerLoop
	eng     *simEngine
	mu      sync.Mutex
	hashes  map[uint64]string // outer step → G's hash
	models  map[uint64][]float32
	ends    map[uint64][]float32 // step t → E_t (the local model at Ready)
	fetches int
	group   *group
}

// group is a set of members training together.
type group struct {
	f       *fakeMesh
	members []*member
	rings   *sharedRings
}

type groupConfig struct {
	k, inner, lag int
	maxOuter      uint64
	codec         collective.Codec
	feedback      bool
	stepDur       []time.Duration // per member; default 1 ms
	lr, momentum  float32
}

func testOptions() train.Options {
	return train.Options{Model: train.Config{Vocab: 64, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, SeqLen: 16},
		Batch: 1, Seq: 16, GradAccum: 1, Seed: 7}
}

func newGroup(t *testing.T, c groupConfig) *group {
	g := &group{f: newFakeMesh(c.k), rings: &sharedRings{rings: map[string][]*collective.MemTransport{}, kill: map[string]mesh.PeerID{}}}
	if c.lr == 0 {
		c.lr = 1
	}
	for i := range c.k {
		opts := testOptions()
		opts.Worker = uint64(i + 1)
		dur := time.Millisecond
		if i < len(c.stepDur) {
			dur = c.stepDur[i]
		}
		eng, err := newSimEngine(opts, dur)
		if err != nil {
			t.Fatal(err)
		}
		gm := &globalModel{theta0: slices.Clone(eng.Params()), outer: train.NewOuter(len(eng.Params()), c.lr, c.momentum)}
		gm.set(0, func() {})
		m := &member{eng: eng, hashes: map[uint64]string{}, models: map[uint64][]float32{}, ends: map[uint64][]float32{}, group: g}
		cfg := loopConfig{inner: c.inner, lag: c.lag, maxOuter: c.maxOuter, tick: time.Millisecond, drain: time.Second}
		red := testReducer{s: g.rings, cfg: collective.AllReduceConfig{Codec: c.codec, Shards: 2, ChunkElems: 256, ErrorFeedback: c.feedback},
			self: g.f.ids[i]}
		m.l = newOuterLoop(cfg, recEngine{eng, m}, gm, red, fakePort{g.f, i}, m, c.feedback, slog.New(slog.NewTextHandler(io.Discard, nil)))
		g.members = append(g.members, m)
	}
	return g
}

// run runs every member's loop to its end and returns their errors.
func (g *group) run(t *testing.T) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, len(g.members))
	var wg sync.WaitGroup
	for i, m := range g.members {
		wg.Go(func() { errs[i] = m.l.run(ctx) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the group did not finish in time")
	}
	return errs
}

// recEngine records E_t, the local model when the loop reads it to form Δ.
type recEngine struct {
	*simEngine
	m *member
}

func (e recEngine) Params() []float32 {
	p := e.simEngine.Params()
	e.m.mu.Lock()
	if _, seen := e.m.ends[e.m.l.model.step]; !seen {
		e.m.ends[e.m.l.model.step] = slices.Clone(p)
	}
	e.m.mu.Unlock()
	return p
}

// The member's loopHooks.
func (m *member) innerDone(int, train.StepStats) {}

func (m *member) committed(t uint64, ot outerTimes, out outcome, eval float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hashes[t+1] = m.l.model.hash
	m.models[t+1] = slices.Clone(m.l.model.theta0)
}

// fetch copies the model of step f.Step from a member that has it.
func (m *member) fetch(ctx context.Context, ev meshEvent) error {
	m.mu.Lock()
	m.fetches++
	m.mu.Unlock()
	for {
		for _, o := range m.group.members {
			if o == m {
				continue
			}
			o.mu.Lock()
			model, ok := o.models[ev.fetch.Step]
			o.mu.Unlock()
			if ok {
				m.l.model.set(ev.fetch.Step, func() { copy(m.l.model.theta0, model) })
				if err := m.eng.SetParams(model); err != nil {
					return err
				}
				fakePort{m.group.f, slices.Index(m.group.members, m)}.Synced(ev.fetch.Step, m.l.model.hash, nil)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// TestOuterLoopAgrees: every member ends every step with the same global
// model, blocking and overlapped, int8 and with error feedback, and leaves
// with errLeft at maxOuter.
func TestOuterLoopAgrees(t *testing.T) {
	for _, c := range []groupConfig{
		{k: 3, inner: 3, lag: 0, maxOuter: 4, codec: collective.CodecInt8},
		{k: 3, inner: 3, lag: 2, maxOuter: 4, codec: collective.CodecInt8},
		{k: 3, inner: 3, lag: -1, maxOuter: 4, codec: collective.CodecInt8, stepDur: []time.Duration{time.Millisecond, 3 * time.Millisecond}},
		{k: 2, inner: 2, lag: 0, maxOuter: 3, codec: collective.CodecInt8, feedback: true, momentum: 0.9, lr: 0.7},
	} {
		t.Run(fmt.Sprintf("k%d-lag%d-ef%v", c.k, c.lag, c.feedback), func(t *testing.T) {
			g := newGroup(t, c)
			for i, err := range g.run(t) {
				if !errors.Is(err, errLeft) {
					t.Fatalf("member %d ended with %v, want errLeft", i, err)
				}
			}
			for s := uint64(1); s <= c.maxOuter; s++ {
				want := g.members[0].hashes[s]
				for i, m := range g.members {
					if m.hashes[s] == "" || m.hashes[s] != want {
						t.Fatalf("step %d: member %d has hash %q, member 0 %q", s, i, m.hashes[s], want)
					}
				}
			}
			if c.lag != 0 && g.f.stragglr[0] < mesh.DefaultStragglerTicks {
				t.Errorf("overlapped loop set straggler ticks %d", g.f.stragglr[0])
			}
		})
	}
}

// meanOf returns the element-wise mean of vs.
func meanOf(vs ...[]float32) []float32 {
	out := make([]float32, len(vs[0]))
	for j := range out {
		var s float64
		for _, v := range vs {
			s += float64(v[j])
		}
		out[j] = float32(s / float64(len(vs)))
	}
	return out
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, float64(abs32(a[i]-b[i])))
	}
	return d
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestOuterLoopIsDiLoCo: with fp32 averaging, outer lr 1 and no momentum,
// G_{t+1} is the mean of the members' ends E_t (Δ̄ = G − mean E), and after
// a blocking step every engine restarts from G_{t+1} exactly.
func TestOuterLoopIsDiLoCo(t *testing.T) {
	g := newGroup(t, groupConfig{k: 3, inner: 4, lag: 0, maxOuter: 3, codec: collective.CodecFP32})
	g.run(t)
	for s := uint64(0); s < 3; s++ {
		var ends [][]float32
		for _, m := range g.members {
			ends = append(ends, m.ends[s])
		}
		if d := maxDiff(g.members[0].models[s+1], meanOf(ends...)); d > 1e-6 {
			t.Fatalf("step %d: G differs from the mean of the ends by %g", s+1, d)
		}
	}
	for i, m := range g.members {
		if !slices.Equal(m.ends[2], m.ends[2]) || maxDiff(m.ends[2], g.members[0].models[2]) == 0 {
			t.Fatalf("member %d: no training between steps", i)
		}
	}
}

// TestOuterLoopRetryDivisor: a member dies in the first attempt of step 0;
// the others retry without it and average only their own two
// pseudo-gradients (divisor 2), and the dead member fetches the result.
func TestOuterLoopRetryDivisor(t *testing.T) {
	g := newGroup(t, groupConfig{k: 3, inner: 2, lag: 0, maxOuter: 2, codec: collective.CodecFP32})
	g.rings.kill["r0-0"] = g.f.ids[2]
	g.run(t)
	m0, m1, m2 := g.members[0], g.members[1], g.members[2]
	if d := maxDiff(m0.models[1], meanOf(m0.ends[0], m1.ends[0])); d > 1e-6 {
		t.Fatalf("step 1 is not the mean of the two survivors (off by %g)", d)
	}
	if m2.fetches != 1 || m2.hashes[1] != "" {
		t.Fatalf("the dead member fetched %d times and committed step 1 itself: %q", m2.fetches, m2.hashes[1])
	}
	if m2.hashes[2] == "" || m2.hashes[2] != m0.hashes[2] {
		t.Fatalf("after its fetch the member did not rejoin: step 2 hash %q vs %q", m2.hashes[2], m0.hashes[2])
	}
}

// TestOuterLoopFetchMidReduce: a fetch the mesh asks for while a member
// waits for its ring replaces the step: the member takes the fetched model
// and goes on training with the others.
func TestOuterLoopFetchMidReduce(t *testing.T) {
	g := newGroup(t, groupConfig{k: 2, inner: 2, lag: 0, maxOuter: 3, codec: collective.CodecInt8})
	// Member 1 is left out of step 1: when it is Ready, the mesh tells it
	// to fetch step 2 and decides step 1 without it.
	g.f.onReady = func(rank int, step uint64) {
		if rank == 1 && step == 1 {
			g.f.tellFetch(1, 2)
		}
	}
	errs := g.run(t)
	if !errors.Is(errs[1], errLeft) || g.members[1].fetches != 1 {
		t.Fatalf("member 1: %v after %d fetches", errs[1], g.members[1].fetches)
	}
	if h := g.members[1].hashes[3]; h == "" || h != g.members[0].hashes[3] {
		t.Fatalf("member 1 did not train step 3 with member 0: %q vs %q", h, g.members[0].hashes[3])
	}
}

// TestOuterLoopDrain: at maxOuter a member waits for the last ring to catch
// up, and leaves after the drain timeout if it never does.
func TestOuterLoopDrain(t *testing.T) {
	g := newGroup(t, groupConfig{k: 2, inner: 1, lag: 0, maxOuter: 1, codec: collective.CodecInt8})
	var asked int
	g.f.caughtUp = func(int) bool { asked++; return false }
	for _, m := range g.members {
		m.l.cfg.drain = 30 * time.Millisecond
	}
	start := time.Now()
	for i, err := range g.run(t) {
		if !errors.Is(err, errLeft) {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if took := time.Since(start); took < 30*time.Millisecond || asked < 2 {
		t.Fatalf("left after %v having asked %d times", took, asked)
	}
}

// TestOuterLoopLagOne: with lag 1 the first global step equals the
// blocking loop's (both phases start from G_0), and the local model is
// rebased: θ = E_0 + one step, moved by G_1 − E_0.
func TestOuterLoopLagOne(t *testing.T) {
	run := func(lag int) *group {
		// 8 inner steps: the sim engine's phase 0 touches every parameter
		// (one in 8 per step), so the step before the rebase matters.
		g := newGroup(t, groupConfig{k: 2, inner: 8, lag: lag, maxOuter: 2, codec: collective.CodecFP32})
		g.run(t)
		return g
	}
	g0, g1 := run(0), run(1)
	if g0.members[0].hashes[1] != g1.members[0].hashes[1] {
		t.Fatalf("step 1: lag 1 %q, lag 0 %q", g1.members[0].hashes[1], g0.members[0].hashes[1])
	}
	if g0.members[0].hashes[2] == g1.members[0].hashes[2] {
		t.Fatal("step 2 of lag 1 equals lag 0's: no overlap happened")
	}
	// E_1 of lag 1 started from the rebase; it is not G_1 plus phase 1 alone.
	if maxDiff(g1.members[0].ends[1], g0.members[0].ends[1]) == 0 {
		t.Fatal("lag 1 trained phase 1 exactly as lag 0 did")
	}
}

// TestOuterLoopCancel: cancelling ctx ends every loop with ctx's error and
// joins the worker.
func TestOuterLoopCancel(t *testing.T) {
	g := newGroup(t, groupConfig{k: 2, inner: 2, lag: -1, codec: collective.CodecInt8})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for _, m := range g.members {
		go func() { errs <- m.l.run(ctx) }()
	}
	time.Sleep(30 * time.Millisecond)
	cancel()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("loop ended with %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("loop did not end after cancel")
		}
	}
}

// TestRebaseInto: the loop's one-pass rebase gives train.Rebase's bits.
func TestRebaseInto(t *testing.T) {
	n := 1000
	p, from, to := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		p[i], from[i], to[i] = simNoise(1, uint64(i)), simNoise(2, uint64(i))*3, simNoise(3, uint64(i))*1e-3
	}
	want := slices.Clone(p)
	train.Rebase(want, from, to)
	got := make([]float32, n)
	rebaseInto(got, p, from, to)
	if !slices.Equal(got, want) {
		t.Fatal("rebaseInto differs from train.Rebase")
	}
}
