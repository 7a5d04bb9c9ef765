package account

import (
	"fmt"
	"math"
	"slices"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// The exclusion rule of robust averaging (docs/robust.md "Exclusion"): what
// one segment owner's verdicts prove about a member, step after step. A
// member applies it to its own segments (Member.Observe); Judge applies it
// per owner of an in-process run as the network would, so that the
// experiments measure training with it.

// ExcludeAfter is how many outer steps in a row a member's contributions
// must be flagged (norm clipped hard, or not finite) before it is excluded.
const ExcludeAfter = 3

// A member whose contribution to this owner's segments has a negative
// inner product with the coordinate-wise median of the contributions (it
// pulled against the others) in OpposeAfter of the last OpposeWindow
// outer steps is excluded. Honest members' cosines stay well above 0
// (docs/robust.md "Exclusion"): they share the model and the data's
// distribution, and their own contribution is one of the median's. A
// window rather than a run of steps, so that an attacker that opposes
// every other step is caught too.
const (
	OpposeAfter  = 3
	OpposeWindow = 8
	// OpposeCos is the cosine below which a contribution opposes: below 0
	// by more than rounding (the inner product comes from a difference of
	// sums, so a contribution orthogonal to the median, or a zero median,
	// can come out a hair below 0).
	OpposeCos = -0.01
)

// Sums is what one owner's segments saw of one member at one step: the
// chunks flagged, and Σ over chunks of the contribution's squared norm,
// its inner product with the chunk's coordinate-wise median (Verdict.Dot),
// and the median's squared norm.
type Sums struct {
	Hard, Rejected            int
	NormSq, Dot, MedianNormSq float64
}

// Cos is the cosine of the contribution with the median over the owner's
// segments (0 when either is zero).
func (s Sums) Cos() float64 {
	if s.NormSq == 0 || s.MedianNormSq == 0 {
		return 0
	}
	return s.Dot / math.Sqrt(s.NormSq*s.MedianNormSq)
}

// Opposed reports whether the member pulled against the others: a cosine
// with their median below OpposeCos, of a contribution none of whose
// chunks was rejected.
func (s Sums) Opposed() bool { return s.Rejected == 0 && s.Cos() < OpposeCos }

// Flagged reports whether any chunk was clipped hard or rejected, or the
// contribution opposed the others.
func (s Sums) Flagged() bool { return s.Hard > 0 || s.Rejected > 0 || s.Opposed() }

// sumVerdicts adds up, per member of a k-member attempt, the verdicts of
// the segments owned.
func sumVerdicts(k int, owned []collective.SegmentReport) []Sums {
	out := make([]Sums, k)
	for _, rep := range owned {
		for c, chunk := range rep.Verdicts {
			var r float64
			if c < len(rep.MedianNorms) {
				r = float64(rep.MedianNorms[c])
			}
			for i, v := range chunk[:min(k, len(chunk))] {
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

// Verdicts is what one owner's segments saw in one attempt.
type Verdicts struct {
	Step    uint64        // the outer step (1-based) the attempt completes
	Members []mesh.PeerID // in ring rank order
	Self    int           // the owner's rank: not judged
	Weights []float32     // the inner steps each member claimed
	Owned   []collective.SegmentReport
	// Robust is the rule's configuration, defaults filled in: MaxWeight is
	// the run's H (0: no weight is too large) and ClipFactor × FlagFactor
	// the norm ratio that flags.
	Robust collective.RobustConfig
}

// Offences is one owner's memory of its verdicts, per member: the run of
// consecutive steps flagged, and the steps within the window that opposed
// the others. The zero value is ready; it is not safe for concurrent use.
type Offences struct {
	flagged map[mesh.PeerID][]uint64
	opposed map[mesh.PeerID][]uint64
}

// Conviction is a member the rule excludes, by rank in the attempt.
type Conviction struct {
	Rank     int
	Reason   Reason
	Evidence string
}

// Note records what the owner's segments saw of each member and returns
// the sums (by rank) and the members to exclude: a weight claimed over H
// (its own signed Ready said so), contributions flagged in ExcludeAfter
// steps in a row, or opposing the others in OpposeAfter of the last
// OpposeWindow steps. Provable misbehaviour, not an honest outlier. An
// owner that owns nothing (a client) convicts on the weight only.
func (o *Offences) Note(v Verdicts) ([]Sums, []Conviction) {
	sums := sumVerdicts(len(v.Members), v.Owned)
	if o.flagged == nil {
		o.flagged, o.opposed = make(map[mesh.PeerID][]uint64), make(map[mesh.PeerID][]uint64)
	}
	h := math.MaxInt32 // no H known: no weight conviction (the rule caps weights anyway)
	if v.Robust.MaxWeight > 0 {
		h = int(v.Robust.MaxWeight)
	}
	var out []Conviction
	for i, id := range v.Members {
		if i == v.Self {
			continue
		}
		if i < len(v.Weights) && v.Weights[i] > float32(h) {
			out = append(out, Conviction{i, ReasonWeight,
				fmt.Sprintf("claimed a weight of %g inner steps at step %d; the run's H is %d", v.Weights[i], v.Step, h)})
			continue
		}
		if len(v.Owned) == 0 {
			continue
		}
		if c, ok := o.judge(id, v, sums[i]); ok {
			c.Rank = i
			out = append(out, c)
		}
	}
	return sums, out
}

// judge applies the flag and direction rules to member id's sums s.
func (o *Offences) judge(id mesh.PeerID, v Verdicts, s Sums) (Conviction, bool) {
	seg := v.Owned[0].Segment
	run := noteRun(o.flagged, id, v.Step, s.Hard > 0 || s.Rejected > 0)
	if len(run) >= ExcludeAfter {
		return Conviction{Reason: ReasonFlagged, Evidence: fmt.Sprintf("its contributions to segment %d were flagged at steps %v (norm above %gx the median, or not finite)",
			seg, run, v.Robust.ClipFactor*v.Robust.FlagFactor)}, true
	}
	win := noteWindow(o.opposed, id, v.Step, s.Opposed())
	if len(win) >= OpposeAfter {
		return Conviction{Reason: ReasonOpposed, Evidence: fmt.Sprintf("its contributions to segment %d pointed against the other members' (negative inner product with their coordinate-wise median) at steps %v of the last %d (cosine %.3f at step %d)",
			seg, win, OpposeWindow, s.Cos(), v.Step)}, true
	}
	return Conviction{}, false
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
// offended within the last OpposeWindow (step included).
func noteWindow(m map[mesh.PeerID][]uint64, id mesh.PeerID, step uint64, offended bool) []uint64 {
	win := slices.DeleteFunc(m[id], func(s uint64) bool { return s+OpposeWindow <= step || s >= step })
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
