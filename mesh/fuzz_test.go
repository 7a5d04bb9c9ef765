package mesh

import (
	"reflect"
	"slices"
	"testing"
)

// simFuzzMessage builds a structurally valid message from fuzz bytes over a
// small alphabet of peers, steps, hashes and rounds, so that random inputs
// hit the agreement paths instead of failing validation.
func simFuzzMessage(b []byte) Message {
	at := func(i int) byte {
		if i < len(b) {
			return b[i]
		}
		return 0
	}
	peers := []PeerID{"a", "b", "c", "d", "self"}
	hashes := []string{"h0", "h1", "hx"}
	m := Message{
		Type:       MsgType(1 + at(0)%6),
		From:       peers[int(at(1))%4],
		State:      State(1 + at(2)%8),
		Step:       uint64(at(3) % 3),
		Hash:       hashes[int(at(4))%3],
		PrevHash:   hashes[int(at(5))%3],
		InnerSteps: uint32(at(6)),
		Round:      uint32(at(7) % 4),
	}
	for i, p := range peers {
		if at(8)&(1<<i) != 0 || (m.Type == MsgPropose && p == m.From) {
			m.Members = append(m.Members, Member{ID: p, InnerSteps: uint32(at(9))})
		}
		if at(10)&(1<<i) != 0 && p != m.From {
			m.Excluded = append(m.Excluded, p)
		}
	}
	slices.SortFunc(m.Members, func(a, b Member) int { return meshCmpMember(a, b.ID) })
	slices.Sort(m.Excluded)
	return m
}

// FuzzStep feeds a Mesh random sequences of messages and API calls. It must
// never panic, never emit a message that fails Encode, and only decide rings
// it belongs to, for its current step.
func FuzzStep(f *testing.F) {
	f.Add([]byte{0, 1, 3, 0, 0, 0, 10, 0, 0xff, 5, 0, 9, 9, 9})
	f.Add([]byte{4, 1, 5, 0, 0, 0, 10, 0, 0x13, 5, 0, 7, 4, 0, 0, 0, 0, 0, 0, 0x13, 5})
	f.Add([]byte{0x80, 3, 4, 0, 0, 0, 10, 0, 0, 0, 0, 0, 5, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Config{ID: "self", HeartbeatTicks: 2, DeadTicks: 5, StragglerTicks: 4, ProposeTimeoutTicks: 6, SyncTimeoutTicks: 8}
		if len(data) > 0 && data[0]&0x80 != 0 { // the close rule
			cfg.CloseFraction, cfg.Inner, cfg.CloseWaitTicks = 0.5, 10, 3
		}
		m, err := New(cfg, 0, "h0")
		if err != nil {
			t.Fatal(err)
		}
		for len(data) > 0 {
			op := data[0]
			data = data[1:]
			switch op % 8 {
			case 0, 1, 2:
				n := min(len(data), 11)
				msg := simFuzzMessage(data[:n])
				data = data[n:]
				if err := msg.Validate(); err == nil {
					if err := m.Step(msg); err != nil {
						t.Fatalf("Step(valid %+v): %v", msg, err)
					}
				}
			case 3:
				m.Tick()
			case 4:
				m.SetReady(m.Status().Step, int(op))
			case 5:
				m.ReportFailure(m.Status().Step, PeerID([]string{"a", "b", "self"}[int(op/8)%3]))
			case 6:
				st := m.Status()
				m.Completed(st.Step, st.Hash+"+")
			case 7:
				m.Synced(uint64(op/8%3), "h1", nil)
			}
			simCheckReady(t, m)
		}
	})
}

func simCheckReady(t *testing.T, m *Mesh) {
	for m.HasReady() {
		rd := m.Ready()
		for _, msg := range rd.Messages {
			if _, err := Encode(msg); err != nil {
				t.Fatalf("mesh emitted an invalid message %+v: %v", msg, err)
			}
		}
		if c := rd.Close; c != nil {
			if step, hash := m.Model(); c.Step != step || c.Hash != hash {
				t.Fatalf("close of %d %q while at %d %q", c.Step, c.Hash, step, hash)
			}
		}
		if r := rd.Ring; r != nil {
			st := m.Status()
			if r.Rank("self") < 0 || r.Step != st.Step || !slices.IsSorted(r.Members) || len(r.Weights) != len(r.Members) {
				t.Fatalf("bad ring %+v at %+v", r, st)
			}
		}
		m.Advance(rd)
	}
}

// TestStepBadInputNoDamage: a message failing validation is an error and
// leaves the state untouched.
func TestStepBadInputNoDamage(t *testing.T) {
	m, err := New(Config{ID: "self"}, 3, "h")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Step(Message{Type: MsgHeartbeat, From: "a", State: StateTraining, Step: 3, Hash: "h"}); err != nil {
		t.Fatal(err)
	}
	before := m.Status()
	bad := []Message{
		{Type: MsgPropose, From: "a", Step: 3, Hash: "h", Members: []Member{{"b", 1}}},
		{Type: 0, From: "a"},
		{Type: MsgReady, From: "a", Step: 3},
		{Type: MsgClose, From: "a", Step: 3},
		{Type: MsgHeartbeat, From: "a", State: StateTraining, Addrs: make([]string, MaxAddrs+1)},
	}
	for _, msg := range bad {
		if err := m.Step(msg); err == nil {
			t.Fatalf("Step accepted %+v", msg)
		}
	}
	if after := m.Status(); !reflect.DeepEqual(before, after) {
		t.Fatalf("state changed by bad input:\n%+v\n%+v", before, after)
	}
}
