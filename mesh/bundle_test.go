package mesh

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func bundleSample() []Message {
	return []Message{
		{Type: MsgHeartbeat, From: "a", State: StateAgreeing, Step: 7, Hash: "h", PrevHash: "g", InnerSteps: 5, Addrs: []string{"x"}},
		{Type: MsgPropose, From: "a", State: StateAgreeing, Step: 7, Hash: "h", Round: 3,
			Members: []Member{{"a", 5}, {"b", 5}}, Excluded: []PeerID{"c"}, Links: []uint32{0, 9}},
	}
}

func TestBundleRoundTrip(t *testing.T) {
	msgs := bundleSample()
	for n := 1; n <= MaxBundle; n++ {
		in := make([]Message, n)
		for i := range in {
			in[i] = msgs[i%len(msgs)]
		}
		b, err := EncodeBundle(in)
		if err != nil {
			t.Fatalf("%d messages: %v", n, err)
		}
		if want := byte(BundleVersion); n == 1 {
			if b[0] != WireVersion {
				t.Fatalf("one message is sent as itself, got first byte %#x", b[0])
			}
		} else if b[0] != want {
			t.Fatalf("%d messages: first byte %#x", n, b[0])
		}
		out, err := DecodeBundle(b)
		if err != nil || !reflect.DeepEqual(in, out) {
			t.Fatalf("%d messages: %v\n%+v\n%+v", n, err, in, out)
		}
	}
}

func TestBundleRefusals(t *testing.T) {
	msgs := bundleSample()
	if _, err := EncodeBundle(nil); err == nil {
		t.Fatal("empty bundle encoded")
	}
	if _, err := EncodeBundle(make([]Message, MaxBundle+1)); err == nil {
		t.Fatal("bundle over MaxBundle encoded")
	}
	if _, err := EncodeBundle([]Message{msgs[0], {Type: MsgHeartbeat}}); err == nil {
		t.Fatal("a bundle with an invalid message encoded")
	}
	big := msgs[1]
	big.From = PeerID(strings.Repeat("m", MaxPeerIDLen-2) + "Aa")
	big.Members = nil
	for i := range 250 {
		big.Members = append(big.Members, Member{ID: PeerID(strings.Repeat("m", MaxPeerIDLen-2) + string(rune('A'+i/26)) + string(rune('a'+i%26))), InnerSteps: 1})
	}
	big.Links = nil
	if _, err := Encode(big); err != nil {
		t.Fatal(err)
	}
	if _, err := EncodeBundle([]Message{big, big, big, big}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("bundle over MaxBundleSize: %v", err)
	}
	good, err := EncodeBundle(msgs)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":         {},
		"no count":      {BundleVersion},
		"count 1":       append([]byte{BundleVersion, 1}, good[2:]...),
		"count 5":       append([]byte{BundleVersion, MaxBundle + 1}, good[2:]...),
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte(nil), good...), 0),
		"part too long": append([]byte{BundleVersion, 2, 0xff, 0x01}, good[3:]...),
		"bad part":      append([]byte{BundleVersion, 2, 1, 9}, good[2:]...),
	} {
		if _, err := DecodeBundle(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzDecodeBundle(f *testing.F) {
	b, err := EncodeBundle(bundleSample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[2:])
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := DecodeBundle(b)
		if err != nil {
			return
		}
		if len(msgs) == 0 || len(msgs) > MaxBundle {
			t.Fatalf("%d messages decoded", len(msgs))
		}
		b2, err := EncodeBundle(msgs)
		if err != nil {
			t.Fatalf("decoded bundle does not encode: %v", err)
		}
		msgs2, err := DecodeBundle(b2)
		if err != nil || !reflect.DeepEqual(msgs, msgs2) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
