package account

import (
	"strconv"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// OwnerView is what one in-memory owner's segments saw at one reduction
// of an in-process run: per ring rank the cosine of its member's
// contribution with the others' coordinate-wise median (0 for the owner
// itself and for a member taking no part), and the members (by index in
// the run) it convicted, with the evidence.
type OwnerView struct {
	Step     uint64 // the outer step the reduction makes
	Owner    int    // the owner's index in the run
	Cos      []float64
	Excluded map[int]string
}

// Judge is the exclusion rule of robust averaging in an in-process run of
// the direct scatter (node/diloco's Judge): like the network's members,
// every owner still taking part applies Offences to its segments, from one
// reduction to the next.
type Judge struct {
	robust   collective.RobustConfig
	watch    func(OwnerView)
	books    map[int]*Offences // by owner
	excluded map[int]bool
}

// NewJudge returns the rule of every owner of an in-process run with cfg.
// watch, if not nil, gets every owner's view after each reduction, owners
// in ring order.
func NewJudge(cfg collective.ScatterConfig, watch func(OwnerView)) (*Judge, error) {
	r := cfg.Robust
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &Judge{robust: r, watch: watch, books: map[int]*Offences{}, excluded: map[int]bool{}}, nil
}

// Judge applies the rule of every owner of one reduction still taking part
// to its segments, in ring order, and returns the members convicted.
// members[r] is the run index of ring rank r, w the weights they claimed,
// results[r] rank r's result.
func (j *Judge) Judge(step uint64, members []int, w []float32, results []collective.ScatterResult) []int {
	ids := make([]mesh.PeerID, len(members))
	for r, i := range members {
		ids[r] = mesh.PeerID(strconv.Itoa(i))
	}
	var convicted []int
	for r, res := range results {
		owner := members[r]
		if j.excluded[owner] || len(res.Owned) == 0 {
			continue
		}
		if j.books[owner] == nil {
			j.books[owner] = &Offences{}
		}
		sums, convs := j.books[owner].Note(Verdicts{Step: step, Members: ids, Self: r, Weights: w, Owned: res.Owned, Robust: j.robust})
		view := OwnerView{Step: step, Owner: owner, Cos: make([]float64, len(sums)), Excluded: map[int]string{}}
		for k, s := range sums {
			if k != r && w[k] > 0 {
				view.Cos[k] = s.Cos()
			}
		}
		for _, c := range convs {
			m := members[c.Rank]
			j.excluded[m] = true
			convicted = append(convicted, m)
			view.Excluded[m] = c.Evidence
		}
		if j.watch != nil {
			j.watch(view)
		}
	}
	return convicted
}
