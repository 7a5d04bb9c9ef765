package diloco

import (
	"context"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// handout is what one ring attempt's members share: made by the first to
// ask, forgotten once every member has its own.
type handout[T any] struct {
	v     []T
	taken int
}

// take returns the value of attempt rg in m, made by mk on first use.
func take[T any](s *memAverage, m map[string]*handout[T], rg *mesh.Ring, mk func() []T) []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := m[rg.ID]
	if h == nil {
		h = &handout[T]{v: mk()}
		m[rg.ID] = h
	}
	if h.taken++; h.taken == len(rg.Members) {
		delete(m, rg.ID)
	}
	return h.v
}

// meeting gathers the k members of one attempt: each arrives with its
// vector; the last to arrive computes what all of them then read.
type meeting struct {
	srcs    [][]float32 // by rank
	arrived int
	done    chan struct{}
	// Written by the last to arrive, before done is closed.
	out     []float32
	sent    [][]float32
	weights []float32
}

// meet puts src at rank in meeting key of k members and waits until all
// have arrived; the last to arrive runs last first. The vectors stay the
// members' until meet returns.
func (s *memAverage) meet(ctx context.Context, key string, k, rank int, src []float32, last func(*meeting)) (*meeting, error) {
	s.mu.Lock()
	m := s.meets[key]
	if m == nil {
		m = &meeting{srcs: make([][]float32, k), done: make(chan struct{})}
		s.meets[key] = m
	}
	m.srcs[rank] = src
	m.arrived++
	isLast := m.arrived == k
	if isLast {
		delete(s.meets, key)
	}
	s.mu.Unlock()
	if isLast {
		last(m)
		close(m.done)
	}
	select {
	case <-m.done:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// verdicts collects the scatter results of one attempt for the judge.
type verdicts struct {
	results  []collective.ScatterResult // by rank
	ended    int
	failures int
}

// judge records rank's result of attempt rg; the member that ends the
// attempt last hands every result to the judge, when all succeeded, and
// marks whom it convicts. It does so before it returns, so before it is
// Ready for the next step: the next ring's weights see the convictions.
func (s *memAverage) judge(rg *mesh.Ring, members []int, rank int, w []float32, res collective.ScatterResult, err error) {
	if s.a.Judge == nil {
		return
	}
	s.mu.Lock()
	v := s.judged[rg.ID]
	if v == nil {
		v = &verdicts{results: make([]collective.ScatterResult, len(rg.Members))}
		s.judged[rg.ID] = v
	}
	v.results[rank] = res
	v.ended++
	if err != nil {
		v.failures++
	}
	isLast := v.ended == len(rg.Members)
	if isLast {
		delete(s.judged, rg.ID)
	}
	s.mu.Unlock()
	if !isLast || v.failures > 0 {
		return
	}
	convicted := s.a.Judge.Judge(rg.Step+1, members, w, v.results)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range convicted {
		s.excluded[i] = true
	}
}
