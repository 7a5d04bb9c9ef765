package diloco

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/train"
)

// localGroup is the in-memory mesh of an in-process run. It decides the
// ring of a step once every member not dropped from it is Ready (members in
// index order, weights the inner steps they did); a failed attempt drops
// the member it blames from the step and tells it to fetch the next model,
// which it copies from a member that has it. It gathers the members'
// commits into Records.
type localGroup struct {
	avg  *memAverage
	each func(Record)

	mu      sync.Mutex
	models  []*Model
	events  []chan Event
	ready   map[uint64]map[int]int  // step → member → inner steps
	dropped map[uint64]map[int]bool // step → members a failed attempt dropped
	current map[uint64]string       // step → id of its ring
	seq     int
	changed chan struct{} // closed (and replaced) when a member completes a step
	err     error         // the run cannot go on
	commits map[uint64]*stepCommits
	tokens  int64 // folded into the global model so far

	closeAt  []int // the inner steps of each member's phases (closeInner)
	stepTime int64 // the simulated time of a step
	clock    int64 // of the steps recorded so far
}

// stepCommits gathers the commits of one step.
type stepCommits struct {
	members    int
	tokens     int64
	eval       float64
	sent, recv int64
}

// errNoMembers fails a run whose every member of a step failed.
var errNoMembers = errors.New("diloco: no member of the step is left")

// localEventDepth is each member's event buffer: a few per step.
const localEventDepth = 64

func newLocalGroup(k int, a Averaging, each func(Record)) *localGroup {
	g := &localGroup{avg: newMemAverage(a), each: each, models: make([]*Model, k), events: make([]chan Event, k),
		ready: map[uint64]map[int]int{}, dropped: map[uint64]map[int]bool{}, current: map[uint64]string{},
		changed: make(chan struct{}), commits: map[uint64]*stepCommits{}}
	for i := range g.events {
		g.events[i] = make(chan Event, localEventDepth)
	}
	return g
}

// port returns member i's Port; m is its model, which others fetch.
func (g *localGroup) port(i int, m *Model) Port {
	g.models[i] = m
	return localPort{g, i}
}

func (g *localGroup) reducer(i int) Reducer { return memReducer{g.avg, i} }
func (g *localGroup) hooks(i int) Hooks     { return localHooks{g, i} }

// decide sends step's ring to its members once every member not dropped
// from it is Ready. Caller holds mu.
func (g *localGroup) decide(step uint64) {
	r := &mesh.Ring{ID: fmt.Sprintf("local/%d/%d", step, g.seq), Step: step}
	var members []int
	for i := range g.models {
		if g.dropped[step][i] {
			continue
		}
		inner, ok := g.ready[step][i]
		if !ok {
			return
		}
		members = append(members, i)
		r.Members = append(r.Members, localID(i))
		r.Weights = append(r.Weights, float32(inner))
	}
	if len(r.Members) == 0 {
		g.err = fmt.Errorf("%w: %d", errNoMembers, step)
		return
	}
	g.seq++
	g.current[step] = r.ID
	for _, i := range members {
		g.events[i] <- Event{Ring: r}
	}
}

// mustIndex is the member index of one of this run's ids.
func mustIndex(id mesh.PeerID) int {
	i, err := localMembers(&mesh.Ring{Members: []mesh.PeerID{id}})
	if err != nil {
		panic("diloco: not an in-process member: " + string(id))
	}
	return i[0]
}

// localPort is member i's Port in an in-process run.
type localPort struct {
	g *localGroup
	i int
}

// Ready records member i's inner steps of step and decides the ring when
// it is the last one Ready.
func (p localPort) Ready(step uint64, inner int) {
	g := p.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ready[step] == nil {
		g.ready[step] = map[int]int{}
	}
	g.ready[step][p.i] = inner
	if g.current[step] == "" {
		g.decide(step)
	}
}

// Completed wakes the members waiting to fetch a model.
func (p localPort) Completed(uint64, string) {
	g := p.g
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.changed)
	g.changed = make(chan struct{})
}

// Failed drops culprit from r's step, tells it to fetch the next model and
// decides the step's ring again; blames of an earlier ring are stale.
func (p localPort) Failed(r *mesh.Ring, culprit mesh.PeerID) {
	g := p.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.current[r.Step] != r.ID || r.Rank(culprit) < 0 {
		return
	}
	i := mustIndex(culprit)
	if g.dropped[r.Step] == nil {
		g.dropped[r.Step] = map[int]bool{}
	}
	g.dropped[r.Step][i] = true
	g.events[i] <- Event{Fetch: &mesh.Fetch{Step: r.Step + 1}}
	g.current[r.Step] = ""
	g.decide(r.Step)
}

// Closed reports whether member i's phase ends after inner steps under
// the run's simulated clock (closeInner).
func (p localPort) Closed(_ uint64, inner int) bool { return inner >= p.g.closeAt[p.i] }

func (p localPort) SetStragglerTicks(int)              {}
func (p localPort) CaughtUp(context.Context) bool      { return true }
func (p localPort) Events() <-chan Event               { return p.g.events[p.i] }
func (p localPort) Synced(uint64, string, []mesh.Made) {}

// Fetch copies the model of ev's step from a member that has it, waiting
// until one does.
func (p localPort) Fetch(ctx context.Context, ev Event) (*Fetched, error) {
	g := p.g
	for {
		g.mu.Lock()
		f, err, changed := g.find(p.i, ev.Fetch.Step), g.err, g.changed
		g.mu.Unlock()
		if f != nil || err != nil {
			return f, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// find copies the model of step from a member other than self that has
// it. Caller holds mu.
func (g *localGroup) find(self int, step uint64) *Fetched {
	var f *Fetched
	for j, m := range g.models {
		if j == self || f != nil {
			continue
		}
		m.Read(func(s uint64, _ string, theta0, v []float32) {
			if s == step {
				f = &Fetched{Step: s, Theta0: slices.Clone(theta0), Momentum: slices.Clone(v)}
			}
		})
	}
	return f
}

// localHooks gather member i's commits into the run's Records.
type localHooks struct {
	g *localGroup
	i int
}

func (h localHooks) InnerDone(int, train.StepStats) {}
func (h localHooks) Synced(uint64, string)          {}

// Committed adds member i's commit to its step's; the last member of the
// step's ring to commit emits the Record.
func (h localHooks) Committed(c Commit) {
	g := h.g
	g.mu.Lock()
	defer g.mu.Unlock()
	sc := g.commits[c.Step]
	if sc == nil {
		sc = &stepCommits{}
		g.commits[c.Step] = sc
	}
	sc.members++
	sc.tokens += c.Tokens
	sc.sent += c.Stats.BytesSent
	sc.recv += c.Stats.BytesRecv
	if h.i == 0 {
		sc.eval = c.Eval
	}
	if sc.members < len(c.Ring.Members) {
		return
	}
	delete(g.commits, c.Step)
	g.tokens += sc.tokens
	g.clock += g.stepTime
	if g.each != nil {
		g.each(Record{Step: int(c.Step), Tokens: g.tokens, EvalLoss: sc.eval, Hash: c.Hash,
			Members: sc.members, BytesSent: sc.sent, BytesRecv: sc.recv, Clock: g.clock})
	}
}
