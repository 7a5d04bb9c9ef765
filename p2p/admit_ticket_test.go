package p2p

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// testKey returns a fresh Ed25519 identity and its peer id.
func testKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

func testRun(name string) [32]byte { return sha256.Sum256([]byte(name)) }

// TestTicketRoundTrip: a ticket survives its binary and text forms
// unchanged, expiry truncated to whole seconds, and verifies.
func TestTicketRoundTrip(t *testing.T) {
	ck, creator := testKey(t)
	_, member := testKey(t)
	now := time.Unix(1_800_000_000, 0)
	for _, exp := range []time.Time{{}, now.Add(90*time.Minute + 300*time.Millisecond)} {
		tk, err := IssueTicket(ck, testRun("r"), member, exp)
		if err != nil {
			t.Fatal(err)
		}
		b := tk.Encode()
		got, err := DecodeTicket(b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Encode(), b) || got.Peer != member || got.Run != testRun("r") || !got.Expires.Equal(tk.Expires) {
			t.Fatalf("binary round trip: %+v, want %+v", got, tk)
		}
		if !exp.IsZero() && got.Expires.Unix() != exp.Unix() {
			t.Fatalf("expiry %v, want %v", got.Expires, exp)
		}
		txt, err := ParseTicket([]byte("\n  " + tk.String() + "\n"))
		if err != nil || !bytes.Equal(txt.Encode(), b) {
			t.Fatalf("text round trip: %v", err)
		}
		if !strings.HasPrefix(tk.String(), TicketTextPrefix) {
			t.Fatalf("text form %q", tk.String())
		}
		if err := got.Verify(creator, testRun("r"), member, now); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTicketVerify: each way a ticket can fail to admit its bearer is
// refused with its own error.
func TestTicketVerify(t *testing.T) {
	ck, creator := testKey(t)
	other, _ := testKey(t)
	_, member := testKey(t)
	_, stranger := testKey(t)
	run, now := testRun("r"), time.Unix(1_800_000_000, 0)
	issue := func(k crypto.PrivKey, r [32]byte, p peer.ID, exp time.Time) *Ticket {
		tk, err := IssueTicket(k, r, p, exp)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	tampered := issue(ck, run, member, now.Add(time.Hour))
	tampered.Expires = now.Add(1000 * time.Hour) // the creator signed one hour
	cases := []struct {
		name   string
		ticket *Ticket
		bearer peer.ID
		want   error
	}{
		{"valid", issue(ck, run, member, now.Add(time.Second)), member, nil},
		{"forged by another key", issue(other, run, member, time.Time{}), member, ErrTicketSignature},
		{"extended by the bearer", tampered, member, ErrTicketSignature},
		{"another run", issue(ck, testRun("other"), member, time.Time{}), member, ErrTicketOtherRun},
		{"another peer's", issue(ck, run, member, time.Time{}), stranger, ErrTicketOtherPeer},
		{"expired", issue(ck, run, member, now), member, ErrTicketExpired},
	}
	for _, c := range cases {
		err := c.ticket.Verify(creator, run, c.bearer, now)
		if !errors.Is(err, c.want) || (c.want != nil && !errors.Is(err, ErrNotAdmitted)) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := issue(ck, run, member, time.Time{}).Verify("not a peer id", run, member, now); err == nil {
		t.Error("verified against a creator without a key")
	}
}

// TestDecodeTicketRejects: malformed tickets are refused with ErrTicket,
// never a panic.
func TestDecodeTicketRejects(t *testing.T) {
	ck, _ := testKey(t)
	_, member := testKey(t)
	tk, err := IssueTicket(ck, testRun("r"), member, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	good := tk.Encode()
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	peerAt := ticketFixed - 2 - 1 // the peer length byte
	cases := map[string][]byte{
		"empty":          nil,
		"short":          good[:ticketFixed-1],
		"truncated":      good[:len(good)-1],
		"trailing":       append(bytes.Clone(good), 0),
		"oversized":      make([]byte, MaxTicketSize+1),
		"version":        edit(func(b []byte) []byte { b[0] = 2; return b }),
		"negative":       edit(func(b []byte) []byte { binary.BigEndian.PutUint64(b[33:], 1<<63); return b }),
		"no peer":        edit(func(b []byte) []byte { b[peerAt] = 0; return b }),
		"long peer":      edit(func(b []byte) []byte { b[peerAt] = maxTicketPeer + 1; return b }),
		"bad multihash":  edit(func(b []byte) []byte { b[peerAt+1] = 0xff; return b }),
		"no signature":   edit(func(b []byte) []byte { return binary.BigEndian.AppendUint16(b[:len(b)-len(tk.Sig)-2], 0) }),
		"long signature": edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[len(b)-len(tk.Sig)-2:], 300); return b }),
	}
	for name, b := range cases {
		if _, err := DecodeTicket(b); !errors.Is(err, ErrTicket) {
			t.Errorf("%s: %v, want ErrTicket", name, err)
		}
	}
	texts := map[string]string{
		"no prefix":  strings.TrimPrefix(tk.String(), TicketTextPrefix),
		"bad base64": TicketTextPrefix + "!!!!",
		"oversized":  TicketTextPrefix + strings.Repeat("A", 2*MaxTicketSize),
		"binary":     string(good),
	}
	for name, s := range texts {
		if _, err := ParseTicket([]byte(s)); !errors.Is(err, ErrTicket) {
			t.Errorf("text %s: %v, want ErrTicket", name, err)
		}
	}
}

// FuzzDecodeTicket: any input either is refused with ErrTicket or decodes to
// a ticket whose encoding is exactly the input (and whose verification
// fails without a panic); the text form is parsed alike.
func FuzzDecodeTicket(f *testing.F) {
	ck, _ := testKey(f)
	_, member := testKey(f)
	tk, err := IssueTicket(ck, testRun("r"), member, time.Unix(1_800_000_000, 0))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tk.Encode())
	f.Add([]byte(tk.String()))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := DecodeTicket(b); err == nil {
			if !bytes.Equal(got.Encode(), b) {
				t.Fatalf("accepted a non-canonical encoding")
			}
			_ = got.Verify(got.Peer, got.Run, got.Peer, time.Unix(0, 0)) // any bytes: an error, not a panic
		} else if !errors.Is(err, ErrTicket) {
			t.Fatalf("error %v does not wrap ErrTicket", err)
		}
		if got, err := ParseTicket(b); err == nil {
			if _, err := DecodeTicket(got.Encode()); err != nil {
				t.Fatalf("parsed a ticket that does not decode: %v", err)
			}
		} else if !errors.Is(err, ErrTicket) {
			t.Fatalf("text error %v does not wrap ErrTicket", err)
		}
	})
}
