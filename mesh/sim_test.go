package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// The simulation: raft's `network` in spirit. Every node's Mesh ticks in
// lock step; messages go through Encode/Decode and a lossy, delaying,
// duplicating, partitionable network; training, the all-reduce and model
// fetches are played by the harness with fixed durations in ticks.

// simGenesis is the θ₀ hash of step 0 shared by fresh nodes.
const simGenesis = "genesis"

type simNode struct {
	id  PeerID
	cfg Config
	m   *Mesh
	up  bool

	trainKey  meshKey // model the scheduled training runs on
	trainAt   uint64
	trainSlow int // extra training ticks

	// stepTicks > 0 plays training as s.inner inner steps of stepTicks
	// each (trainTicks and trainSlow unused): a step that closes while the
	// node trains (Ready.Close) ends at the next inner-step boundary, or at
	// once from the last one with snapshot; ignoreClose never ends early.
	stepTicks   int
	snapshot    bool
	ignoreClose bool
	lie         bool // Ready with s.inner steps at once, every step
	trainStart  uint64
	closeAt     uint64 // tick a Ready.Close of trainKey arrived; 0: none
	trained     uint64 // ticks spent training (stepTicks nodes)

	ring    *Ring
	ringAt  uint64
	decided map[string]bool // ids of the rings it decided: never one twice
	readyAt uint64          // tick of the last SetReady

	fetch     *Fetch
	fetchDone uint64

	ckStep uint64 // disk checkpoint
	ckHash string
	ckHist []Made
	rings  int // rings completed
	syncs  int // models fetched: completions before a sync were discarded
}

type simPkt struct {
	from PeerID
	to   PeerID
	msg  *Message // decoded once from the encoded bytes; Step only reads it
}

// simDone is one completed all-reduce.
type simDone struct {
	step    uint64
	hash    string // θ₀(step)
	ring    Ring
	newHash string
	syncs   map[PeerID]int // each member's sync count when it completed
	agree   uint64         // ticks from the last member's Ready to the last decision
	amnesia int            // simNet.amnesia when it completed
	at      uint64         // tick it completed
}

type simNet struct {
	t   testing.TB
	rng *rand.Rand
	now uint64

	nodes  map[PeerID]*simNode
	ids    []PeerID
	queue  map[uint64][]simPkt // packets by the tick they arrive, in sending order
	queued int

	drop, dup          float64
	minDelay, maxDelay int
	group              map[PeerID]int // partition: messages flow within a group
	partitioned        bool           // a partition happened at some point
	falseDead          int            // live, linked peers declared dead: a partition in effect
	amnesia            int            // ticks that ended with no up node holding a model

	trainTicks, reduceTicks, fetchTicks, failTicks int
	inner                                          int

	done  []simDone
	trace func(string)
	// tamper, if set, replaces every message a node publishes by what it
	// returns (an attacker's messages; every copy reaches every peer, as
	// gossip forwards them).
	tamper func(from PeerID, msg Message) []Message
	// lose, if set, drops the copies of msg from → to for which it says
	// true (a link that loses chosen messages).
	lose func(from, to PeerID, msg *Message) bool
	// byzantine are the tampering nodes: rings of theirs alone (a fork of
	// their own) are not checked.
	byzantine []PeerID
	// equivocations: what each node reported.
	equivocations map[PeerID][]Equivocation
	sentMsgs      [msgTypeEnd]int // messages published, by type
	sentBytes     [msgTypeEnd]int // their encoded bytes
}

func newSimNet(t testing.TB, seed uint64) *simNet {
	return &simNet{
		t: t, rng: rand.New(rand.NewPCG(seed, 7)),
		nodes: map[PeerID]*simNode{}, group: map[PeerID]int{}, queue: map[uint64][]simPkt{},
		minDelay: 1, maxDelay: 1,
		trainTicks: 10, reduceTicks: 4, fetchTicks: 5, failTicks: 25, inner: 50,
	}
}

func simConfig(id PeerID, seed int64) Config {
	return Config{
		ID: id, Addrs: []string{"/ip4/127.0.0.1/tcp/4001/p2p/" + string(id)},
		HeartbeatTicks: 3, DeadTicks: 15, StragglerTicks: 30, ProposeTimeoutTicks: 40,
		SyncTimeoutTicks: 30, Seed: seed, Incarnation: 1, AdmitRate: 0.25,
	}
}

// add starts a node holding (step, hash); hash "" starts it Joining.
func (s *simNet) add(id PeerID, step uint64, hash string, tweak func(*Config)) *simNode {
	cfg := simConfig(id, int64(len(s.nodes)+1))
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := New(cfg, step, hash)
	if err != nil {
		s.t.Fatalf("New(%s): %v", id, err)
	}
	n := &simNode{id: id, cfg: cfg, m: m, up: true, ckStep: step, ckHash: hash}
	s.nodes[id] = n
	if !slices.Contains(s.ids, id) {
		s.ids = append(s.ids, id)
		slices.Sort(s.ids)
	}
	s.flush(n)
	return n
}

func (s *simNet) addN(n int, tweak func(*Config)) {
	for i := range n {
		s.add(simID(i), 0, simGenesis, tweak)
	}
}

func simID(i int) PeerID { return PeerID(fmt.Sprintf("n%02d", i)) }

func (s *simNet) crash(id PeerID) {
	n := s.nodes[id]
	n.up, n.ring, n.fetch = false, nil, nil
	s.logf("%s crashes", id)
}

// restart brings a crashed node back from its disk checkpoint.
func (s *simNet) restart(id PeerID) {
	n := s.nodes[id]
	n.cfg.Incarnation++
	n.cfg.History = n.ckHist
	m, err := New(n.cfg, n.ckStep, n.ckHash)
	if err != nil {
		s.t.Fatal(err)
	}
	n.m, n.up, n.trainKey, n.ring, n.fetch = m, true, meshKey{}, nil, nil
	n.decided = nil // a new process: the rings it ran are forgotten with it
	n.syncs++       // what it completed after its checkpoint is gone
	s.logf("%s restarts at step %d", id, n.ckStep)
	s.flush(n)
}

func (s *simNet) leave(id PeerID) {
	n := s.nodes[id]
	n.m.Leave()
	s.flush(n)
	n.up, n.ring, n.fetch = false, nil, nil
}

func (s *simNet) partition(groups ...[]PeerID) {
	for g, ids := range groups {
		for _, id := range ids {
			s.group[id] = g + 1
		}
	}
	s.partitioned = true
}

func (s *simNet) heal() { clear(s.group) }

func (s *simNet) linked(a, b PeerID) bool { return s.group[a] == s.group[b] }

func (s *simNet) logf(format string, args ...any) {
	if s.trace != nil {
		s.trace(fmt.Sprintf("t=%03d ", s.now) + fmt.Sprintf(format, args...))
	}
}

// run ticks the network n times.
func (s *simNet) run(n int) {
	for range n {
		s.tick()
	}
}

// runUntil ticks until cond holds, failing after limit ticks.
func (s *simNet) runUntil(limit int, what string, cond func() bool) {
	s.t.Helper()
	for range limit {
		if cond() {
			return
		}
		s.tick()
	}
	if !cond() {
		s.t.Fatalf("after %d ticks (now %d): not %s\n%s", limit, s.now, what, s.dump())
	}
}

func (s *simNet) tick() {
	s.now++
	s.deliver()
	for _, id := range s.ids {
		n := s.nodes[id]
		if !n.up {
			continue
		}
		n.m.Tick()
		s.train(n)
		s.finishFetch(n)
		s.flush(n)
	}
	s.reduce()
	if !s.anyModel() {
		s.amnesia++
	}
	s.checkSafety()
}

// anyModel reports whether some up node holds a model. When none does,
// the network has forgotten every step: nodes restarted from their
// checkpoints, and joiners synced from them, train the same steps again.
func (s *simNet) anyModel() bool {
	for _, n := range s.nodes {
		if _, hash := n.m.Model(); n.up && hash != "" {
			return true
		}
	}
	return false
}

func (s *simNet) deliver() {
	due := s.queue[s.now]
	delete(s.queue, s.now)
	s.queued -= len(due)
	for _, p := range due {
		n := s.nodes[p.to]
		if !n.up || !s.linked(p.from, p.to) {
			continue
		}
		if err := n.m.Step(*p.msg); err != nil {
			s.t.Fatalf("%s Step(%v): %v", p.to, p.msg.Type, err)
		}
		s.flush(n)
	}
}

// train plays the inner steps: trainTicks after a node starts training a
// model, it is Ready.
func (s *simNet) train(n *simNode) {
	if n.m.State() != StateTraining {
		return
	}
	step, hash := n.m.Model()
	k := meshKey{step, hash}
	if n.trainKey != k {
		n.trainKey, n.trainAt = k, s.now+uint64(s.trainTicks+n.trainSlow)
		n.trainStart, n.closeAt = s.now, 0
	}
	if n.stepTicks > 0 {
		s.trainSteps(n, step)
		return
	}
	if s.now >= n.trainAt {
		n.m.SetReady(step, s.inner)
		n.readyAt = s.now
	}
}

// trainSteps plays a stepTicks node's phase: Ready after s.inner steps, or
// after a close with the steps it finished.
func (s *simNet) trainSteps(n *simNode, step uint64) {
	n.trained++
	ticks := s.now - n.trainStart
	done := min(int(ticks)/n.stepTicks, s.inner)
	switch {
	case n.lie:
		done = s.inner
	case done == s.inner:
	case n.closeAt == 0 || done == 0:
		return
	case n.snapshot: // at once, the step in flight carried into the next phase
	case ticks%uint64(n.stepTicks) != 0:
		return // at the next boundary
	}
	n.m.SetReady(step, done)
	n.readyAt = s.now
}

// finishFetch plays a checkpoint transfer: it succeeds fetchTicks later if a
// linked, live donor still holds the model.
func (s *simNet) finishFetch(n *simNode) {
	if n.fetch == nil || s.now < n.fetchDone {
		return
	}
	f := n.fetch
	n.fetch = nil
	for _, d := range f.From {
		dn := s.nodes[d]
		if dn == nil || !dn.up || !s.linked(n.id, d) {
			continue
		}
		// A donor serves the θ₀ it holds now; node fetches exactly the
		// model named (step and hash) or fails and says SyncFailed.
		if step, hash := dn.m.Model(); hash == f.Hash && dn.m.State().hasModel() && step == f.Step {
			n.m.Synced(step, hash, dn.m.History())
			n.ckStep, n.ckHash, n.ckHist = step, hash, n.m.History()
			n.syncs++
			s.logf("%s synced step %d", n.id, step)
			return
		}
	}
	s.logf("%s fetch of step %d failed", n.id, f.Step)
	n.m.SyncFailed()
}

func (s *simNet) flush(n *simNode) {
	for n.m.HasReady() {
		rd := n.m.Ready()
		for _, msg := range rd.Messages {
			if s.tamper == nil {
				s.broadcast(n.id, msg)
				continue
			}
			for _, m := range s.tamper(n.id, msg) {
				s.broadcast(n.id, m)
			}
		}
		for _, e := range rd.Equivocations {
			if s.equivocations == nil {
				s.equivocations = map[PeerID][]Equivocation{}
			}
			s.equivocations[n.id] = append(s.equivocations[n.id], e)
		}
		if rd.StateChanged {
			s.logf("%s state %v", n.id, rd.State)
		}
		if c := rd.Close; c != nil && (meshKey{c.Step, c.Hash}) == n.trainKey && !n.ignoreClose {
			n.closeAt = s.now
			s.logf("%s closes step %d", n.id, c.Step)
		}
		if rd.Ring != nil {
			if n.decided[rd.Ring.ID] {
				s.t.Fatalf("%s decided ring %s (step %d round %d) twice", n.id, rd.Ring.ID[:8], rd.Ring.Step, rd.Ring.Round)
			}
			if n.decided == nil {
				n.decided = map[string]bool{}
			}
			n.decided[rd.Ring.ID] = true
			n.ring, n.ringAt = rd.Ring, s.now
			s.logf("%s decides ring %s step %d round %d %v", n.id, rd.Ring.ID[:8], rd.Ring.Step, rd.Ring.Round, rd.Ring.Members)
		}
		for _, f := range []*Fetch{rd.Fetch, rd.Adopt} {
			if f != nil {
				n.fetch, n.fetchDone = f, s.now+uint64(s.fetchTicks)
				s.logf("%s fetch (adopt=%v) step %d from %v", n.id, f == rd.Adopt, f.Step, f.From)
			}
		}
		if len(rd.Dead) > 0 {
			s.logf("%s dead %v", n.id, rd.Dead)
			for _, d := range rd.Dead {
				if o := s.nodes[d]; o != nil && o.up && s.linked(n.id, d) && o.m.State() != StateLeft {
					s.falseDead++
				}
			}
		}
		n.m.Advance(rd)
	}
}

func (s *simNet) broadcast(from PeerID, msg Message) {
	b, err := Encode(msg)
	if err != nil {
		s.t.Fatalf("%s Encode(%v): %v", from, msg.Type, err)
	}
	s.sentMsgs[msg.Type]++
	s.sentBytes[msg.Type] += len(b)
	dec, err := Decode(b)
	if err != nil {
		s.t.Fatalf("decode of %s's message: %v", from, err)
	}
	if msg.Type != MsgHeartbeat {
		s.logf("%s sends %s", from, simFormat(msg))
	}
	for _, to := range s.ids {
		if to == from || !s.linked(from, to) || s.lose != nil && s.lose(from, to, &dec) {
			continue
		}
		copies := 1
		if s.rng.Float64() < s.dup {
			copies = 2
		}
		for range copies {
			if s.rng.Float64() < s.drop {
				continue
			}
			d := s.minDelay + s.rng.IntN(s.maxDelay-s.minDelay+1)
			at := s.now + uint64(d)
			s.queue[at] = append(s.queue[at], simPkt{from: from, to: to, msg: &dec})
			s.queued++
		}
	}
}

func simFormat(m Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v step=%d", m.Type, m.Step)
	switch m.Type {
	case MsgReady:
		fmt.Fprintf(&b, " inner=%d", m.InnerSteps)
	case MsgPropose:
		fmt.Fprintf(&b, " round=%d members=[", m.Round)
		for i, mb := range m.Members {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s:%d", mb.ID, mb.InnerSteps)
		}
		fmt.Fprintf(&b, "] excluded=%v", m.Excluded)
	}
	return b.String()
}

// reduce plays the all-reduce: a ring completes reduceTicks after its last
// member decided it, if every member is up, linked and decided the same ring;
// a member whose ring cannot complete reports failure after failTicks.
func (s *simNet) reduce() {
	for _, id := range s.ids {
		n := s.nodes[id]
		if !n.up || n.ring == nil {
			continue
		}
		ok, last, bad := s.ringState(n)
		switch {
		case ok && s.now >= last+uint64(s.reduceTicks):
			s.complete(*n.ring)
		case !ok && s.now >= n.ringAt+uint64(s.failTicks):
			s.logf("%s all-reduce of ring %s fails on %s", id, n.ring.ID[:8], bad)
			step := n.ring.Step
			n.ring = nil
			n.m.ReportFailure(step, bad)
			s.flush(n)
		}
	}
}

func (s *simNet) ringState(n *simNode) (ok bool, last uint64, bad PeerID) {
	// Blame an unreachable member first (its neighbours see the broken
	// link), else one that runs another ring (the handshake mismatch).
	var other PeerID
	for _, id := range n.ring.Members {
		o := s.nodes[id]
		if o == nil || !o.up || !s.linked(n.id, id) {
			return false, 0, id
		}
		if (o.ring == nil || o.ring.ID != n.ring.ID) && other == "" {
			other = id
		}
		last = max(last, o.ringAt)
	}
	return other == "", last, other
}

func (s *simNet) complete(r Ring) {
	_, hash := s.nodes[r.Members[0]].m.Model()
	sum := sha256.Sum256([]byte(hash + "|" + r.ID))
	newHash := hex.EncodeToString(sum[:8])
	syncs := map[PeerID]int{}
	var lastReady, lastDecide uint64
	for _, id := range r.Members {
		n := s.nodes[id]
		syncs[id] = n.syncs
		lastReady, lastDecide = max(lastReady, n.readyAt), max(lastDecide, n.ringAt)
		if _, h := n.m.Model(); h != hash {
			s.t.Fatalf("ring %s members hold different models: %s %q vs %q", r.ID, id, h, hash)
		}
		n.ring = nil
		n.m.Completed(r.Step, newHash)
		n.ckStep, n.ckHash, n.ckHist = r.Step+1, newHash, n.m.History()
		n.rings++
		s.flush(n)
	}
	s.done = append(s.done, simDone{step: r.Step, hash: hash, ring: r, newHash: newHash, syncs: syncs, at: s.now,
		agree: lastDecide - min(lastDecide, lastReady), amnesia: s.amnesia})
	s.logf("ring %s completes step %d", r.ID[:8], r.Step)
}

// checkSafety: rings completed for the same model θ₀(t) never share a
// member that kept both results; without partitions (real, or in effect: a
// live linked peer declared dead) only one ring completes a step — unless
// in between every up node was without a model (amnesia): nothing live
// remembered the first ring, and restarts from checkpoints redo the step.
func (s *simNet) checkSafety() {
	if len(s.done) < 2 {
		return
	}
	d := s.done[len(s.done)-1]
	for _, o := range s.done[:len(s.done)-1] {
		if o.step != d.step || o.ring.ID == d.ring.ID || s.forked(o.ring) || s.forked(d.ring) {
			continue
		}
		if !s.partitioned && s.falseDead == 0 && o.amnesia == d.amnesia {
			s.t.Fatalf("two rings completed step %d in a connected network: %v and %v", d.step, o.ring.Members, d.ring.Members)
		}
		if o.hash == d.hash {
			for _, id := range d.ring.Members {
				// A member in both, that kept both results (no model
				// fetched in between), would hold two models.
				if o.ring.Rank(id) >= 0 && o.syncs[id] == d.syncs[id] {
					s.t.Fatalf("overlapping rings completed step %d: %v and %v", d.step, o.ring.Members, d.ring.Members)
				}
			}
		}
	}
}

// forked: every member of r is byzantine.
func (s *simNet) forked(r Ring) bool {
	for _, id := range r.Members {
		if !slices.Contains(s.byzantine, id) {
			return false
		}
	}
	return len(s.byzantine) > 0
}

// converged: every up node holds the same model and is a member again.
func (s *simNet) converged() bool {
	var key meshKey
	first := true
	for _, id := range s.ids {
		n := s.nodes[id]
		if !n.up {
			continue
		}
		if st := n.m.State(); st == StateJoining || st == StateSyncing || st == StateExcluded {
			return false
		}
		step, hash := n.m.Model()
		k := meshKey{step, hash}
		if !first && k != key {
			return false
		}
		key, first = k, false
	}
	return !first
}

// minStep is the lowest step held by an up node.
func (s *simNet) minStep() uint64 {
	low := ^uint64(0)
	for _, n := range s.nodes {
		if n.up {
			step, _ := n.m.Model()
			low = min(low, step)
		}
	}
	return low
}

// stepsCompletedBy returns how many rings completed for each step and
// fails if a step between 0 and the last was skipped.
func (s *simNet) checkNoStepLost() {
	s.t.Helper()
	seen := map[uint64]bool{}
	var top uint64
	for _, d := range s.done {
		seen[d.step] = true
		top = max(top, d.step)
	}
	for st := uint64(0); st <= top; st++ {
		if !seen[st] {
			s.t.Fatalf("step %d was never completed (last completed %d)", st, top)
		}
	}
}

func (s *simNet) dump() string {
	var b strings.Builder
	for _, id := range s.ids {
		n := s.nodes[id]
		st := n.m.Status()
		fmt.Fprintf(&b, "  %s up=%v state=%v step=%d hash=%.8s round=%d rings=%d\n", id, n.up, st.State, st.Step, st.Hash, st.Round, n.rings)
	}
	return b.String()
}

// TestSimEquivocation: member d sends, for every round it votes in, two
// different proposals (one without a, one without b). Every honest node
// sees both, reports d once with both member lists, and the others train on
// in rings without d; an honest node's re-broadcast of its vote with a
// grown X is not an equivocation.
func TestSimEquivocation(t *testing.T) {
	s := newSimNet(t, 21)
	s.addN(4, nil)
	d := s.ids[3]
	s.tamper = func(from PeerID, msg Message) []Message {
		if from != d || msg.Type != MsgPropose {
			return []Message{msg}
		}
		out := []Message{msg}
		for _, drop := range s.ids[:2] {
			m := msg
			m.Members = slices.DeleteFunc(slices.Clone(msg.Members), func(mb Member) bool { return mb.ID == drop })
			out = append(out, m)
		}
		return out
	}
	s.runUntil(4000, "4 steps done", func() bool { return len(s.done) >= 4 })
	for _, id := range s.ids[:3] {
		es := s.equivocations[id]
		if len(es) != 1 || es[0].Peer != d || slices.Equal(es[0].First, es[0].Second) {
			t.Fatalf("%s reported %+v, want d once with two member lists", id, es)
		}
	}
	if len(s.equivocations[d]) != 0 {
		t.Fatalf("d reported %v", s.equivocations[d])
	}
	for _, done := range s.done[1:] {
		if slices.Contains(done.ring.Members, d) {
			t.Fatalf("step %d ring %v holds the equivocator", done.step, done.ring.Members)
		}
	}
	// An honest run with drops and duplicates reports nothing.
	h := newSimNet(t, 22)
	h.drop, h.dup, h.maxDelay = 0.05, 0.1, 3
	h.addN(4, nil)
	h.runUntil(6000, "4 steps done", func() bool { return len(h.done) >= 4 })
	if len(h.equivocations) != 0 {
		t.Fatalf("honest nodes reported %v", h.equivocations)
	}
}

// simAccuse makes every vote of the attackers name accuse(attacker) in its
// X (and leave them out of its members), rounds ahead by ahead: a member
// that follows the protocol but lies about who failed.
func (s *simNet) simAccuse(attackers []PeerID, ahead uint32, accuse func(PeerID) []PeerID) {
	s.byzantine = attackers
	s.tamper = func(from PeerID, msg Message) []Message {
		if !slices.Contains(attackers, from) || msg.Type != MsgPropose {
			return []Message{msg}
		}
		x := accuse(from)
		msg.Excluded = slices.Sorted(slices.Values(append(slices.Clone(msg.Excluded), x...)))
		msg.Excluded = slices.Compact(msg.Excluded)
		msg.Members = slices.DeleteFunc(slices.Clone(msg.Members), func(mb Member) bool { return slices.Contains(x, mb.ID) })
		msg.Links = nil
		msg.Round = min(msg.Round+ahead, MaxRound)
		return []Message{msg}
	}
}

// TestSimFalseAccusers: members that name honest peers in the X of every
// vote (under a union of the votes' X, one such member accusing all others
// trained every step alone and the others fetched its model). An accuser
// that names several live peers is excluded alone; one that names a single
// live peer takes it out of the step with itself, so f accusers cost a step
// at most f honest members; the run goes on at full pace.
func TestSimFalseAccusers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		k, f  int
		ahead uint32
		one   bool // each attacker accuses one honest peer (else all)
		// minHonest: honest members of every ring after the first steps
		minHonest int
		// lateHonest: honest members of every ring from step 15 on, once
		// the honest peers the disputes kept out came back as newcomers
		// (admit.go); 0: minHonest
		lateHonest int
		// pace bounds the run's ticks against a clean run's; 0: 1.25
		pace float64
	}{
		{name: "1of4-accuses-all", k: 4, f: 1, minHonest: 3},
		{name: "1of4-accuses-all-rounds-ahead", k: 4, f: 1, ahead: 3, minHonest: 3},
		{name: "1of4-accuses-one-max-round", k: 4, f: 1, ahead: MaxRound, one: true, minHonest: 3},
		{name: "1of4-accuses-all-max-round", k: 4, f: 1, ahead: MaxRound, minHonest: 3},
		{name: "1of4-accuses-one", k: 4, f: 1, one: true, minHonest: 2},
		{name: "3of8-accuse-all", k: 8, f: 3, minHonest: 5},
		// Each accuser takes one honest peer out with itself in every
		// step: rings of the 2 others for 10 steps; then the 6 have made
		// no recent step, come back as newcomers one a step, and the 3
		// honest ones stay (the accusers' word as newcomers costs only
		// themselves): all 5 honest in every ring from step 12 on. The
		// rings wait for the newcomers' fetch each step meanwhile.
		// The lossless simulation is deterministic, and its trajectory
		// moves with the models' hashes (ties between sides are broken by
		// hash): 432 ticks (1.27×) when ring ids did not bind the model's
		// hash, 504 (1.48×) since.
		{name: "3of8-accuse-one-each", k: 8, f: 3, one: true, minHonest: 2, lateHonest: 5, pace: 1.55},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSimNet(t, 31)
			if os.Getenv("SIMTRACE") != "" {
				s.trace = func(l string) { t.Log(l) }
			}
			s.addN(tc.k, nil)
			honest, bad := s.ids[:tc.k-tc.f], s.ids[tc.k-tc.f:]
			s.simAccuse(bad, tc.ahead, func(from PeerID) []PeerID {
				if !tc.one {
					return honest
				}
				return []PeerID{honest[slices.Index(bad, from)]}
			})
			s.runUntil(20000, "honest members at step 20", func() bool {
				for _, id := range honest {
					if st, _ := s.nodes[id].m.Model(); st < 20 {
						return false
					}
				}
				return true
			})
			honestRings := map[uint64]int{}
			for _, d := range s.done {
				if s.forked(d.ring) {
					continue
				}
				n := 0
				for _, id := range d.ring.Members {
					if slices.Contains(honest, id) {
						n++
					}
				}
				want := tc.minHonest
				if d.step >= 15 && tc.lateHonest > 0 {
					want = tc.lateHonest
				}
				if n < want && d.step >= 2 {
					t.Fatalf("step %d ring %v holds %d honest members, want ≥ %d", d.step, d.ring.Members, n, want)
				}
				honestRings[d.step]++
			}
			for st := uint64(0); st < 20; st++ {
				if honestRings[st] != 1 {
					t.Fatalf("step %d: %d rings with honest members, want 1", st, honestRings[st])
				}
			}
			// The pace: a clean run of k members, same seed.
			c := newSimNet(t, 31)
			c.addN(tc.k, nil)
			c.runUntil(20000, "20 steps done", func() bool { return len(c.done) >= 20 })
			pace := tc.pace
			if pace == 0 {
				pace = 1.25
			}
			if float64(s.now) > float64(c.now)*pace {
				t.Fatalf("20 steps took %d ticks, %d without attackers", s.now, c.now)
			}
			t.Logf("20 steps in %d ticks; last ring %v", s.now, s.done[len(s.done)-1].ring.Members)
		})
	}
}

// TestSimNewcomerFlood: 12 peers join a run of 4 at once, once its history
// is MadeWindow steps old. Newcomers are admitted max(1, ⌊¼ · established⌋)
// a step, so the peers that made the run stay the majority of every ring.
// Newcomers that name every member in their votes (a Sybil flood that
// lies) are out of the steps they are not admitted to, and out of the one
// they are admitted to by their own word: the members' rings go on whole.
func TestSimNewcomerFlood(t *testing.T) {
	for _, lie := range []bool{false, true} {
		t.Run(map[bool]string{false: "follow-protocol", true: "accuse-members"}[lie], func(t *testing.T) {
			s := newSimNet(t, 41)
			if os.Getenv("SIMTRACE") != "" {
				s.trace = func(l string) { t.Log(l) }
			}
			s.addN(4, nil)
			members := slices.Clone(s.ids)
			s.runUntil(5000, "step 10", func() bool { return s.minStep() >= 10 })
			var fresh []PeerID
			for i := 4; i < 16; i++ {
				s.add(simID(i), 0, "", nil)
				fresh = append(fresh, simID(i))
			}
			if lie {
				s.simAccuse(fresh, 0, func(PeerID) []PeerID { return members })
			}
			start := len(s.done)
			startTick := s.now
			s.runUntil(20000, "rings after the flood", func() bool {
				if lie {
					return len(s.done) >= start+30
				}
				return len(s.done[len(s.done)-1].ring.Members) == 16
			})
			// Who made each of the line's steps, to tell newcomers.
			made := map[uint64][]PeerID{}
			for _, d := range s.done[:start] {
				made[d.step+1] = d.ring.Members
			}
			steps := 0
			for _, d := range s.done[start:] {
				steps++
				est := map[PeerID]bool{}
				for st := d.step + 1 - MadeWindow; st <= d.step; st++ {
					for _, id := range made[st] {
						est[id] = true
					}
				}
				var e, n int
				for _, id := range d.ring.Members {
					if est[id] {
						e++
					} else {
						n++
					}
				}
				if quota := max(1, e/4); n > quota {
					t.Fatalf("step %d ring %v admits %d newcomers beside %d established, quota %d", d.step, d.ring.Members, n, e, quota)
				}
				for _, id := range members {
					if !slices.Contains(d.ring.Members, id) {
						t.Fatalf("step %d ring %v lacks member %s", d.step, d.ring.Members, id)
					}
				}
				made[d.step+1] = d.ring.Members
			}
			// The pace: the same steps without newcomers, same seed.
			c := newSimNet(t, 41)
			c.addN(4, nil)
			c.runUntil(5000, "step 10", func() bool { return c.minStep() >= 10 })
			cStart, cTick := len(c.done), c.now
			c.runUntil(20000, "as many steps", func() bool { return len(c.done) >= cStart+steps })
			t.Logf("%d steps after the flood in %d ticks (%d without it); last ring %v",
				steps, s.now-startTick, c.now-cTick, s.done[len(s.done)-1].ring.Members)
			// Each step waits for the first newcomer's fetch of the model it
			// missed (5 of a step's 17 ticks here): a flood that lies costs
			// 1.42× in this simulation; in the node, one model download a
			// step, while the flood lasts.
			if lie && float64(s.now-startTick) > 1.5*float64(c.now-cTick) {
				t.Fatalf("the lying flood slowed the run: %d ticks against %d", s.now-startTick, c.now-cTick)
			}
		})
	}
}

// TestSimFreshNodesJoinRunningPair: three nodes started fresh (the run's
// initial model, step 0) beside a pair that trained 6 steps fetch the
// pair's model and join its rings. Before, the three were the larger side:
// they trained a fork of their own from step 0, and the pair then adopted
// it, losing its steps.
func TestSimFreshNodesJoinRunningPair(t *testing.T) {
	s := newSimNet(t, 51)
	s.addN(2, nil)
	s.runUntil(5000, "step 6", func() bool { return s.minStep() >= 6 })
	for i := 2; i < 5; i++ {
		s.add(simID(i), 0, simGenesis, nil)
	}
	s.runUntil(5000, "a ring of all five", func() bool {
		for _, id := range s.ids[:2] {
			st, _ := s.nodes[id].m.Model()
			if st < 6 {
				t.Fatalf("founder %s went back to step %d", id, st)
			}
		}
		return len(s.done[len(s.done)-1].ring.Members) == 5
	})
	for _, d := range s.done {
		if d.step < 6 && len(d.ring.Members) > 2 {
			t.Fatalf("a ring of the fresh nodes completed step %d: %v", d.step, d.ring.Members)
		}
	}
	t.Logf("all five in the ring of step %d", s.done[len(s.done)-1].step)
}

// TestSimRestartFromOldCheckpoints: three of five members crash at step 3
// and come back from their step-3 checkpoints while the other two are at
// step 12. The three take the two's line (they have not been in a ring or
// synced since they started); before, they were the larger side, trained
// step 3 again beside the ring that made it, and the two adopted their
// model, losing 9 steps.
func TestSimRestartFromOldCheckpoints(t *testing.T) {
	s := newSimNet(t, 61)
	s.addN(5, nil)
	s.runUntil(5000, "step 3", func() bool { return s.minStep() >= 3 })
	for _, id := range s.ids[2:] {
		s.crash(id)
	}
	s.runUntil(5000, "step 12", func() bool {
		st, _ := s.nodes[s.ids[0]].m.Model()
		return st >= 12
	})
	for _, id := range s.ids[2:] {
		s.restart(id)
	}
	s.runUntil(5000, "all five in a ring", func() bool {
		for _, id := range s.ids[:2] {
			if st, _ := s.nodes[id].m.Model(); st < 12 {
				t.Fatalf("%s went back to step %d", id, st)
			}
		}
		return len(s.done[len(s.done)-1].ring.Members) == 5
	})
	s.checkNoStepLost()
	t.Logf("all five in the ring of step %d", s.done[len(s.done)-1].step)
}

// TestSimSybilSide: 4 members train past MadeWindow; then 6 identities
// appear holding a fork of their own (any weights in the right format:
// here a model no member made) and serve it when fetched. They are real
// meshes, established, training the fork in rings of their own. Variants:
// the fork two steps ahead, at the members' step with another hash, and
// one step ahead claiming the members' model as its predecessor (a
// successor of their line). Counted by heads, the 6 were the larger side
// and every member adopted (or fetched) the fork: the run was hijacked.
// Now a member weighs sides first by the peers it knows (made models of
// its line with it): the members never take the fork and keep training
// their own line at their pace.
func TestSimSybilSide(t *testing.T) {
	const honestN, sybilN, after = 4, 6, 12
	for _, tc := range []struct {
		name  string
		ahead uint64 // the fork's step beyond the members'
		succ  bool   // claim the members' model as the fork's predecessor
	}{
		{name: "two-ahead", ahead: 2},
		{name: "same-step", ahead: 0},
		{name: "successor", ahead: 1, succ: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSimNet(t, 71)
			if os.Getenv("SIMTRACE") != "" {
				s.trace = func(l string) { t.Log(l) }
			}
			s.addN(honestN, nil)
			honest := slices.Clone(s.ids)
			s.runUntil(5000, "step 10", func() bool { return s.minStep() >= 10 })
			// Wait for all members to train the same model.
			s.runUntil(500, "members training", func() bool {
				return s.converged() && s.nodes[honest[0]].m.State() == StateTraining
			})
			at, hash := s.nodes[honest[0]].m.Model()
			start, startTick := len(s.done), s.now
			fork := meshKey{at + tc.ahead, "sybil-fork"}
			var sybils []PeerID
			for i := range sybilN {
				sybils = append(sybils, PeerID(fmt.Sprintf("s%02d", i)))
			}
			s.byzantine = sybils
			if tc.succ {
				s.tamper = func(from PeerID, msg Message) []Message {
					if slices.Contains(sybils, from) && msg.Step == fork.step && msg.Hash == fork.hash {
						msg.PrevHash = hash
					}
					return []Message{msg}
				}
			}
			for _, id := range sybils {
				n := s.add(id, fork.step, fork.hash, nil)
				n.m.established = true // as if it had made rings: it holds its side
			}
			s.runUntil(20000, fmt.Sprintf("members at step %d", at+after), func() bool {
				for _, id := range honest {
					n := s.nodes[id]
					if n.syncs > 0 || n.m.Status().Adoptions > 0 {
						t.Fatalf("member %s took the Sybils' model (syncs %d, adoptions %d) at t=%d\n%s",
							id, n.syncs, n.m.Status().Adoptions, s.now, s.dump())
					}
				}
				return s.minStepOf(honest) >= at+after
			})
			// The members' rings made their own line, one ring a step,
			// without a Sybil; the Sybils' rings are theirs alone.
			prev := hash
			for _, d := range s.done[start:] {
				if s.forked(d.ring) {
					continue
				}
				if d.hash != prev || !slices.Equal(d.ring.Members, honest) {
					t.Fatalf("step %d: ring %v on %.8s, want the members on %.8s", d.step, d.ring.Members, d.hash, prev)
				}
				prev = d.newHash
			}
			// The pace: the same steps without the Sybils, same seed.
			c := newSimNet(t, 71)
			c.addN(honestN, nil)
			c.runUntil(5000, "step 10", func() bool { return c.minStep() >= 10 })
			c.runUntil(500, "members training", func() bool {
				return c.converged() && c.nodes[honest[0]].m.State() == StateTraining
			})
			cTick := c.now
			c.runUntil(20000, "as many steps", func() bool { return c.minStep() >= at+after })
			t.Logf("%d steps with %d Sybils in %d ticks (%d without them)", after, sybilN, s.now-startTick, c.now-cTick)
			if float64(s.now-startTick) > 1.25*float64(c.now-cTick) {
				t.Fatalf("the Sybils slowed the members: %d ticks against %d", s.now-startTick, c.now-cTick)
			}
		})
	}
}

// minStepOf is the lowest step held by the up nodes of ids.
func (s *simNet) minStepOf(ids []PeerID) uint64 {
	low := ^uint64(0)
	for _, id := range ids {
		if n := s.nodes[id]; n.up {
			step, _ := n.m.Model()
			low = min(low, step)
		}
	}
	return low
}
