package mesh

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func simBigPropose(n int) Message {
	m := Message{Type: MsgPropose, From: simLongID(0), State: StateAgreeing, Step: 1 << 40,
		Hash: strings.Repeat("h", MaxHashLen), Round: MaxRound}
	for i := range n {
		m.Members = append(m.Members, Member{ID: simLongID(i), InnerSteps: MaxInnerSteps})
	}
	for i := n; i < MaxMembers; i++ {
		m.Excluded = append(m.Excluded, simLongID(i))
	}
	return m
}

// simLongID is a sortable id of MaxPeerIDLen bytes.
func simLongID(i int) PeerID {
	s := fmt.Sprintf("p%05d", i)
	return PeerID(s + strings.Repeat("x", MaxPeerIDLen-len(s)))
}

func TestCodecRoundTrip(t *testing.T) {
	full := Message{Type: MsgHeartbeat, From: "a", State: StateTraining, Step: 7, Hash: "h7", PrevHash: "h6",
		InnerSteps: 100, Addrs: []string{"/ip4/1.2.3.4/tcp/1", strings.Repeat("x", MaxAddrLen)}}
	for i := 2; i < MaxAddrs; i++ {
		full.Addrs = append(full.Addrs, "/ip6/::1/udp/1/quic-v1")
	}
	cases := []Message{
		{Type: MsgJoin, From: "j", State: StateJoining},
		{Type: MsgLeave, From: "l", State: StateLeft, Step: 3, Hash: "x"},
		{Type: MsgReady, From: "r", Step: 9, Hash: "h", InnerSteps: 12},
		{Type: MsgClose, From: "c", Step: 9, Hash: "h"},
		{Type: MsgPropose, From: "b", Step: 2, Hash: "h", Round: 3, Members: []Member{{"a", 1}, {"b", 2}}, Excluded: []PeerID{"c"}},
		full,
		simBigPropose(MaxMembers / 2),
		simBigPropose(MaxMembers),
	}
	for _, m := range cases {
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode(%v): %v", m.Type, err)
		}
		if len(b) > MaxMessageSize {
			t.Fatalf("%v: %d bytes", m.Type, len(b))
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(%v): %v", m.Type, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
	}
}

// TestCodecWorstCaseFits: the largest message the limits allow stays
// under MaxMessageSize, so Encode never fails on a valid message.
func TestCodecWorstCaseFits(t *testing.T) {
	m := simBigPropose(MaxMembers)
	m.PrevHash = m.Hash
	m.InnerSteps = MaxInnerSteps
	for range MaxAddrs {
		m.Addrs = append(m.Addrs, strings.Repeat("a", MaxAddrLen))
	}
	for range m.Members {
		m.Links = append(m.Links, 1<<32-1)
	}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worst-case message: %d bytes of %d", len(b), MaxMessageSize)
}

func TestCodecRejects(t *testing.T) {
	good, _ := Encode(Message{Type: MsgPropose, From: "b", Step: 2, Hash: "h", Members: []Member{{"a", 1}, {"b", 2}}})
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"version", append([]byte{9}, good[1:]...), ErrMalformed},
		{"trailing", append(append([]byte{}, good...), 0), ErrMalformed},
		{"truncated", good[:len(good)-2], ErrMalformed},
		{"type", append([]byte{WireVersion, 77}, good[2:]...), ErrInvalid},
		{"too big", make([]byte, MaxMessageSize+1), ErrTooLarge},
		// version, type, from "b", incarnation, state, step, hash, prev, inner, round, then 2^20 members
		{"member count", []byte{WireVersion, 5, 1, 'b', 0, 0, 0, 1, 'h', 0, 0, 0, 0x80, 0x80, 0x40}, ErrTooLarge},
		{"count beyond bytes", []byte{WireVersion, 5, 1, 'b', 0, 0, 0, 1, 'h', 0, 0, 0, 200, 1}, ErrMalformed},
		{"long from", append([]byte{WireVersion, 1, 100}, make([]byte, 100)...), ErrTooLarge},
		{"bad varint", []byte{WireVersion, 1, 1, 'a', 0, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrMalformed},
	}
	for _, c := range cases {
		if _, err := Decode(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	invalid := []Message{
		{Type: MsgHeartbeat, From: "a"},                                                 // no state
		{Type: MsgReady, From: "a", Step: 1},                                            // no hash
		{Type: MsgPropose, From: "a", Hash: "h"},                                        // no members
		{Type: MsgPropose, From: "a", Hash: "h", Members: []Member{{"b", 1}}},           // proposer missing
		{Type: MsgPropose, From: "a", Hash: "h", Members: []Member{{"b", 1}, {"a", 1}}}, // unsorted
		{Type: MsgPropose, From: "a", Hash: "h", Members: []Member{{"a", 1}}, Excluded: []PeerID{"c", "c"}},
		{Type: MsgJoin, From: ""},
		{Type: MsgJoin, From: "a", State: 99},
		{Type: MsgJoin, From: "a", InnerSteps: MaxInnerSteps + 1},
	}
	for i, m := range invalid {
		if _, err := Encode(m); err == nil {
			t.Errorf("invalid message %d encoded", i)
		}
	}
}

// FuzzDecode: no input panics; whatever decodes re-encodes canonically.
func FuzzDecode(f *testing.F) {
	for _, m := range []Message{
		{Type: MsgHeartbeat, From: "a", State: StateTraining, Step: 7, Hash: "h", PrevHash: "g", Addrs: []string{"x"}},
		{Type: MsgPropose, From: "b", Step: 2, Hash: "h", Round: 3, Members: []Member{{"a", 1}, {"b", 2}}, Excluded: []PeerID{"c"}},
		{Type: MsgJoin, From: "j"},
	} {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		b2, err := Encode(m)
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		m2, err := Decode(b2)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-decode: %v\n%+v\n%+v", err, m, m2)
		}
	})
}
