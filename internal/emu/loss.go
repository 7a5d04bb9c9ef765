package emu

import (
	"math"
	"math/rand/v2"
)

// Loss drops packets independently with a fixed probability, drawn from a
// seeded generator so that a run can be repeated packet for packet. The zero
// Loss (or probability 0) never drops.
//
// A Loss is not safe for concurrent use.
type Loss struct {
	p   float64
	rng *rand.Rand
}

// NewLoss returns a Loss dropping each packet with probability p (0 ≤ p ≤ 1),
// drawing from a PCG generator seeded with (seed, stream); give each link its
// own stream so that links do not share a sequence.
func NewLoss(p float64, seed, stream uint64) Loss {
	return Loss{p: p, rng: rand.New(rand.NewPCG(seed, stream))}
}

// Drop reports whether the next packet is lost.
func (l *Loss) Drop() bool {
	switch {
	case l.p <= 0:
		return false
	case l.p >= 1:
		return true
	}
	return l.rng.Float64() < l.p
}

// DropSegments reports whether a super-packet of k segments is lost: with
// probability 1−(1−p)^k, the chance that any of its segments would be. The
// expected loss in bytes matches per-segment loss; losses come in bursts.
func (l *Loss) DropSegments(k int) bool {
	if k <= 1 || l.p <= 0 || l.p >= 1 {
		return l.Drop()
	}
	return l.rng.Float64() < 1-math.Pow(1-l.p, float64(k))
}
