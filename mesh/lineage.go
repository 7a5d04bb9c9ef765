package mesh

import (
	"cmp"
	"maps"
	"math"
	"slices"
)

// A lineage key names a model: θ₀ of step with hash. Peers report their key
// and its predecessor's hash (PrevHash), so a node can tell a peer one step
// ahead on its own line (it was left out of a ring, or is slow) from a peer
// on another line (a partition that went its own way).
type meshKey struct {
	step uint64
	hash string
}

// meshLines groups the live model-holding peers by key, and by the key
// they succeeded.
type meshLines struct {
	at   map[meshKey][]PeerID
	prev map[meshKey]string              // a predecessor hash reported by peers at the key
	succ map[meshKey]map[string][]PeerID // predecessor key → successor hash → peers
}

func (m *Mesh) lines() meshLines {
	l := meshLines{at: make(map[meshKey][]PeerID), prev: make(map[meshKey]string), succ: make(map[meshKey]map[string][]PeerID)}
	for _, id := range slices.Sorted(maps.Keys(m.peers)) {
		p := m.peers[id]
		if p.dead || !p.state.hasModel() || p.hash == "" {
			continue
		}
		k := meshKey{p.step, p.hash}
		l.at[k] = append(l.at[k], id)
		if p.prevHash != "" {
			l.prev[k] = p.prevHash
		}
		if p.prevHash != "" && p.step > 0 {
			pk := meshKey{p.step - 1, p.prevHash}
			if l.succ[pk] == nil {
				l.succ[pk] = make(map[string][]PeerID)
			}
			l.succ[pk][p.hash] = append(l.succ[pk][p.hash], id)
		}
	}
	return l
}

// side returns the peers of k's side: at k, and those that completed k.
func (l meshLines) side(k meshKey) []PeerID {
	ids := slices.Clone(l.at[k])
	for _, h := range slices.Sorted(maps.Keys(l.succ[k])) {
		ids = append(ids, l.succ[k][h]...)
	}
	return ids
}

// advance returns the newest model known on k's line (k, or its successor
// held by most known peers, then most peers, then the larger hash) with its
// donors, predecessor hash, and how many of the donors known reports.
func (l meshLines) advance(k meshKey, known func(PeerID) bool) (meshKey, []PeerID, string, int) {
	kcount := func(ids []PeerID) int {
		c := 0
		for _, id := range ids {
			if known != nil && known(id) {
				c++
			}
		}
		return c
	}
	best, bestK := "", 0
	for h, ids := range l.succ[k] {
		kn, bn := kcount(ids), len(l.succ[k][best])
		if best == "" || kn > bestK || kn == bestK && (len(ids) > bn || len(ids) == bn && h > best) {
			best, bestK = h, kn
		}
	}
	if best != "" {
		return meshKey{k.step + 1, best}, slices.Clone(l.succ[k][best]), k.hash, bestK
	}
	return k, slices.Clone(l.at[k]), l.prev[k], kcount(l.at[k])
}

// meshBetter orders sides: more members, then later step, then larger hash.
func meshBetter(c1 int, k1 meshKey, c2 int, k2 meshKey) bool {
	if c := cmp.Compare(c1, c2); c != 0 {
		return c > 0
	}
	if k1.step != k2.step {
		return k1.step > k2.step
	}
	return k1.hash > k2.hash
}

// meshSide is a side as a member weighs it: its key, its peers, and how
// many of them the member knows (Mesh.knows).
type meshSide struct {
	key      meshKey
	n, known int
}

// better orders sides for a member: more known peers, then meshBetter.
// Identities are free: a side of peers this node never made a model with
// (a fork served by made-up peers) must not outweigh its own line by
// numbers alone (TestSimSybilSide).
func (a meshSide) better(b meshSide) bool {
	if a.known != b.known {
		return a.known > b.known
	}
	return meshBetter(a.n, a.key, b.n, b.key)
}

// checkLineage decides whether this node must fetch a model: a joiner picks
// the largest side; a member fetches when its own line moved on without it
// (as known peers, or only strangers, tell), and adopts another line whose
// side is larger than its own: more known peers, then more peers.
func (m *Mesh) checkLineage() {
	switch m.state {
	case StateSyncing:
		if !m.syncFailed && m.tick-m.fetchAt < uint64(m.cfg.SyncTimeoutTicks) {
			return
		}
		m.fetch, m.syncFailed = nil, false
		m.setState(StateJoining)
		m.chooseFetch()
	case StateJoining:
		m.chooseFetch()
	case StateTraining, StateReady, StateAgreeing, StateExcluded:
		m.checkMember()
	}
}

func (m *Mesh) chooseFetch() {
	l := m.lines()
	var best meshKey
	bestC := 0
	keys := meshSortedKeys(l.at)
	if n := len(keys); n > 0 && (keys[n-1].step > 0 || m.step > 0 && m.hash != "" || m.cfg.PastInitial) {
		// Peers at step 0 hold the run's initial model, where every line
		// starts: they made no step and are no side to follow while anybody
		// — this node included — holds a later model. Counted by heads, a
		// storm of new nodes made a member whose fetch had failed fetch the
		// initial model back, and one whose donors had all gone too. A node
		// past step 0 before it started (Config.PastInitial) waits for a
		// later model.
		keys = slices.DeleteFunc(keys, func(k meshKey) bool { return k.step == 0 })
	}
	if m.hash != "" {
		// Peers behind on this node's own line (restarted from older
		// checkpoints) are no side to fetch: they catch up from it. Counted
		// by heads, three restarted at step 160 drew two members whose
		// adoption had failed back from their own 161 (soak seed 1).
		keys = slices.DeleteFunc(keys, func(k meshKey) bool { return k.step < m.step && m.line[k.step] == k.hash })
	}
	for _, k := range keys {
		if c := len(l.side(k)); bestC == 0 || meshBetter(c, k, bestC, best) {
			best, bestC = k, c
		}
	}
	mine := meshKey{m.step, m.hash}
	if bestC == 0 {
		if m.hash != "" { // nobody else holds a model: go on with ours
			m.moveTo(m.step, m.hash, m.prevHash)
		}
		return
	}
	target, from, prev, _ := l.advance(best, nil)
	if target == mine {
		m.moveTo(m.step, m.hash, m.prevHash)
		return
	}
	m.startFetch(target, from, prev, false)
}

func (m *Mesh) checkMember() {
	l := m.lines()
	mine := meshKey{m.step, m.hash}
	ownIDs := l.side(mine)
	ownKnown, _ := m.countKnown(ownIDs, math.MaxUint64)
	// A member with no known peer on its side (alone, or apart from its
	// peers for more than KnownWindow steps) weighs sides by heads as
	// before: it risks only itself, and must rejoin the others. So does a
	// node not established since it started (fresh, or restarted from a
	// checkpoint): like a joiner, it follows the largest side, not the
	// peers its checkpoint's history names (restarted with it from old
	// checkpoints, they rolled the run back 14 steps: seed 9977).
	alone := ownKnown == 0 || !m.established
	if len(l.succ[mine]) > 0 { // our line completed our step without us
		// Unless only strangers claim to have: a successor claimed by
		// peers this node does not know, while known ones still hold its
		// step, is a fork like any other (weighed below).
		if target, from, prev, tk := l.advance(mine, m.knows); tk > 0 || alone {
			m.startFetch(target, from, prev, false)
			return
		}
	}
	best, bestLast := m.bestOtherSide(l, alone)
	if best.n == 0 {
		return
	}
	// This node's side counts the known peers the other side's nodes
	// can know too: those this node knew by the last step it made with
	// one of the other side's peers. Peers that joined this side while
	// the two were apart are strangers to the other; counted here they
	// made each half of a healed partition the larger in its own eyes,
	// and neither adopted (TestSimPartitionHealWithJoiners).
	if best.known > 0 {
		ownKnown, _ = m.countKnown(ownIDs, bestLast)
	}
	own := meshSide{mine, len(ownIDs) + 1, ownKnown + 1}
	// A node that has not been in a ring or synced since it started —
	// fresh with the run's initial model, or restarted from a checkpoint —
	// takes any side ahead of it, whatever its size. Else three nodes
	// started together beside a running pair were the larger side,
	// trained a fork of their own from step 0, and the pair later adopted
	// it, losing its steps; and nodes restarted from old checkpoints
	// trained again a step their line had long completed (a second ring
	// of step 10 beside the one that made it, 12 steps later).
	fresh := !m.established && best.key.step > m.step
	if !fresh && !best.better(own) && !(alone && meshBetter(best.n, best.key, own.n, own.key)) {
		return
	}
	target, from, prev, _ := l.advance(best.key, m.knows)
	if target == mine {
		return
	}
	m.startFetch(target, from, prev, true)
}

// bestOtherSide returns the best side (by meshSide.better; by heads when
// alone) of the lines that are not this node's own, and the last step it
// made with one of that side's known peers; best.n is 0 when there is none.
func (m *Mesh) bestOtherSide(l meshLines, alone bool) (best meshSide, bestLast uint64) {
	mine, prevKey := meshKey{m.step, m.hash}, meshKey{m.step - 1, m.prevHash}
	for _, k := range meshSortedKeys(l.at) {
		if k == mine || (m.step > 0 && k == prevKey) || (k.step < m.step && m.line[k.step] == k.hash) {
			continue // this node's own line: peers behind on it, not another side
		}
		if k.step == 0 && m.step > 0 {
			// The run's initial model is where every line starts, not a
			// side: a storm of new nodes holding it outnumbered a member
			// left alone by the storm's leavers, which adopted step 0 and
			// dropped its 64 steps (soak seed 1).
			continue
		}
		ids := l.side(k)
		kn, last := m.countKnown(ids, math.MaxUint64)
		if alone {
			kn = 0 // by heads
		}
		if s := (meshSide{k, len(ids), kn}); best.n == 0 || s.better(best) {
			best, bestLast = s, last
		}
	}
	return best, bestLast
}

func meshSortedKeys(at map[meshKey][]PeerID) []meshKey {
	keys := slices.Collect(maps.Keys(at))
	slices.SortFunc(keys, func(a, b meshKey) int {
		if c := cmp.Compare(a.step, b.step); c != 0 {
			return c
		}
		return cmp.Compare(a.hash, b.hash)
	})
	return keys
}

// startFetch asks node to fetch target from the donors (shuffled by the
// seeded RNG so that joiners spread their load).
func (m *Mesh) startFetch(target meshKey, from []PeerID, prev string, adopt bool) {
	m.rng.Shuffle(len(from), func(i, j int) { from[i], from[j] = from[j], from[i] })
	f := &Fetch{Step: target.step, Hash: target.hash, PrevHash: prev, From: from}
	m.fetch, m.fetchAt = f, m.tick
	if adopt {
		m.out.Adopt, m.out.Fetch = f, nil
		m.adoptions++
	} else {
		m.out.Fetch, m.out.Adopt = f, nil
	}
	m.ring = nil
	m.setState(StateSyncing)
	m.heartbeat()
}
