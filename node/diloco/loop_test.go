package diloco

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/train"
)

// The loop against an in-memory ring (collective.NewMemRing), the test
// engine, and fakeMesh: a small stand-in for membership that decides a ring
// once every live member is Ready, drops a member blamed twice and decides
// again, sends the dropped member a fetch, and serves it the model from a
// member that committed it.

// fakeMesh is the mesh of a group of test members.
type fakeMesh struct {
	mu        sync.Mutex
	ids       []mesh.PeerID
	live      []bool
	ready     map[uint64]map[int]int // step → rank → inner steps
	events    []chan Event
	seq       int
	completed []uint64
	syncing   map[int]uint64      // rank → step of the model it was told to fetch
	blames    map[mesh.PeerID]int // of the current step's failed attempt
	stragglr  []int
	models    map[uint64]*Fetched                         // step → a committed model
	fetches   map[int]int                                 // rank → fetches asked
	changed   chan struct{}                               // closed (and replaced) at each commit
	caughtUp  func(rank int) bool                         // nil: every member at least at rank's step
	onReady   func(rank int, step uint64)                 // called under mu before deciding
	onSynced  func(rank int)                              // called under mu
	closed    func(rank int, step uint64, inner int) bool // Port.Closed, under mu; nil: false
}

func newFakeMesh(k int) *fakeMesh {
	f := &fakeMesh{ready: map[uint64]map[int]int{}, completed: make([]uint64, k), stragglr: make([]int, k),
		syncing: map[int]uint64{}, models: map[uint64]*Fetched{}, fetches: map[int]int{}, changed: make(chan struct{})}
	for i := range k {
		f.ids = append(f.ids, mesh.PeerID(fmt.Sprintf("m%d", i)))
		f.live = append(f.live, true)
		f.events = append(f.events, make(chan Event, 64))
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
		f.events[slices.Index(f.ids, id)] <- Event{Ring: r}
	}
}

// tellFetch drops member i and asks it to fetch the model of step. Caller
// holds mu.
func (f *fakeMesh) tellFetch(i int, step uint64) {
	f.live[i] = false
	f.syncing[i] = step
	f.events[i] <- Event{Fetch: &mesh.Fetch{Step: step}}
}

// keep records a committed model, for fetches.
func (f *fakeMesh) keep(m *Model) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m.Read(func(step uint64, _ string, theta0, v []float32) {
		f.models[step] = &Fetched{Step: step, Theta0: slices.Clone(theta0), Momentum: slices.Clone(v)}
	})
	close(f.changed)
	f.changed = make(chan struct{})
}

// fakePort is one member's Port.
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
func (p fakePort) Failed(r *mesh.Ring, bad mesh.PeerID) {
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
	p.f.tellFetch(i, r.Step+1)
	p.f.decide(r.Step)
}

// Fetch returns a copy of the model of the fetch's step once a member
// committed it.
func (p fakePort) Fetch(ctx context.Context, ev Event) (*Fetched, error) {
	p.f.mu.Lock()
	p.f.fetches[p.rank]++
	p.f.mu.Unlock()
	for {
		p.f.mu.Lock()
		m, changed := p.f.models[ev.Fetch.Step], p.f.changed
		p.f.mu.Unlock()
		if m != nil {
			return &Fetched{Step: m.Step, Theta0: slices.Clone(m.Theta0), Momentum: slices.Clone(m.Momentum)}, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p fakePort) Synced(step uint64, hash string, _ []mesh.Made) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.live[p.rank] = true
	delete(p.f.syncing, p.rank)
	p.f.completed[p.rank] = step
	if p.f.onSynced != nil {
		p.f.onSynced(p.rank)
	}
}

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

func (p fakePort) Events() <-chan Event { return p.f.events[p.rank] }

func (p fakePort) Closed(step uint64, inner int) bool {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	return p.f.closed != nil && p.f.closed(p.rank, step, inner)
}

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

func (r testReducer) Attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers) (Stats, error) {
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
	st, err := collective.AllReduceInto(ctx, tr, rank, rg.Weights, b, r.cfg)
	return Stats{BytesSent: st.BytesSent, BytesRecv: st.BytesRecv}, err
}

func (r testReducer) Failed(rg *mesh.Ring, err error) mesh.PeerID {
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

// member is one test member: its loop and what its hooks saw.
type member struct {
	l         *Loop
	eng       *testEngine
	mu        sync.Mutex
	hashes    map[uint64]string // outer step → G's hash
	models    map[uint64][]float32
	ends      map[uint64][]float32 // step t → E_t (the local model at Ready)
	commits   []Commit
	group     *group
	committed func(Commit) // if set, called by Committed
	innerDone func(int)    // if set, called by InnerDone
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
	wmu           float32 // Config.WorkerMomentum
}

// testParams is the model size of the loop tests.
const testParams = 2048

func newGroup(t *testing.T, c groupConfig) *group {
	g := &group{f: newFakeMesh(c.k), rings: &sharedRings{rings: map[string][]*collective.MemTransport{}, kill: map[string]mesh.PeerID{}}}
	if c.lr == 0 {
		c.lr = 1
	}
	for i := range c.k {
		dur := time.Millisecond
		if i < len(c.stepDur) {
			dur = c.stepDur[i]
		}
		eng := newTestEngine(testParams, 7, uint64(i+1), dur)
		gm := NewModel(0, slices.Clone(eng.Params()), NewOuter(len(eng.Params()), c.lr, c.momentum))
		m := &member{eng: eng, hashes: map[uint64]string{}, models: map[uint64][]float32{}, ends: map[uint64][]float32{}, group: g}
		cfg := Config{Inner: c.inner, Lag: c.lag, MaxOuter: c.maxOuter, Tick: time.Millisecond, Drain: time.Second,
			ErrorFeedback: c.feedback, Eval: true, WorkerMomentum: c.wmu}
		red := testReducer{s: g.rings, cfg: collective.AllReduceConfig{Codec: c.codec, Shards: 2, ChunkElems: 256, ErrorFeedback: c.feedback},
			self: g.f.ids[i]}
		var err error
		if m.l, err = New(cfg, recEngine{eng, m}, gm, red, fakePort{g.f, i}, m); err != nil {
			t.Fatal(err)
		}
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
		wg.Go(func() { errs[i] = m.l.Run(ctx) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the group did not finish in time")
	}
	return errs
}

// recEngine records E_t, the local model when the loop first reads it in
// step t (to form Δ, blocking).
type recEngine struct {
	*testEngine
	m *member
}

func (e recEngine) Params() []float32 {
	p := e.testEngine.Params()
	if e.m.l == nil {
		return p
	}
	step := e.m.l.model.Step()
	e.m.mu.Lock()
	if _, seen := e.m.ends[step]; !seen {
		e.m.ends[step] = slices.Clone(p)
	}
	e.m.mu.Unlock()
	return p
}

// The member's Hooks.
func (m *member) InnerDone(inner int, _ train.StepStats) {
	if m.innerDone != nil {
		m.innerDone(inner)
	}
}
func (m *member) Synced(uint64, string) {}

func (m *member) Committed(c Commit) {
	m.mu.Lock()
	m.hashes[c.Step] = c.Hash
	m.models[c.Step] = slices.Clone(m.l.model.theta0)
	m.commits = append(m.commits, c)
	m.mu.Unlock()
	m.group.f.keep(m.l.model)
	if m.committed != nil {
		m.committed(c)
	}
}
