package mesh

import (
	"math"
	"slices"
)

// Bandwidth-aware ring order.
//
// Each member puts in its vote its measured cost of the link to every other
// member (round-trip time, Message.Links). A node decides only when it holds
// the vote of every member for the deciding round, so every decider sees the
// same rows and computes the same order — a pure function of them. The ids
// of rings with different orders differ, so a disagreement (which the rule
// above excludes) would fail the all-reduce handshake rather than mix rings.
//
// The order maximises the slowest link: it minimises the largest cost on the
// cycle (the bottleneck), then the sum. On window-limited TCP a link's rate
// goes as 1/RTT, and in the WAN profiles the slow, long links are the same
// ones, so this keeps the ring from crossing an ocean more often than it must.

// LinkUnreachable is the cost of a link this node has only through a relay
// (a NAT in the way and no hole punched yet), or knows cannot be direct.
// All-reduce bytes never cross a relay, so a ring never makes two members
// with such a link neighbours: the order avoids these links, and when no
// ring of direct links holds every member, the agreement leaves a member out
// of the step (see meshUnreachableMember).
const LinkUnreachable = math.MaxUint32

// SetLinkCosts replaces this node's measured link costs (in LinkUnit; 0 or
// absent: unknown). The next vote carries them for its members.
func (m *Mesh) SetLinkCosts(costs map[PeerID]uint32) {
	m.linkCost = make(map[PeerID]uint32, len(costs))
	for id, c := range costs {
		if c > 0 && id != m.cfg.ID {
			m.linkCost[id] = c
		}
	}
}

// linkRow returns this node's costs to members, nil if none is known.
func (m *Mesh) linkRow(members []Member) []uint32 {
	row := make([]uint32, len(members))
	known := false
	for i, mb := range members {
		if c := m.linkCost[mb.ID]; c > 0 {
			row[i], known = c, true
		}
	}
	if !known {
		return nil
	}
	return row
}

// voteLinks returns the rows of the decided vote's members: this node's own
// row and the one in each other member's latest vote (the same round's, as
// decidable checked).
func (m *Mesh) voteLinks() [][]uint32 {
	rows := make([][]uint32, len(m.ag.vote))
	for i, mb := range m.ag.vote {
		if mb.ID == m.cfg.ID {
			rows[i] = m.ag.links
		} else if v := m.latestVote(mb.ID); v != nil {
			rows[i] = v.links
		}
	}
	return rows
}

// meshExactOrderMax: up to this many members the bottleneck order is exact
// (a dynamic program over subsets); above it, 2-opt from the sorted order.
const meshExactOrderMax = 12

// meshRingOrder returns a permutation of 0..k−1: position → member index.
// rows[i][j] is member i's cost to member j (0, or a row that is missing or
// not of length k: unknown). The result depends only on k and rows.
func meshRingOrder(k int, rows [][]uint32) []int {
	order := make([]int, k)
	for i := range order {
		order[i] = i
	}
	if len(rows) != k {
		return order
	}
	c, ok := meshSymmetricCosts(rows)
	if !ok || k <= 3 {
		return order // nothing known, or every cyclic order has the same links
	}
	if k <= meshExactOrderMax {
		return meshExactOrder(c)
	}
	return meshTwoOpt(c, order)
}

// meshSymmetricCosts: c[i][j] = the larger of the two directions' costs
// where both are known, the known one otherwise, and the largest known cost
// where neither is (an unmeasured link is assumed to be as bad as the worst).
func meshSymmetricCosts(rows [][]uint32) ([][]uint64, bool) {
	k := len(rows)
	at := func(i, j int) uint32 {
		if len(rows[i]) == k {
			return rows[i][j]
		}
		return 0
	}
	c := make([][]uint64, k)
	var worst uint64 // the largest known cost of a direct link
	known := false
	for i := range c {
		c[i] = make([]uint64, k)
		for j := range c[i] {
			if i != j {
				c[i][j] = uint64(max(at(i, j), at(j, i)))
				known = known || c[i][j] != 0
				if c[i][j] != LinkUnreachable {
					worst = max(worst, c[i][j])
				}
			}
		}
	}
	if !known {
		return nil, false
	}
	for i := range c {
		for j := range c[i] {
			if i != j && c[i][j] == 0 {
				c[i][j] = max(worst, 1)
			}
		}
	}
	return c, true
}

// meshUnreachableMember returns the index of the member to leave out of
// this step when no ring of the k members avoids every LinkUnreachable link
// (with allDirect: when no member reaches every other directly, so that the
// direct scatter has no owner, see meshOwners; rows as for meshRingOrder):
// the one with the fewest direct links, the last such by index on a tie. Like the order, it is a pure function of the
// decided vote's rows, so every decider leaves out the same member. Above
// meshExactOrderMax members the order is a heuristic, so a direct ring that
// 2-opt misses costs a member its step.
func meshUnreachableMember(k int, rows [][]uint32, allDirect bool) (int, bool) {
	if k < 2 || len(rows) != k {
		return 0, false
	}
	c, ok := meshSymmetricCosts(rows)
	if !ok {
		return 0, false
	}
	if allDirect {
		if len(meshOwnerIndexes(c)) > 0 {
			return 0, false
		}
	} else if b, _ := meshCycleCost(c, meshRingOrder(k, rows)); b != LinkUnreachable {
		return 0, false
	}
	out, fewest := 0, k
	for i := range c {
		direct := 0
		for j := range c[i] {
			if i != j && c[i][j] != LinkUnreachable {
				direct++
			}
		}
		if direct <= fewest {
			out, fewest = i, direct
		}
	}
	return out, true
}

// meshCycleCost is (bottleneck, sum) of the cycle through order.
func meshCycleCost(c [][]uint64, order []int) (uint64, uint64) {
	var bottleneck, sum uint64
	for i, a := range order {
		e := c[a][order[(i+1)%len(order)]]
		bottleneck = max(bottleneck, e)
		sum += e
	}
	return bottleneck, sum
}

func meshCheaperCycle(b1, s1, b2, s2 uint64) bool { return b1 < b2 || (b1 == b2 && s1 < s2) }

// meshExactOrder finds a Hamiltonian cycle through member 0 minimising the
// bottleneck, exactly: the smallest threshold for which a cycle of links no
// costlier exists (DP over subsets), then, among the cycles under it, the
// one of least total cost.
func meshExactOrder(c [][]uint64) []int {
	k := len(c)
	var thresholds []uint64
	for i := range c {
		for j := i + 1; j < k; j++ {
			thresholds = append(thresholds, c[i][j])
		}
	}
	slices.Sort(thresholds)
	thresholds = slices.Compact(thresholds)
	lo, hi := 0, len(thresholds)-1 // the largest threshold always admits a cycle
	for lo < hi {
		mid := (lo + hi) / 2
		if meshMinSumCycle(c, thresholds[mid]) != nil {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return meshMinSumCycle(c, thresholds[lo])
}

// meshMinSumCycle returns the least-sum Hamiltonian cycle starting at member
// 0 using only links of cost ≤ limit, or nil if there is none. Ties go to the
// first found in a fixed iteration order, so the result is deterministic.
func meshMinSumCycle(c [][]uint64, limit uint64) []int {
	k := len(c)
	const inf = ^uint64(0)
	full := 1<<k - 1
	dp := make([]uint64, (1<<k)*k) // dp[mask*k+j]: least sum of a path 0 → j over mask
	prev := make([]int8, (1<<k)*k)
	for i := range dp {
		dp[i] = inf
	}
	dp[1*k+0] = 0
	for mask := 1; mask <= full; mask += 2 { // paths always contain member 0
		for j := 0; j < k; j++ {
			cur := dp[mask*k+j]
			if cur == inf {
				continue
			}
			for n := 1; n < k; n++ {
				if mask&(1<<n) != 0 || c[j][n] > limit {
					continue
				}
				nm := mask | 1<<n
				if v := cur + c[j][n]; v < dp[nm*k+n] {
					dp[nm*k+n], prev[nm*k+n] = v, int8(j)
				}
			}
		}
	}
	best, end := inf, -1
	for j := 1; j < k; j++ {
		if d := dp[full*k+j]; d != inf && c[j][0] <= limit && d+c[j][0] < best {
			best, end = d+c[j][0], j
		}
	}
	if end < 0 {
		return nil
	}
	order := make([]int, k)
	mask := full
	for pos, j := k-1, end; pos > 0; pos-- {
		order[pos] = j
		pj := int(prev[mask*k+j])
		mask &^= 1 << j
		j = pj
	}
	return order
}

// meshTwoOpt improves order by reversing segments while that lowers
// (bottleneck, sum), in a fixed scan order, for a bounded number of passes.
func meshTwoOpt(c [][]uint64, order []int) []int {
	k := len(order)
	b, s := meshCycleCost(c, order)
	for pass := 0; pass < 4*k; pass++ {
		improved := false
		for i := 1; i < k-1; i++ {
			for j := i + 1; j < k; j++ {
				slices.Reverse(order[i : j+1])
				if nb, ns := meshCycleCost(c, order); meshCheaperCycle(nb, ns, b, s) {
					b, s, improved = nb, ns, true
				} else {
					slices.Reverse(order[i : j+1])
				}
			}
		}
		if !improved {
			break
		}
	}
	return order
}

// meshOwnerIndexes returns, in index order, the members of c whose every
// link is direct: the direct scatter's segment owners (every member, owner
// or client, reaches each of them directly; two clients need not reach
// each other).
func meshOwnerIndexes(c [][]uint64) []int {
	var out []int
	for i := range c {
		direct := true
		for j := range c[i] {
			direct = direct && (i == j || c[i][j] != LinkUnreachable)
		}
		if direct {
			out = append(out, i)
		}
	}
	return out
}
