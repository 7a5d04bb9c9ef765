package mesh

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// twoRegions is the cost matrix of 6 members with regions interleaved by id
// (0, 2, 4 in one; 1, 3, 5 in the other): 10 within a region, 300 across,
// except two cheaper crossings (4–1: 150, 5–0: 160). The best ring crosses
// only at those two: bottleneck 160. Sorted order crosses six times: 300.
func twoRegions() [][]uint32 {
	rows := make([][]uint32, 6)
	for i := range rows {
		rows[i] = make([]uint32, 6)
		for j := range rows[i] {
			switch {
			case i == j:
			case i%2 == j%2:
				rows[i][j] = 10
			default:
				rows[i][j] = 300
			}
		}
	}
	rows[4][1], rows[1][4] = 150, 150
	rows[5][0], rows[0][5] = 160, 160
	return rows
}

func bottleneck(rows [][]uint32, order []int) uint64 {
	c, _ := meshSymmetricCosts(rows)
	b, _ := meshCycleCost(c, order)
	return b
}

func TestRingOrderMaximisesSlowestLink(t *testing.T) {
	rows := twoRegions()
	order := meshRingOrder(6, rows)
	if got := bottleneck(rows, order); got != 160 {
		t.Fatalf("order %v has bottleneck %d, want 160", order, got)
	}
	if got := bottleneck(rows, []int{0, 1, 2, 3, 4, 5}); got != 300 {
		t.Fatalf("sorted order bottleneck %d, want 300", got)
	}
	if again := meshRingOrder(6, rows); !slices.Equal(again, order) {
		t.Fatalf("not deterministic: %v then %v", order, again)
	}
}

func TestRingOrderUnknownIsIdentity(t *testing.T) {
	for _, rows := range [][][]uint32{nil, {nil, nil, nil, nil}, {{0, 0}, {0, 0}, {0, 0}, {0, 0}}} {
		if got := meshRingOrder(4, rows); !slices.Equal(got, []int{0, 1, 2, 3}) {
			t.Fatalf("rows %v: order %v, want identity", rows, got)
		}
	}
}

// TestRingOrderExactMatchesBruteForce compares the DP with every cyclic
// order on random matrices, some entries unknown.
func TestRingOrderExactMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 60; trial++ {
		k := 4 + trial%4
		rows := make([][]uint32, k)
		for i := range rows {
			rows[i] = make([]uint32, k)
			for j := range rows[i] {
				if i != j && rng.IntN(8) != 0 {
					rows[i][j] = uint32(1 + rng.IntN(50))
				}
			}
		}
		got := bottleneck(rows, meshRingOrder(k, rows))
		best := ^uint64(0)
		perm := make([]int, k)
		for i := range perm {
			perm[i] = i
		}
		permute(perm, 1, func(p []int) { best = min(best, bottleneck(rows, p)) })
		if got != best {
			t.Fatalf("trial %d (k=%d): bottleneck %d, brute force %d", trial, k, got, best)
		}
	}
}

func permute(p []int, i int, f func([]int)) {
	if i == len(p) {
		f(p)
		return
	}
	for j := i; j < len(p); j++ {
		p[i], p[j] = p[j], p[i]
		permute(p, i+1, f)
		p[i], p[j] = p[j], p[i]
	}
}

// TestRingOrderLargeUsesTwoOpt: above the exact limit the order is still a
// permutation and no worse than sorted order.
func TestRingOrderLargeUsesTwoOpt(t *testing.T) {
	k := 20
	rows := make([][]uint32, k)
	for i := range rows {
		rows[i] = make([]uint32, k)
		for j := range rows[i] {
			if i != j {
				rows[i][j] = 10
				if i%2 != j%2 {
					rows[i][j] = 300
				}
			}
		}
	}
	order := meshRingOrder(k, rows)
	seen := slices.Clone(order)
	slices.Sort(seen)
	for i, v := range seen {
		if v != i {
			t.Fatalf("not a permutation: %v", order)
		}
	}
	identity := make([]int, k)
	for i := range identity {
		identity[i] = i
	}
	c, _ := meshSymmetricCosts(rows)
	b, s := meshCycleCost(c, order)
	ib, is := meshCycleCost(c, identity)
	if meshCheaperCycle(ib, is, b, s) {
		t.Fatalf("2-opt order (%d, %d) worse than sorted (%d, %d)", b, s, ib, is)
	}
	if s >= is {
		t.Fatalf("2-opt did not reduce the crossings: sum %d vs sorted %d", s, is)
	}
}

// TestSimRingOrder: members that measured their links all decide the same,
// bottleneck-optimal ring order, every step, with no failed attempt.
func TestSimRingOrder(t *testing.T) {
	rows := twoRegions()
	s := newSimNet(t, 11)
	s.addN(6, nil)
	for i, id := range s.ids {
		costs := map[PeerID]uint32{}
		for j, other := range s.ids {
			costs[other] = rows[i][j]
		}
		s.nodes[id].m.SetLinkCosts(costs)
	}
	s.runUntil(3000, "4 steps done", func() bool { return s.minStep() >= 4 })
	if len(s.done) < 4 {
		t.Fatalf("%d rings completed", len(s.done))
	}
	for _, d := range s.done {
		if len(d.ring.Members) != 6 {
			t.Fatalf("step %d: ring of %d", d.step, len(d.ring.Members))
		}
		order := make([]int, 6)
		for pos, id := range d.ring.Members {
			order[pos] = slices.Index(s.ids, id)
		}
		if b := bottleneck(rows, order); b != 160 {
			t.Fatalf("step %d: ring order %v bottleneck %d, want 160", d.step, d.ring.Members, b)
		}
	}
	for _, id := range s.ids {
		if f := s.nodes[id].m.Status().Failures; f != 0 {
			t.Fatalf("%s reported %d all-reduce failures: orders disagreed", id, f)
		}
	}
}

// natRows: 4 members at cost 10 from each other, except the listed pairs,
// which only a relay connects (LinkUnreachable, said by one side only, the
// other side not knowing: as a node reports a relayed connection).
func natRows(relayed ...[2]int) [][]uint32 {
	rows := make([][]uint32, 4)
	for i := range rows {
		rows[i] = make([]uint32, 4)
		for j := range rows[i] {
			if i != j {
				rows[i][j] = 10
			}
		}
	}
	for _, p := range relayed {
		rows[p[0]][p[1]], rows[p[1]][p[0]] = LinkUnreachable, 0
	}
	return rows
}

func TestRingOrderAvoidsRelayedLinks(t *testing.T) {
	rows := natRows([2]int{0, 1}, [2]int{2, 3})
	order := meshRingOrder(4, rows)
	if b := bottleneck(rows, order); b != 10 {
		t.Fatalf("order %v has bottleneck %d, want 10 (a ring of direct links exists)", order, b)
	}
	if i, ok := meshUnreachableMember(4, rows, false); ok {
		t.Fatalf("member %d left out although a direct ring exists", i)
	}
	// The direct scatter needs an owner every member reaches: with 0–1 and
	// 2–3 relayed there is none; with 0–1 alone, 2 and 3 are.
	if _, ok := meshUnreachableMember(4, rows, true); !ok {
		t.Fatal("all-direct: nobody left out although no member reaches all")
	}
	if i, ok := meshUnreachableMember(4, natRows([2]int{0, 1}), true); ok {
		t.Fatalf("all-direct: member %d left out although 2 and 3 reach everyone", i)
	}
}

func TestUnreachableMemberLeftOut(t *testing.T) {
	cases := []struct {
		rows [][]uint32
		want int
	}{
		{natRows([2]int{3, 1}, [2]int{2, 3}), 3},               // 3 reaches only 0
		{natRows([2]int{0, 1}, [2]int{0, 2}), 0},               // 0 reaches only 3
		{natRows([2]int{0, 1}, [2]int{2, 3}, [2]int{0, 2}), 2}, // 0 and 2 tie at one link: the last
	}
	for _, c := range cases {
		got, ok := meshUnreachableMember(4, c.rows, false)
		if !ok || got != c.want {
			t.Fatalf("rows %v: left out %d (%v), want %d", c.rows, got, ok, c.want)
		}
	}
	// Two members: their one link must be direct.
	if _, ok := meshUnreachableMember(2, [][]uint32{{0, LinkUnreachable}, {0, 0}}, false); !ok {
		t.Fatal("a relayed pair formed a ring")
	}
	if _, ok := meshUnreachableMember(2, [][]uint32{{0, 5}, {5, 0}}, true); ok {
		t.Fatal("a direct pair was split")
	}
}

// setSimLinks gives every sim node its row of rows as link costs.
func setSimLinks(s *simNet, rows [][]uint32) {
	for i, id := range s.ids {
		costs := map[PeerID]uint32{}
		for j, other := range s.ids {
			costs[other] = rows[i][j]
		}
		s.nodes[id].m.SetLinkCosts(costs)
	}
}

// TestSimNATRings: member 3 is reached directly only by member 0 (the others
// have it only through a relay). No ring of 4 direct links exists, so every
// step's ring is the other three, and no all-reduce fails on a relayed
// link; with only the pair 1–3 relayed, rings of four avoid that link.
func TestSimNATRings(t *testing.T) {
	for _, c := range []struct {
		relayed [][2]int
		size    int
	}{{[][2]int{{1, 3}, {3, 2}}, 3}, {[][2]int{{1, 3}}, 4}} {
		rows := natRows(c.relayed...)
		s := newSimNet(t, 12)
		s.fetchTicks = 3 * DefaultStragglerTicks // the left-out member is still fetching when the next step is Ready
		s.addN(4, nil)
		setSimLinks(s, rows)
		s.runUntil(4000, "1 step done", func() bool { return len(s.done) >= 1 })
		first := s.now // the first ring may wait up to StragglerTicks for links to be punched
		s.runUntil(4000, "4 steps done", func() bool { return len(s.done) >= 4 })
		// Later steps: nobody waits StragglerTicks for a member it cannot
		// reach directly.
		if took := s.now - first; took >= DefaultStragglerTicks {
			t.Fatalf("relayed %v: steps 2-4 took %d ticks: someone waited for the unreachable member", c.relayed, took)
		}
		for _, d := range s.done {
			if len(d.ring.Members) != c.size {
				t.Fatalf("relayed %v: step %d ring %v, want %d members", c.relayed, d.step, d.ring.Members, c.size)
			}
			order := make([]int, len(d.ring.Members))
			for pos, id := range d.ring.Members {
				order[pos] = slices.Index(s.ids, id)
			}
			for pos, a := range order {
				b := order[(pos+1)%len(order)]
				if rows[a][b] == LinkUnreachable || rows[b][a] == LinkUnreachable {
					t.Fatalf("relayed %v: step %d ring %v has the relayed link %d–%d", c.relayed, d.step, d.ring.Members, a, b)
				}
			}
		}
		for _, id := range s.ids {
			if f := s.nodes[id].m.Status().Failures; f != 0 {
				t.Fatalf("%s reported %d all-reduce failures", id, f)
			}
		}
	}
}

// TestSimFirstRingWaitsForPunching: at the start member 3 is reached
// directly by member 0 only; its other links are punched 30 ticks later.
// The first ring waits for them and holds all four members.
func TestSimFirstRingWaitsForPunching(t *testing.T) {
	s := newSimNet(t, 13)
	s.addN(4, nil)
	setSimLinks(s, natRows([2]int{1, 3}, [2]int{3, 2}))
	for range 30 {
		s.tick()
	}
	if len(s.done) != 0 {
		t.Fatalf("a ring completed before the links were punched: %v", s.done[0].ring.Members)
	}
	setSimLinks(s, natRows())
	s.runUntil(2000, "1 step done", func() bool { return len(s.done) >= 1 })
	if got := len(s.done[0].ring.Members); got != 4 {
		t.Fatalf("first ring of %d members, want all 4", got)
	}
}

// TestSimAllDirect: with AllDirect (the direct scatter), a member that
// some others reach only through a relay takes part as a client: with the
// pair 1–3 relayed, every ring holds all four, members 0 and 2 own the
// segments. With 0–1 and 2–3 relayed nobody reaches everyone, so one
// member (3, the last of the fewest direct links) is left out and 2, who
// then reaches the others, owns everything.
func TestSimAllDirect(t *testing.T) {
	for _, c := range []struct {
		relayed [][2]int
		members []int
		owners  []int
	}{
		{[][2]int{{1, 3}}, []int{0, 1, 2, 3}, []int{0, 2}},
		{[][2]int{{0, 1}, {2, 3}}, []int{0, 1, 2}, []int{2}},
		{nil, []int{0, 1, 2, 3}, nil},
	} {
		s := newSimNet(t, 14)
		s.addN(4, func(c *Config) { c.AllDirect = true })
		setSimLinks(s, natRows(c.relayed...))
		s.runUntil(4000, "4 steps done", func() bool { return len(s.done) >= 4 })
		for _, d := range s.done {
			var members, owners []int
			for _, id := range d.ring.Members {
				members = append(members, slices.Index(s.ids, id))
			}
			for _, r := range d.ring.Owners {
				owners = append(owners, members[r])
			}
			slices.Sort(members)
			slices.Sort(owners)
			if !slices.Equal(members, c.members) || !slices.Equal(owners, c.owners) {
				t.Fatalf("relayed %v: step %d members %v owners %v, want %v and %v", c.relayed, d.step, members, owners, c.members, c.owners)
			}
		}
		for _, id := range s.ids {
			if f := s.nodes[id].m.Status().Failures; f != 0 {
				t.Fatalf("relayed %v: %s reported %d all-reduce failures", c.relayed, id, f)
			}
		}
	}
}

// TestNewRingOwners: with allDirect the ring names as owners the ranks of
// the members whose every link is direct, and they change its id; without
// allDirect, or when every member reaches all, Owners is nil.
func TestNewRingOwners(t *testing.T) {
	ms := []Member{{"a", 5}, {"b", 5}, {"c", 5}, {"d", 5}}
	rows := natRows([2]int{1, 3})
	r := meshNewRing(2, "h", 1, ms, rows, true)
	var owners []PeerID
	for _, o := range r.Owners {
		owners = append(owners, r.Members[o])
	}
	slices.Sort(owners)
	if !slices.Equal(owners, []PeerID{"a", "c"}) || !slices.IsSorted(r.Owners) {
		t.Fatalf("owners %v (ranks %v of %v), want a and c", owners, r.Owners, r.Members)
	}
	plain := meshNewRing(2, "h", 1, ms, rows, false)
	if plain.Owners != nil || plain.ID == r.ID || !slices.Equal(plain.Members, r.Members) {
		t.Fatalf("without allDirect: owners %v, id %s vs %s", plain.Owners, plain.ID, r.ID)
	}
	if all := meshNewRing(2, "h", 1, ms, natRows(), true); all.Owners != nil || all.ID != meshNewRing(2, "h", 1, ms, natRows(), false).ID {
		t.Fatalf("all direct: owners %v", all.Owners)
	}
}
