package diloco

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// Averaging is how the members of an in-process run average their
// pseudo-gradients: the plain float32 mean (the zero value), the ring
// all-reduce (Ring) or the robust direct scatter (Scatter). Each member's
// reducer runs its own part: the collectives' code over in-memory
// transports (collective.NewMemRing, NewMemMesh), as a network member runs
// it over streams, so the bits are the network's.
type Averaging struct {
	// Ring, if set, is the ring all-reduce's configuration
	// (collective.AllReduceInto).
	Ring *collective.AllReduceConfig
	// Scatter, if set, is the direct scatter's (collective.ScatterAllReduce).
	Scatter *collective.ScatterConfig
	// Judge, with Scatter, applies the exclusion rule after every
	// reduction; a member it convicts takes part with weight 0 from the next
	// reduction on.
	Judge Judge
	// Alter, if set, changes what the members send before every attempt
	// (attacks on the average).
	Alter Alter
}

// Judge applies robust averaging's exclusion rule in an in-process run.
// After every successful scatter reduction it gets each ring rank's result
// (members[r] is the member at rank r, weights the ones used) and returns
// the members it convicts. It is called once per reduction, in step order,
// never concurrently.
type Judge interface {
	Judge(step uint64, members []int, weights []float32, results []collective.ScatterResult) (convicted []int)
}

// Alter changes what the members of a ring send to an attempt: srcs[r] and
// weights[r] are the pseudo-gradient and claimed weight of the member at
// rank r (members[r] is its index in the run). It returns what each sends,
// and must not change srcs' contents. It is called once per attempt, with
// every member's vectors, never concurrently.
type Alter func(members []int, srcs [][]float32, weights []float32) (sent [][]float32, w []float32)

// validate rejects averagings that name two collectives or a judge without
// the scatter.
func (a Averaging) validate() error {
	if a.Ring != nil && a.Scatter != nil {
		return fmt.Errorf("%w: averaging by both the ring and the scatter", ErrConfig)
	}
	if a.Judge != nil && a.Scatter == nil {
		return fmt.Errorf("%w: a judge without the scatter", ErrConfig)
	}
	return nil
}

// errorFeedback reports whether the reducers carry residuals.
func (a Averaging) errorFeedback() bool {
	return a.Ring != nil && a.Ring.ErrorFeedback || a.Scatter != nil && a.Scatter.ErrorFeedback
}

// localID names member i of an in-process run.
func localID(i int) mesh.PeerID { return mesh.PeerID(strconv.Itoa(i)) }

// memAverage is the state the reducers of one in-process run share: the
// transports of each ring, the meetings of its members, the exclusions.
type memAverage struct {
	a        Averaging
	mu       sync.Mutex
	rings    map[string]*handout[*collective.MemTransport]
	meshes   map[string]*handout[*collective.MemMesh]
	meets    map[string]*meeting
	judged   map[string]*verdicts
	excluded map[int]bool
}

func newMemAverage(a Averaging) *memAverage {
	return &memAverage{a: a, rings: map[string]*handout[*collective.MemTransport]{}, meshes: map[string]*handout[*collective.MemMesh]{},
		meets: map[string]*meeting{}, judged: map[string]*verdicts{}, excluded: map[int]bool{}}
}

// memReducer is member self's Reducer in an in-process run.
type memReducer struct {
	s    *memAverage
	self int
}

// Attempt runs this member's part of one attempt over r.
func (r memReducer) Attempt(ctx context.Context, rg *mesh.Ring, b collective.Buffers) (Stats, error) {
	rank := rg.Rank(localID(r.self))
	members, err := localMembers(rg)
	if err != nil || rank < 0 {
		return Stats{}, fmt.Errorf("diloco: member %d in ring %s of %v: %w", r.self, rg.ID, rg.Members, err)
	}
	if b.Src == nil {
		b.Src = b.Dst
	}
	w := rg.Weights
	if r.s.a.Alter != nil {
		if b.Src, w, err = r.s.alter(ctx, rg, members, rank, b.Src); err != nil {
			return Stats{}, err
		}
	}
	var st collective.Stats
	switch {
	case r.s.a.Ring != nil:
		st, err = collective.AllReduceInto(ctx, r.s.ring(rg, *r.s.a.Ring)[rank], rank, w, b, *r.s.a.Ring)
	case r.s.a.Scatter != nil:
		st, err = r.s.scatter(ctx, rg, members, rank, w, b)
	default:
		err = r.s.mean(ctx, rg, rank, w, b)
	}
	return Stats{BytesSent: st.BytesSent, BytesRecv: st.BytesRecv}, err
}

// Failed names the member the error names, else this member: in a
// process nothing fails but a member's own input.
func (r memReducer) Failed(rg *mesh.Ring, err error) mesh.PeerID {
	var pe *collective.PeerError
	if errors.As(err, &pe) && pe.Rank >= 0 && pe.Rank < len(rg.Members) {
		return rg.Members[pe.Rank]
	}
	return localID(r.self)
}

// localMembers returns the run's member index of each ring rank.
func localMembers(rg *mesh.Ring) ([]int, error) {
	members := make([]int, len(rg.Members))
	for r, id := range rg.Members {
		i, err := strconv.Atoi(string(id))
		if err != nil {
			return nil, err
		}
		members[r] = i
	}
	return members, nil
}

// ring returns the in-memory ring of attempt rg.
func (s *memAverage) ring(rg *mesh.Ring, cfg collective.AllReduceConfig) []*collective.MemTransport {
	return take(s, s.rings, rg, func() []*collective.MemTransport {
		return collective.NewMemRing(len(rg.Members), max(cfg.Shards, 1))
	})
}

// scatter runs rank's part of the direct scatter over rg, members convicted
// before taking part with weight 0, and hands its result to the judge.
func (s *memAverage) scatter(ctx context.Context, rg *mesh.Ring, members []int, rank int, w []float32, b collective.Buffers) (collective.Stats, error) {
	s.mu.Lock()
	w = slices.Clone(w)
	for r, i := range members {
		if s.excluded[i] {
			w[r] = 0
		}
	}
	s.mu.Unlock()
	cfg := *s.a.Scatter
	mm := take(s, s.meshes, rg, func() []*collective.MemMesh {
		return collective.NewMemMesh(len(rg.Members), 2*max(cfg.Shards, 1))
	})
	res, err := collective.ScatterAllReduce(ctx, mm[rank], rank, w, b, cfg)
	s.judge(rg, members, rank, w, res, err)
	return res.Stats, err
}

// mean is the plain float32 mean: every member's vector is gathered, and
// the last to arrive computes the mean (meanInto) that every member copies.
func (s *memAverage) mean(ctx context.Context, rg *mesh.Ring, rank int, w []float32, b collective.Buffers) error {
	m, err := s.meet(ctx, rg.ID+"/mean", len(rg.Members), rank, b.Src, func(m *meeting) {
		m.out = make([]float32, len(b.Dst))
		meanInto(m.out, m.srcs, w)
	})
	if err == nil {
		copy(b.Dst, m.out)
	}
	return err
}

// meanInto writes the weighted mean of vs, member by member in order, in
// float32: out ← Σ (wᵢ/Σw)·vsᵢ.
func meanInto(out []float32, vs [][]float32, weights []float32) {
	var total float32
	for _, w := range weights {
		total += w
	}
	clear(out)
	for i, v := range vs {
		s := weights[i] / total
		for j, x := range v {
			out[j] += float32(s * x)
		}
	}
}

// alter gathers the members' vectors of attempt rg and returns what rank
// sends and the weights every member uses, as Averaging.Alter says.
func (s *memAverage) alter(ctx context.Context, rg *mesh.Ring, members []int, rank int, src []float32) ([]float32, []float32, error) {
	m, err := s.meet(ctx, rg.ID+"/alter", len(rg.Members), rank, src, func(m *meeting) {
		m.sent, m.weights = s.a.Alter(members, m.srcs, slices.Clone(rg.Weights))
	})
	if err != nil {
		return nil, nil, err
	}
	return m.sent[rank], m.weights, nil
}

// Average runs one reduction with a outside a run: srcs[i] is member i's
// vector, at rank i of a ring of all of them, with weights; out receives
// member 0's result. It is the averaging alone, for tests and experiments.
func Average(ctx context.Context, a Averaging, srcs [][]float32, weights []float32, out []float32) error {
	if err := a.validate(); err != nil {
		return err
	}
	rg := &mesh.Ring{ID: "average", Weights: weights}
	for i := range srcs {
		rg.Members = append(rg.Members, localID(i))
	}
	s := newMemAverage(a)
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i, src := range srcs {
		b := collective.Buffers{Src: src, Dst: out}
		if i > 0 {
			b.Dst = make([]float32, len(out))
		}
		if a.errorFeedback() {
			b.ResIn, b.ResOut = make([]float32, len(out)), make([]float32, len(out))
		}
		wg.Go(func() { _, errs[i] = memReducer{s, i}.Attempt(ctx, rg, b) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
