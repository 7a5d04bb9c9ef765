package mesh

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	c := Config{ID: "a"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatTicks != DefaultHeartbeatTicks || c.DeadTicks != DefaultDeadTicks || c.MinMembers != 1 ||
		c.StragglerTicks != DefaultStragglerTicks || c.ProposeTimeoutTicks != DefaultProposeTimeoutTicks || c.SyncTimeoutTicks != DefaultSyncTimeoutTicks {
		t.Fatalf("defaults not filled: %+v", c)
	}
	bad := []Config{
		{},
		{ID: PeerID(strings.Repeat("x", MaxPeerIDLen+1))},
		{ID: "a", HeartbeatTicks: -1},
		{ID: "a", HeartbeatTicks: 10, DeadTicks: 20},
		{ID: "a", MinMembers: MaxMembers + 1},
		{ID: "a", Addrs: make([]string, MaxAddrs+1)},
		{ID: "a", Addrs: []string{strings.Repeat("x", MaxAddrLen+1)}},
		{ID: "a", AdmitRate: -0.1},
		{ID: "a", AdmitRate: 1.5},
	}
	for i, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("config %d: err %v, want ErrConfig", i, err)
		}
	}
	if _, err := New(Config{ID: "a"}, 0, strings.Repeat("h", MaxHashLen+1)); !errors.Is(err, ErrConfig) {
		t.Errorf("over-long model hash accepted: %v", err)
	}
}

func TestRingRankAndID(t *testing.T) {
	ms := []Member{{"a", 10}, {"c", 5}, {"d", 7}}
	r := meshNewRing(3, "h", 1, ms, nil, false)
	for i, id := range []PeerID{"a", "c", "d"} {
		if r.Rank(id) != i {
			t.Errorf("Rank(%s) = %d, want %d", id, r.Rank(id), i)
		}
	}
	if r.Rank("b") != -1 || r.Rank("z") != -1 {
		t.Error("non-member has a rank")
	}
	if !slices.Equal(r.Weights, []float32{10, 5, 7}) {
		t.Errorf("weights %v", r.Weights)
	}
	// The id binds step, the model's hash, round, members and weights.
	variants := []Ring{
		meshNewRing(4, "h", 1, ms, nil, false),
		meshNewRing(3, "h'", 1, ms, nil, false),
		meshNewRing(3, "h", 2, ms, nil, false),
		meshNewRing(3, "h", 1, ms[:2], nil, false),
		meshNewRing(3, "h", 1, []Member{{"a", 10}, {"c", 5}, {"d", 8}}, nil, false),
	}
	for i, v := range variants {
		if v.ID == r.ID {
			t.Errorf("variant %d has the same ring id", i)
		}
	}
	if again := meshNewRing(3, "h", 1, ms, nil, false); again.ID != r.ID || len(r.ID) != 32 {
		t.Errorf("ring id not deterministic or not 32 hex digits: %q %q", r.ID, again.ID)
	}
}

// drain returns all Ready output until none is left.
func drain(m *Mesh) []Ready {
	var out []Ready
	for m.HasReady() {
		rd := m.Ready()
		out = append(out, rd)
		m.Advance(rd)
	}
	return out
}

func TestReadyAdvance(t *testing.T) {
	m, err := New(Config{ID: "a", HeartbeatTicks: 2, DeadTicks: 5}, 0, "h0")
	if err != nil {
		t.Fatal(err)
	}
	rds := drain(m)
	if len(rds) != 1 || !rds[0].StateChanged || rds[0].State != StateTraining || len(rds[0].Messages) != 1 || rds[0].Messages[0].Type != MsgHeartbeat {
		t.Fatalf("first Ready: %+v", rds)
	}
	if m.HasReady() {
		t.Fatal("HasReady after Advance")
	}
	// Output produced between Ready and Advance is kept.
	m.SetReady(0, 5)
	rd := m.Ready()
	m.Tick()
	m.Tick()
	m.Advance(rd)
	if !m.HasReady() {
		t.Fatal("output produced after Ready was dropped by Advance")
	}
	// Alone, with MinMembers 1, it decides a ring of itself at once.
	ring := rd.Ring
	for _, rd := range drain(m) {
		if rd.Ring != nil {
			ring = rd.Ring
		}
	}
	if ring == nil || !slices.Equal(ring.Members, []PeerID{"a"}) || ring.Weights[0] != 5 || m.State() != StateReducing {
		t.Fatalf("lone node ring %+v state %v", ring, m.State())
	}
	m.Completed(0, "h1")
	if step, hash := m.Model(); step != 1 || hash != "h1" || m.State() != StateTraining {
		t.Fatalf("after Completed: %d %q %v", step, hash, m.State())
	}
}

// TestStaleCallsIgnored: calls about another step or in the wrong state do
// nothing.
func TestStaleCallsIgnored(t *testing.T) {
	m, _ := New(Config{ID: "a"}, 4, "h4")
	drain(m)
	m.SetReady(3, 10)
	m.Completed(4, "h5")
	m.ReportFailure(4, "b")
	if m.HasReady() || m.State() != StateTraining {
		t.Fatalf("stale calls changed state: %v %+v", m.State(), m.Ready())
	}
	if st := m.Status(); st.Step != 4 || st.Hash != "h4" || st.Failures != 0 {
		t.Fatalf("status %+v", st)
	}
	m.Leave()
	rds := drain(m)
	if len(rds) != 1 || rds[0].State != StateLeft || rds[0].Messages[0].Type != MsgLeave {
		t.Fatalf("leave: %+v", rds)
	}
	m.Tick()
	_ = m.Step(Message{Type: MsgHeartbeat, From: "b", State: StateTraining})
	if m.HasReady() {
		t.Fatal("a node that left still produces output")
	}
}

// TestMinMembersWaits: a fresh node does not vote before MinMembers are
// Ready, even after the straggler timeout.
func TestMinMembersWaits(t *testing.T) {
	m, _ := New(Config{ID: "a", MinMembers: 2, StragglerTicks: 3}, 0, "h0")
	m.SetReady(0, 1)
	for range 20 {
		m.Tick()
	}
	for _, rd := range drain(m) {
		for _, msg := range rd.Messages {
			if msg.Type == MsgPropose {
				t.Fatal("voted alone below MinMembers")
			}
		}
	}
	if err := m.Step(Message{Type: MsgReady, From: "b", Step: 0, Hash: "h0", InnerSteps: 3}); err != nil {
		t.Fatal(err)
	}
	var vote *Message
	for _, rd := range drain(m) {
		for i, msg := range rd.Messages {
			if msg.Type == MsgPropose {
				vote = &rd.Messages[i]
			}
		}
	}
	if vote == nil || !slices.Equal(vote.Members, []Member{{"a", 1}, {"b", 3}}) {
		t.Fatalf("vote %+v", vote)
	}
}

// TestJoinerFetchesLargestSide: a node without a model asks for the newest
// model of the largest side it hears of.
func TestJoinerFetchesLargestSide(t *testing.T) {
	m, _ := New(Config{ID: "j", HeartbeatTicks: 2, DeadTicks: 5}, 0, "")
	if m.State() != StateJoining {
		t.Fatalf("state %v", m.State())
	}
	hb := func(from PeerID, st State, step uint64, hash, prev string) {
		if err := m.Step(Message{Type: MsgHeartbeat, From: from, State: st, Step: step, Hash: hash, PrevHash: prev}); err != nil {
			t.Fatal(err)
		}
	}
	hb("a", StateTraining, 7, "x7", "x6") // a lone side ahead
	hb("b", StateReducing, 5, "y5", "y4") // the big side, mid step 5 …
	hb("c", StateReducing, 5, "y5", "y4") //
	hb("d", StateTraining, 6, "y6", "y5") // … one member already at 6
	hb("e", StateJoining, 0, "", "")      // another joiner: not a side
	m.Tick()
	m.Tick()
	var f *Fetch
	for _, rd := range drain(m) {
		if rd.Adopt != nil {
			t.Fatal("a joiner adopts")
		}
		if rd.Fetch != nil {
			f = rd.Fetch
		}
	}
	if f == nil || f.Step != 6 || f.Hash != "y6" || f.PrevHash != "y5" || !slices.Equal(f.From, []PeerID{"d"}) {
		t.Fatalf("fetch %+v", f)
	}
	m.Synced(6, "y6", nil)
	if st := m.Status(); st.State != StateTraining || st.Step != 6 || st.PrevHash != "y5" {
		t.Fatalf("after Synced: %+v", st)
	}
}

// TestAdoptTieBreak: two sides of one member each at the same step: the one
// with the smaller hash adopts, the other does not.
func TestAdoptTieBreak(t *testing.T) {
	for _, c := range []struct {
		mine, theirs string
		adopt        bool
	}{{"a1", "b1", true}, {"b1", "a1", false}} {
		m, _ := New(Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 5}, 3, c.mine)
		drain(m)
		if err := m.Step(Message{Type: MsgHeartbeat, From: "other", State: StateTraining, Step: 3, Hash: c.theirs}); err != nil {
			t.Fatal(err)
		}
		m.Tick()
		m.Tick()
		adopted := false
		for _, rd := range drain(m) {
			adopted = adopted || rd.Adopt != nil
		}
		if adopted != c.adopt {
			t.Errorf("mine %s theirs %s: adopted %v", c.mine, c.theirs, adopted)
		}
	}
}

// TestSyncFailedChoosesAgain: after SyncFailed the mesh asks for a fetch
// again at the next tick, with what it knows now.
func TestSyncFailedChoosesAgain(t *testing.T) {
	m, _ := New(Config{ID: "j", HeartbeatTicks: 2, DeadTicks: 5, SyncTimeoutTicks: 1000}, 0, "")
	hb := func(step uint64, hash, prev string) {
		if err := m.Step(Message{Type: MsgHeartbeat, From: "a", State: StateTraining, Step: step, Hash: hash, PrevHash: prev}); err != nil {
			t.Fatal(err)
		}
	}
	fetches := func() (out []*Fetch) {
		for _, rd := range drain(m) {
			if rd.Fetch != nil {
				out = append(out, rd.Fetch)
			}
		}
		return out
	}
	hb(3, "x3", "x2")
	m.Tick()
	m.Tick()
	if f := fetches(); len(f) != 1 || f[0].Step != 3 {
		t.Fatalf("first fetch %+v", f)
	}
	hb(4, "x4", "x3") // the donor moved on; the fetch of step 3 fails
	m.SyncFailed()
	m.Tick()
	if f := fetches(); len(f) != 1 || f[0].Step != 4 || f[0].Hash != "x4" {
		t.Fatalf("fetch after SyncFailed %+v", f)
	}
	m.SyncFailed()
	m.Synced(4, "x4", nil)
	m.Tick()
	if f := fetches(); len(f) != 0 || m.State() != StateTraining {
		t.Fatalf("after Synced: %v, fetches %+v", m.State(), f)
	}
}

// TestFailedFetchIgnoresInitialModelHolders: a member whose fetch of its
// line's next step failed chooses again like a joiner, by heads; a storm of
// new nodes holding the run's initial model (step 0) outnumbers the line's
// holders, but the initial model is every line's start, not a side: the
// member must fetch the line's step again, not step 0 (the soak saw a
// member drop its step-3 model for the initial one).
func TestFailedFetchIgnoresInitialModelHolders(t *testing.T) {
	m, _ := New(Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 5, SyncTimeoutTicks: 1000}, 3, "x3")
	hb := func(from PeerID, step uint64, hash, prev string) {
		if err := m.Step(Message{Type: MsgHeartbeat, From: from, State: StateTraining, Step: step, Hash: hash, PrevHash: prev}); err != nil {
			t.Fatal(err)
		}
	}
	fetches := func() (out []*Fetch) {
		for _, rd := range drain(m) {
			if rd.Fetch != nil {
				out = append(out, rd.Fetch)
			}
			if rd.Adopt != nil {
				out = append(out, rd.Adopt)
			}
		}
		return out
	}
	drain(m)
	hb("a", 4, "x4", "x3") // the line moved on without this member
	m.Tick()
	m.Tick()
	if f := fetches(); len(f) != 1 || f[0].Step != 4 {
		t.Fatalf("first fetch %+v, want step 4", f)
	}
	for _, j := range []PeerID{"j1", "j2", "j3", "j4", "j5"} {
		hb(j, 0, "genesis", "")
	}
	m.SyncFailed()
	m.Tick()
	if f := fetches(); len(f) != 1 || f[0].Step != 4 || f[0].Hash != "x4" {
		t.Fatalf("fetch after SyncFailed %+v, want step 4 again", f)
	}
}

func TestSetStragglerTicks(t *testing.T) {
	m, err := New(Config{ID: "a"}, 0, "h")
	if err != nil {
		t.Fatal(err)
	}
	m.SetStragglerTicks(0)
	if m.cfg.StragglerTicks != DefaultStragglerTicks {
		t.Fatalf("0 accepted: %d", m.cfg.StragglerTicks)
	}
	m.SetStragglerTicks(250)
	if m.cfg.StragglerTicks != 250 {
		t.Fatalf("StragglerTicks = %d, want 250", m.cfg.StragglerTicks)
	}
}

// TestFailedAdoptVotesAbove: a member that voted, was asked to adopt a
// larger side, failed the fetch and came back to the model it held votes
// again only in a later round. Its peers still hold its first vote; a
// different vote in the same round was an equivocation, and they excluded
// it from every later step (simRandomRun seeds 5109 and 5257).
func TestFailedAdoptVotesAbove(t *testing.T) {
	m, _ := New(Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 50, SyncTimeoutTicks: 1000}, 3, "h")
	step := func(msg Message) {
		if err := m.Step(msg); err != nil {
			t.Fatal(err)
		}
	}
	votes := func() (out []Message) {
		for _, rd := range drain(m) {
			for _, msg := range rd.Messages {
				if msg.Type == MsgPropose {
					out = append(out, msg)
				}
			}
		}
		return out
	}
	step(Message{Type: MsgHeartbeat, From: "b", State: StateReady, Step: 3, Hash: "h", PrevHash: "h2", InnerSteps: 50})
	m.SetReady(3, 50)
	first := votes()
	if len(first) == 0 || m.State() != StateAgreeing {
		t.Fatalf("no vote: %v", m.State())
	}
	for _, id := range []PeerID{"x", "y", "z"} { // a larger side on another line
		step(Message{Type: MsgHeartbeat, From: id, State: StateTraining, Step: 3, Hash: "g", PrevHash: "g2"})
	}
	for range 3 {
		m.Tick()
	}
	if m.State() != StateSyncing {
		t.Fatalf("no adoption: %v", m.State())
	}
	for _, id := range []PeerID{"x", "y", "z"} { // gone: the fetch fails
		step(Message{Type: MsgLeave, From: id, State: StateLeft, Step: 3, Hash: "g"})
	}
	step(Message{Type: MsgHeartbeat, From: "c", State: StateReady, Step: 3, Hash: "h", PrevHash: "h2", InnerSteps: 50})
	m.SyncFailed()
	m.Tick()
	if st := m.Status(); st.State != StateTraining || st.Step != 3 || st.Hash != "h" {
		t.Fatalf("not back at its model: %+v", st)
	}
	votes()
	m.SetReady(3, 50)
	m.Tick()
	again := votes()
	if len(again) == 0 {
		t.Fatal("no vote after coming back")
	}
	if r0, r := first[len(first)-1].Round, again[0].Round; r <= r0 {
		t.Fatalf("voted again in round %d, first vote in round %d: %v then %v", r, r0, first[len(first)-1].Members, again[0].Members)
	}
}

// TestBackAtLeftModelVotesAbove: a member that voted in round 3 of a step,
// moved on, and later fetched that same model again (its adoption of
// another line failed) votes again only above round 3: peers still hold
// its first vote, and a second one in the same round is an equivocation
// (random-fault seed 5358 at 9-16 members).
func TestBackAtLeftModelVotesAbove(t *testing.T) {
	m, _ := New(Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 50}, 4, "h4")
	if err := m.Step(Message{Type: MsgPropose, From: "b", State: StateAgreeing, Step: 4, Hash: "h4", Round: 3,
		Members: []Member{{"b", 50}, {"me", 50}}}); err != nil {
		t.Fatal(err)
	}
	m.SetReady(4, 50)
	first, _ := proposals(m)
	if len(first) == 0 || first[len(first)-1].Round != 3 {
		t.Fatalf("first votes %v", first)
	}
	m.Synced(6, "h6", nil) // moved on (adopted another line)
	m.Synced(4, "h4", nil) // and back at the model it had left
	m.SetReady(4, 50)
	again, _ := proposals(m)
	if len(again) == 0 || again[0].Round <= 3 {
		t.Fatalf("voted again in round %v after round 3", again)
	}
}

// TestAloneMemberIgnoresInitialModelHolders: a member left alone (its
// peers left at once) beside a storm of new nodes that still hold the
// run's initial model keeps its own line: step 0 is no side to adopt,
// however many hold it.
func TestAloneMemberIgnoresInitialModelHolders(t *testing.T) {
	m, _ := New(Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 50, SyncTimeoutTicks: 1000}, 64, "x64")
	drain(m)
	for _, j := range []PeerID{"j1", "j2", "j3", "j4", "j5", "j6", "j7", "j8", "j9", "j10"} {
		if err := m.Step(Message{Type: MsgHeartbeat, From: j, State: StateTraining, Step: 0, Hash: "genesis"}); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		m.Tick()
	}
	for _, rd := range drain(m) {
		if f := cmp.Or(rd.Adopt, rd.Fetch); f != nil {
			t.Fatalf("asked to fetch step %d %s, want to keep step 64", f.Step, f.Hash)
		}
	}
	if step, hash := m.Model(); step != 64 || hash != "x64" {
		t.Fatalf("model step %d %s, want 64 x64", step, hash)
	}
}

// A member past step 0 whose fetch failed while only new nodes holding the
// run's initial model are left in sight goes on with its own model: it
// does not fetch step 0 back (60-minute soak, seed 1: a member at step 117,
// its donors gone in a storm, fetched the initial model and followed the
// storm's joiners on a new line from it).
func TestJoiningMemberIgnoresInitialModelHolders(t *testing.T) {
	m, _ := New(Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 50, SyncTimeoutTicks: 1000}, 64, "x64")
	drain(m)
	if err := m.Step(Message{Type: MsgHeartbeat, From: "a", State: StateTraining, Step: 65, Hash: "x65", PrevHash: "x64"}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		m.Tick()
	}
	if st := m.Status().State; st != StateSyncing {
		t.Fatalf("state %v, want syncing step 65 from a", st)
	}
	drain(m)
	if err := m.Step(Message{Type: MsgLeave, From: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, j := range []PeerID{"j1", "j2", "j3", "j4", "j5", "j6", "j7", "j8", "j9", "j10"} {
		if err := m.Step(Message{Type: MsgHeartbeat, From: j, State: StateTraining, Step: 0, Hash: "genesis"}); err != nil {
			t.Fatal(err)
		}
	}
	m.SyncFailed()
	for range 6 {
		m.Tick()
	}
	for _, rd := range drain(m) {
		if f := cmp.Or(rd.Adopt, rd.Fetch); f != nil && f.Step == 0 {
			t.Fatalf("asked to fetch step 0 %s while holding step 64", f.Hash)
		}
	}
	if step, hash := m.Model(); step != 64 || hash != "x64" {
		t.Fatalf("model step %d %s, want 64 x64", step, hash)
	}
}

// TestPastInitialNodeWaitsForLaterModel: a node restarted without a
// checkpoint whose home says it held a model past step 0 sees only peers
// with the run's initial model: it makes no ring of step 0 with them and
// fetches nothing, and it fetches the first later model a peer holds.
// Without Config.PastInitial the four would train a line of their own from
// step 0 (as the control shows).
func TestPastInitialNodeWaitsForLaterModel(t *testing.T) {
	run := func(past bool) (rings int, fetched []uint64, m *Mesh) {
		m, err := New(Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 50, StragglerTicks: 5, SyncTimeoutTicks: 1000, PastInitial: past}, 0, "genesis")
		if err != nil {
			t.Fatal(err)
		}
		for range 40 {
			for _, j := range []PeerID{"j1", "j2", "j3"} {
				if err := m.Step(Message{Type: MsgHeartbeat, From: j, State: StateReady, Step: 0, Hash: "genesis"}); err != nil {
					t.Fatal(err)
				}
			}
			m.Tick()
			for _, rd := range drain(m) {
				if f := cmp.Or(rd.Adopt, rd.Fetch); f != nil {
					fetched = append(fetched, f.Step)
				}
				for _, msg := range rd.Messages {
					if msg.Type == MsgPropose {
						rings++
					}
				}
				if rd.Ring != nil || rd.Close != nil {
					rings++
				}
			}
			if m.State() == StateTraining {
				m.SetReady(0, 2)
			}
		}
		return rings, fetched, m
	}
	if rings, _, _ := run(false); rings == 0 {
		t.Fatal("control: a node without PastInitial voted no ring of step 0 with three Ready peers")
	}
	rings, fetched, m := run(true)
	if rings != 0 || len(fetched) != 0 || m.State() != StateJoining {
		t.Fatalf("past step 0: %d proposals or rings, fetches of steps %v, state %v; want none, none, joining", rings, fetched, m.State())
	}
	if err := m.Step(Message{Type: MsgHeartbeat, From: "a", State: StateTraining, Step: 7, Hash: "x7", PrevHash: "x6"}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		m.Tick()
	}
	for _, rd := range drain(m) {
		if f := cmp.Or(rd.Adopt, rd.Fetch); f != nil {
			fetched = append(fetched, f.Step)
		}
	}
	if !slices.Equal(fetched, []uint64{7}) {
		t.Fatalf("fetched steps %v once a peer held step 7, want [7]", fetched)
	}
}

// TestFailedFetchIgnoresPeersBehindOnOwnLine: a member at step 5 of its
// line, whose adoption of another line failed, sees three peers restarted
// at step 4 of its own line (older checkpoints): it goes on with its own
// step 5 — they catch up from it — instead of fetching step 4 back.
func TestFailedFetchIgnoresPeersBehindOnOwnLine(t *testing.T) {
	m, _ := New(Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 50, SyncTimeoutTicks: 1000}, 4, "x4")
	drain(m)
	hb := func(from PeerID, step uint64, hash, prev string) {
		t.Helper()
		if err := m.Step(Message{Type: MsgHeartbeat, From: from, State: StateTraining, Step: step, Hash: hash, PrevHash: prev}); err != nil {
			t.Fatal(err)
		}
	}
	hb("a", 5, "x5", "x4")
	for range 4 {
		m.Tick()
	}
	drain(m)
	m.Synced(5, "x5", nil) // its line: x4 → x5
	drain(m)
	if err := m.Step(Message{Type: MsgLeave, From: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []PeerID{"r1", "r2", "r3"} {
		hb(id, 4, "x4", "x3")
	}
	for _, id := range []PeerID{"o1", "o2", "o3", "o4"} { // another line, larger
		hb(id, 6, "y6", "y5")
	}
	adopted := false
	for range 6 {
		m.Tick()
		for _, rd := range drain(m) {
			adopted = adopted || rd.Adopt != nil && rd.Adopt.Step == 6
		}
	}
	if !adopted {
		t.Fatal("the member did not adopt the larger line")
	}
	for _, id := range []PeerID{"o1", "o2", "o3", "o4"} { // its donors go
		if err := m.Step(Message{Type: MsgLeave, From: id}); err != nil {
			t.Fatal(err)
		}
	}
	m.SyncFailed()
	for range 6 {
		m.Tick()
		for _, rd := range drain(m) {
			if f := cmp.Or(rd.Adopt, rd.Fetch); f != nil && f.Step < 5 {
				t.Fatalf("fetched step %d %s back from peers behind on its own line", f.Step, f.Hash)
			}
		}
	}
	if step, hash := m.Model(); step != 5 || hash != "x5" {
		t.Fatalf("model step %d %s, want its own 5 x5", step, hash)
	}
}

// TestHeardKeepsAlive: a peer whose heartbeats stop but whose bytes keep
// arriving (Heard) is not declared dead; without Heard it is, after
// DeadTicks; Heard neither brings a dead peer back nor adds an unknown one.
func TestHeardKeepsAlive(t *testing.T) {
	deadAfter := func(heard func(m *Mesh)) (bool, *Mesh) {
		m, _ := New(Config{ID: "a", HeartbeatTicks: 2, DeadTicks: 5}, 4, "h4")
		drain(m)
		if err := m.Step(Message{Type: MsgHeartbeat, From: "b", State: StateTraining, Step: 4, Hash: "h4"}); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			heard(m)
			m.Tick()
		}
		for _, rd := range drain(m) {
			if slices.Contains(rd.Dead, "b") {
				return true, m
			}
		}
		return false, m
	}
	if dead, _ := deadAfter(func(m *Mesh) { m.Heard("b") }); dead {
		t.Error("a peer heard from every tick was declared dead")
	}
	dead, m := deadAfter(func(m *Mesh) {})
	if !dead {
		t.Fatal("a silent peer was not declared dead: the test cannot tell Heard's effect")
	}
	m.Heard("b")
	m.Heard("c")
	for _, p := range m.Status().Peers {
		if p.ID == "b" && !p.Dead || p.ID == "c" {
			t.Errorf("after Heard: %+v", p)
		}
	}
}
