package collective

import "math"

// Optimal scalar quantization over a histogram: the compressed codecs cut a
// chunk's values into at most maxGroupBins bins of increasing values (the
// int8 codec's √-spaced buckets, or runs of sorted values), then group the
// bins into 2^b contiguous groups of least squared error, each decoding to
// the mean of its values. Least squared error ⇔ largest Σ_g S_g²/N_g
// (S_g, N_g the group's sum and count), found exactly by dynamic
// programming; the best split points are monotone in the end point (1D
// k-means is Monge), so each of the 2^b layers takes O(bins · log bins)
// by divide and conquer (Ckmeans.1d.dp's speed-up). Fixed order, float64,
// first best on ties: the same groups on every machine.

// maxGroupBins bounds the bins grouped.
const maxGroupBins = 256

// groupDP is the scratch space of optimal grouping; one per goroutine.
type groupDP struct {
	ps, pc    [maxGroupBins + 1]float64 // prefix sums of the bins' sums and counts
	prev, cur [maxGroupBins + 1]float64
	from      [maxLevels + 1][maxGroupBins + 1]int16
}

// gain is S²/N of bins [i, j), 0 when they are empty.
func (k *groupDP) gain(i, j int) float64 {
	n := k.pc[j] - k.pc[i]
	if n == 0 {
		return 0
	}
	d := k.ps[j] - k.ps[i]
	return float64(d*d) / n
}

// layer sets cur[j], for j in [jlo, jhi], to the best prev[i] + gain(i, j)
// over i in [ilo, min(j, ihi)], and from[g][j] to that i.
func (k *groupDP) layer(g, jlo, jhi, ilo, ihi int) {
	for jlo <= jhi {
		j := int(uint(jlo+jhi) >> 1)
		best, bi := math.Inf(-1), ilo
		for i := ilo; i <= min(j, ihi); i++ {
			if v := k.prev[i] + k.gain(i, j); v > best {
				best, bi = v, i
			}
		}
		k.cur[j], k.from[g][j] = best, int16(bi)
		k.layer(g, jlo, j-1, ilo, bi)
		jlo, ilo = j+1, bi // the right half, iteratively
	}
}

// cuts groups nb bins (ps, pc set for [0, nb]) into groups contiguous
// groups and writes the groups+1 bin offsets of their bounds to cut.
func (k *groupDP) cuts(nb, groups int, cut []int) {
	for j := 0; j <= nb; j++ {
		k.prev[j] = k.gain(0, j)
	}
	for g := 2; g <= groups; g++ {
		k.layer(g, 0, nb, 0, nb)
		k.prev, k.cur = k.cur, k.prev
	}
	cut[groups] = nb
	for g := groups; g >= 2; g-- {
		cut[g-1] = int(k.from[g][cut[g]])
	}
	cut[0] = 0
}
