package mesh

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestValidateHistory(t *testing.T) {
	ok := []Made{{Step: 9, Members: []PeerID{"a", "b"}}, {Step: 10, Members: []PeerID{"a"}}}
	if err := ValidateHistory(10, ok); err != nil {
		t.Fatal(err)
	}
	if err := ValidateHistory(10, nil); err != nil {
		t.Fatal(err)
	}
	long := make([]PeerID, MaxMembers+1)
	for i := range long {
		long[i] = PeerID(fmt.Sprintf("p%04d", i))
	}
	var many []Made
	for st := range uint64(MadeWindow + 1) {
		many = append(many, Made{Step: st + 1, Members: []PeerID{"a"}})
	}
	for i, h := range [][]Made{
		{{Step: 11, Members: []PeerID{"a"}}},                                    // beyond the model
		{{Step: 0, Members: []PeerID{"a"}}},                                     // nobody makes step 0
		{{Step: 10, Members: []PeerID{"a"}}, {Step: 9, Members: []PeerID{"a"}}}, // not increasing
		{{Step: 10, Members: []PeerID{"b", "a"}}},                               // unsorted
		{{Step: 10, Members: []PeerID{"a", "a"}}},                               // duplicate
		{{Step: 10, Members: []PeerID{""}}},                                     // empty id
		{{Step: 10}},                                                            // empty ring
		{{Step: 10, Members: long}},                                             // too many
		many,                                                                    // too long
	} {
		if err := ValidateHistory(20, h); i > 0 && !errors.Is(err, ErrInvalid) || i == 0 && ValidateHistory(10, h) == nil {
			t.Errorf("history %d accepted (%v)", i, err)
		}
	}
	if _, err := New(Config{ID: "a", History: []Made{{Step: 5, Members: []PeerID{"a"}}}}, 4, "h"); !errors.Is(err, ErrConfig) {
		t.Errorf("New with a history beyond its model: %v", err)
	}
}

// admitVote returns the members of the first vote of node self at step 12,
// established {e0..e7} by a history of the last MadeWindow steps, with the
// Ready peers ready.
func admitVote(t *testing.T, self PeerID, rate float64, ready []PeerID) []PeerID {
	t.Helper()
	est := []PeerID{"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7"}
	var hist []Made
	for st := uint64(12 - MadeWindow + 1); st <= 12; st++ {
		hist = append(hist, Made{Step: st, Members: est})
	}
	cfg := simConfig(self, 1)
	cfg.AdmitRate, cfg.History = rate, hist
	m, err := New(cfg, 12, "h12")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ready {
		if id != self {
			if err := m.Step(Message{Type: MsgReady, From: id, Incarnation: 1, Step: 12, Hash: "h12", InnerSteps: 5}); err != nil {
				t.Fatal(err)
			}
		}
	}
	m.SetReady(12, 5)
	for _, msg := range m.Ready().Messages {
		if msg.Type == MsgPropose {
			var ids []PeerID
			for _, mb := range msg.Members {
				ids = append(ids, mb.ID)
			}
			return ids
		}
	}
	if m.State() == StateExcluded {
		return nil
	}
	t.Fatalf("%s did not vote (state %v)", self, m.State())
	return nil
}

// TestAdmitQuota: of 12 newcomers beside 8 established members, a vote
// admits ⌊¼ · 8⌋ = 2, the two whose hash with the step's model is lowest,
// whichever node votes; a newcomer not among them sits the step out; with
// no rate, or before the line is MadeWindow steps old, all are in.
func TestAdmitQuota(t *testing.T) {
	ready := []PeerID{"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7"}
	var fresh []PeerID
	for i := range 12 {
		fresh = append(fresh, PeerID(fmt.Sprintf("n%02d", i)))
	}
	ready = append(ready, fresh...)
	rank := slices.Clone(fresh)
	slices.SortFunc(rank, func(a, b PeerID) int {
		ra := sha256.Sum256([]byte("intellect/mesh/admit/1\x00h12\x00" + string(a)))
		rb := sha256.Sum256([]byte("intellect/mesh/admit/1\x00h12\x00" + string(b)))
		return slices.Compare(ra[:], rb[:])
	})
	want := slices.Sorted(slices.Values(append(slices.Clone(ready[:8]), rank[:2]...)))
	for _, self := range []PeerID{"e0", "e5", rank[0], rank[1]} {
		if got := admitVote(t, self, 0.25, ready); !slices.Equal(got, want) {
			t.Fatalf("%s votes %v, want %v", self, got, want)
		}
	}
	if got := admitVote(t, rank[2], 0.25, ready); got != nil {
		t.Fatalf("newcomer %s beyond the quota votes %v", rank[2], got)
	}
	if got := admitVote(t, "e0", 0, ready); len(got) != len(ready) {
		t.Fatalf("no rate: vote of %d members, want %d", len(got), len(ready))
	}
	// The quota counts the line's established members, from the history
	// every node holds alike, not those it heard Ready (a member that
	// crashed Ready is in some nodes' M only): with e0 alone Ready it is
	// still ⌊¼ · 8⌋ = 2.
	if got := admitVote(t, "e0", 0.25, []PeerID{"e0", fresh[0], fresh[1], fresh[2]}); len(got) != 3 {
		t.Fatalf("vote %v, want e0 and two newcomers", got)
	}
}

// TestPeerMovedKeepsLineage: a Ready or vote one step past the model a
// peer held makes that model its predecessor (those messages carry no
// PrevHash); any other jump leaves the predecessor unknown until the
// peer's next heartbeat.
func TestPeerMovedKeepsLineage(t *testing.T) {
	p := &meshPeer{step: 5, hash: "h5", prevHash: "h4"}
	p.moved(5, "h5")
	if p.prevHash != "h4" {
		t.Fatalf("same model: prevHash %q", p.prevHash)
	}
	p.moved(6, "h6")
	if p.step != 6 || p.hash != "h6" || p.prevHash != "h5" {
		t.Fatalf("one step on: %+v", p)
	}
	p.moved(9, "h9")
	if p.prevHash != "" {
		t.Fatalf("a jump kept prevHash %q", p.prevHash)
	}
}

// TestVouch: a stranger that signs the same ring as a peer this node knows
// becomes known; strangers that sign rings only among themselves (a fork
// of made-up identities) do not.
func TestVouch(t *testing.T) {
	m, err := New(Config{ID: "me", History: []Made{{Step: 5, Members: []PeerID{"k", "me"}}}}, 5, "h5")
	if err != nil {
		t.Fatal(err)
	}
	vote := func(from PeerID, members ...PeerID) {
		msg := Message{Type: MsgPropose, From: from, State: StateAgreeing, Step: 9, Hash: "other", Round: 2}
		for _, id := range members {
			msg.Members = append(msg.Members, Member{ID: id, InnerSteps: 5})
		}
		if err := m.Step(msg); err != nil {
			t.Fatal(err)
		}
	}
	vote("s1", "s1", "s2")
	vote("s2", "s1", "s2")
	if m.knows("s1") || m.knows("s2") {
		t.Fatal("strangers that signed a ring among themselves are known")
	}
	vote("s3", "k", "s3")
	vote("k", "k", "s3")
	if !m.knows("s3") {
		t.Fatal("a stranger that signed a ring with a known peer is not known")
	}
	vote("s4", "k", "s4") // k signed another ring of that round: no match
	if m.knows("s4") {
		t.Fatal("a stranger vouched by a vote its known peer did not sign")
	}
}
