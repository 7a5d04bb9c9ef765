package mesh

import (
	"cmp"
	"maps"
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

// count is the size of k's side: peers at k plus peers that completed k.
func (l meshLines) count(k meshKey) int {
	n := len(l.at[k])
	for _, ids := range l.succ[k] {
		n += len(ids)
	}
	return n
}

// advance returns the newest model known on k's line (k or its successor
// held by most peers) with its donors and predecessor hash.
func (l meshLines) advance(k meshKey) (meshKey, []PeerID, string) {
	best := ""
	for h, ids := range l.succ[k] {
		if n, bn := len(ids), len(l.succ[k][best]); best == "" || n > bn || (n == bn && h > best) {
			best = h
		}
	}
	if best != "" {
		return meshKey{k.step + 1, best}, slices.Clone(l.succ[k][best]), k.hash
	}
	return k, slices.Clone(l.at[k]), l.prev[k]
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

// checkLineage decides whether this node must fetch a model: a joiner picks
// the largest side; a member fetches when its own line moved on without it,
// and adopts another line whose side is larger than its own.
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
	for _, k := range meshSortedKeys(l.at) {
		if c := l.count(k); bestC == 0 || meshBetter(c, k, bestC, best) {
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
	target, from, prev := l.advance(best)
	if target == mine {
		m.moveTo(m.step, m.hash, m.prevHash)
		return
	}
	m.startFetch(target, from, prev, false)
}

func (m *Mesh) checkMember() {
	l := m.lines()
	mine := meshKey{m.step, m.hash}
	if len(l.succ[mine]) > 0 { // our line completed our step without us
		target, from, prev := l.advance(mine)
		m.startFetch(target, from, prev, false)
		return
	}
	myC := l.count(mine) + 1
	prevKey := meshKey{m.step - 1, m.prevHash}
	var best meshKey
	bestC := 0
	for _, k := range meshSortedKeys(l.at) {
		if k == mine || (m.step > 0 && k == prevKey) || (k.step < m.step && m.line[k.step] == k.hash) {
			continue // this node's own line: peers behind on it, not another side
		}
		if c := l.count(k); bestC == 0 || meshBetter(c, k, bestC, best) {
			best, bestC = k, c
		}
	}
	if bestC == 0 {
		return
	}
	// A node that has not been in a ring or synced since it started —
	// fresh with the run's initial model, or restarted from a checkpoint —
	// takes any side ahead of it, whatever its size. Else three nodes
	// started together beside a running pair were the larger side,
	// trained a fork of their own from step 0, and the pair later adopted
	// it, losing its steps; and nodes restarted from old checkpoints
	// trained again a step their line had long completed (a second ring
	// of step 10 beside the one that made it, 12 steps later).
	fresh := !m.established && best.step > m.step
	if !fresh && !meshBetter(bestC, best, myC, mine) {
		return
	}
	target, from, prev := l.advance(best)
	if target == mine {
		return
	}
	m.startFetch(target, from, prev, true)
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
