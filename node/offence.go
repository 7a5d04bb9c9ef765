package node

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// The exclusion rule of robust averaging (docs/robust.md "Exclusion"): what
// one segment owner's verdicts prove about a member, step after step. The
// node applies it to its own segments (noteVerdicts); ScatterJudge applies
// it per owner of an in-process run as the network would, so that the
// experiments measure training with it.

// excludeAfter is how many outer steps in a row a member's contributions
// must be flagged (norm clipped hard, or not finite) before it is excluded.
const excludeAfter = 3

// A member whose contribution to this owner's segments has a negative
// inner product with the coordinate-wise median of the contributions (it
// pulled against the others) in opposeAfter of the last opposeWindow
// outer steps is excluded. Honest members' cosines stay well above 0
// (docs/robust.md "Exclusion"): they share the model and the data's
// distribution, and their own contribution is one of the median's. A
// window rather than a run of steps, so that an attacker that opposes
// every other step is caught too.
const (
	opposeAfter  = 3
	opposeWindow = 8
	// opposeCos is the cosine below which a contribution opposes: below 0
	// by more than rounding (the inner product comes from a difference of
	// sums, so a contribution orthogonal to the median, or a zero median,
	// can come out a hair below 0).
	opposeCos = -0.01
)

// memberSums is what one owner's segments saw of one member at one step:
// the chunks flagged, and Σ over chunks of the contribution's squared
// norm, its inner product with the chunk's coordinate-wise median
// (Verdict.Dot), and the median's squared norm.
type memberSums struct {
	Hard, Rejected            int
	NormSq, Dot, MedianNormSq float64
}

// Cos is the cosine of the contribution with the median over the owner's
// segments (0 when either is zero).
func (s memberSums) Cos() float64 {
	if s.NormSq == 0 || s.MedianNormSq == 0 {
		return 0
	}
	return s.Dot / math.Sqrt(s.NormSq*s.MedianNormSq)
}

// opposed reports whether the member pulled against the others: a
// cosine with their median below opposeCos, of a contribution none of
// whose chunks was rejected.
func (s memberSums) opposed() bool { return s.Rejected == 0 && s.Cos() < opposeCos }

// sumVerdicts adds up, per member of a k-member attempt, the verdicts of
// the segments owned.
func sumVerdicts(k int, owned []collective.SegmentReport) []memberSums {
	out := make([]memberSums, k)
	for _, rep := range owned {
		for c, chunk := range rep.Verdicts {
			var r float64
			if c < len(rep.MedianNorms) {
				r = float64(rep.MedianNorms[c])
			}
			for i, v := range chunk {
				if i >= k {
					break
				}
				s := &out[i]
				switch v.Flag {
				case collective.FlagHard:
					s.Hard++
				case collective.FlagRejected:
					s.Rejected++
					continue
				}
				s.NormSq += float64(v.Norm) * float64(v.Norm)
				s.Dot += float64(v.Dot)
				s.MedianNormSq += r * r
			}
		}
	}
	return out
}

// offenceBook is one owner's memory of its verdicts, per member: the run
// of consecutive steps flagged, and the steps within the window that
// opposed the others.
type offenceBook struct {
	mu      sync.Mutex
	flagged map[mesh.PeerID][]uint64
	opposed map[mesh.PeerID][]uint64
}

// offence is a member to exclude, with the evidence.
type offence struct {
	member   int // index in the attempt
	evidence string
}

// note records what an owner's segments (owned, segment seg) saw of each
// member at outer step (1-based) of an attempt with these members and
// claimed weights (self, the owner's index, is skipped), h being the run's
// H, and returns the sums and the members to exclude: a weight claimed
// over H (its own signed Ready said so), contributions flagged in
// excludeAfter steps in a row, or opposing the others in opposeAfter of
// the last opposeWindow steps. Provable misbehaviour, not an honest
// outlier.
func (b *offenceBook) note(members []mesh.PeerID, self int, weights []float32, h int, step uint64, seg int, owned []collective.SegmentReport) ([]memberSums, []offence) {
	sums := sumVerdicts(len(members), owned)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.flagged == nil {
		b.flagged, b.opposed = make(map[mesh.PeerID][]uint64), make(map[mesh.PeerID][]uint64)
	}
	var out []offence
	for i, id := range members {
		if i == self {
			continue
		}
		if i < len(weights) && weights[i] > float32(h) {
			out = append(out, offence{i, fmt.Sprintf("claimed a weight of %g inner steps at step %d; the run's H is %d", weights[i], step, h)})
			continue
		}
		if len(owned) == 0 {
			continue // a client judges nobody
		}
		s := sums[i]
		run := noteRun(b.flagged, id, step, s.Hard > 0 || s.Rejected > 0)
		if len(run) >= excludeAfter {
			out = append(out, offence{i, fmt.Sprintf("its contributions to segment %d were flagged at steps %v (norm above %gx the median, or not finite)",
				seg, run, flagNorm)})
			continue
		}
		win := noteWindow(b.opposed, id, step, s.opposed())
		if len(win) >= opposeAfter {
			out = append(out, offence{i, fmt.Sprintf("its contributions to segment %d pointed against the other members' (negative inner product with their coordinate-wise median) at steps %v of the last %d (cosine %.3f at step %d)",
				seg, win, opposeWindow, s.Cos(), step)})
		}
	}
	return sums, out
}

// noteRun records whether id was flagged at step and returns its current
// run of consecutive flagged steps.
func noteRun(m map[mesh.PeerID][]uint64, id mesh.PeerID, step uint64, flagged bool) []uint64 {
	run := m[id]
	if !flagged || (len(run) > 0 && run[len(run)-1]+1 != step) {
		run = run[:0]
	}
	if flagged {
		run = append(run, step)
	}
	return keepSteps(m, id, run)
}

// noteWindow records whether id offended at step and returns the steps it
// offended within the last opposeWindow (step included).
func noteWindow(m map[mesh.PeerID][]uint64, id mesh.PeerID, step uint64, offended bool) []uint64 {
	win := slices.DeleteFunc(m[id], func(s uint64) bool { return s+opposeWindow <= step || s >= step })
	if offended {
		win = append(win, step)
	}
	return keepSteps(m, id, win)
}

// keepSteps stores steps as id's (deleting the entry when empty) and
// returns a copy.
func keepSteps(m map[mesh.PeerID][]uint64, id mesh.PeerID, steps []uint64) []uint64 {
	if len(steps) == 0 {
		delete(m, id)
		return nil
	}
	m[id] = steps
	return slices.Clone(steps)
}

// flagNorm is the norm ratio to the median above which a contribution is
// flagged (collective.RobustConfig's ClipFactor × FlagFactor defaults).
var flagNorm = func() float64 {
	c := collective.RobustConfig{}
	c.Validate()
	return c.ClipFactor * c.FlagFactor
}()
