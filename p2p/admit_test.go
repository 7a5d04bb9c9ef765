package p2p

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// admitRig is an allowlist run: a creator host and what it takes to make
// members, admitted or not.
type admitRig struct {
	t       *testing.T
	run     [32]byte
	creator *Host
	key     crypto.PrivKey // the creator's identity key
}

func newAdmitRig(t *testing.T, name string) *admitRig {
	r := &admitRig{t: t, run: testRun(name)}
	cfg := testConfig(t, name)
	r.creator = r.host(cfg, func(*Host) []byte { return nil })
	r.key = r.creator.Libp2p().Peerstore().PrivKey(r.creator.ID())
	return r
}

// host creates a host, gives it the ticket that ticket returns for it,
// and starts it.
func (r *admitRig) host(cfg Config, ticket func(h *Host) []byte) *Host {
	t := r.t
	t.Helper()
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	creator := h.ID()
	if r.creator != nil {
		creator = r.creator.ID()
	}
	if err := h.SetAdmission(Admission{Run: r.run, Creator: creator, Ticket: ticket(h), Grace: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil && !errors.Is(err, ErrBootstrapFailed) {
		t.Fatal(err)
	}
	return h
}

// member starts a host bootstrapped from the creator with the ticket that
// ticket returns, logging to logs.
func (r *admitRig) member(logs *syncBuffer, ticket func(h *Host) []byte) *Host {
	cfg := testConfig(r.t, "admit")
	cfg.Bootstrap = r.creator.Addrs()
	cfg.DialTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return r.host(cfg, ticket)
}

// ticket issues a ticket with key for run and peer p.
func (r *admitRig) ticket(key crypto.PrivKey, run [32]byte, p peer.ID, exp time.Time) []byte {
	tk, err := IssueTicket(key, run, p, exp)
	if err != nil {
		r.t.Fatal(err)
	}
	return tk.Encode()
}

// TestAdmission: a member with the creator's ticket is admitted both ways
// and gossips; peers with no ticket, a forged, expired, other peer's,
// other run's or malformed one are refused by the creator (PeerInfo's
// Refused says why), learn why (their RefusedBy), never get a message
// delivered and cannot connect again; a member whose ticket expires while
// connected is dropped.
func TestAdmission(t *testing.T) {
	r := newAdmitRig(t, "admit")
	good := r.member(&syncBuffer{}, func(h *Host) []byte { return r.ticket(r.key, r.run, h.ID(), time.Time{}) })
	eventually(t, meshTimeout, "creator and member admit each other", func() bool {
		return r.creator.Admitted(good.ID()) && good.Admitted(r.creator.ID())
	})
	eventually(t, meshTimeout, "gossip mesh", func() bool { return fullMesh([]*Host{r.creator, good}) })
	publishAndReceive(t, good, []*Host{r.creator}, "admitted")

	forger, _ := testKey(t)
	cases := []struct {
		name   string
		ticket func(h *Host) []byte
		want   string
	}{
		{"no ticket", func(*Host) []byte { return nil }, "no admission ticket"},
		{"forged", func(h *Host) []byte { return r.ticket(forger, r.run, h.ID(), time.Time{}) }, "not signed by the run's creator"},
		{"expired", func(h *Host) []byte { return r.ticket(r.key, r.run, h.ID(), time.Now().Add(-time.Minute)) }, "ticket expired"},
		{"other peer's", func(*Host) []byte { return r.ticket(r.key, r.run, good.ID(), time.Time{}) }, "ticket for another peer"},
		{"other run's", func(h *Host) []byte { return r.ticket(r.key, testRun("other"), h.ID(), time.Time{}) }, "ticket for another run"},
		{"malformed", func(*Host) []byte { return []byte("not a ticket") }, "malformed admission ticket"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			bad := r.member(&logs, c.ticket)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("bad peer's log:\n%s", logs.String())
				}
			})
			eventually(t, 20*time.Second, "the refusal reaching the bad peer", func() bool {
				return strings.Contains(bad.PeerInfo(r.creator.ID()).RefusedBy, c.want)
			})
			if r.creator.Admitted(bad.ID()) {
				t.Fatal("the creator admitted the bad peer")
			}
			eventually(t, meshTimeout, "bad peer disconnected", func() bool {
				return r.creator.Libp2p().Network().Connectedness(bad.ID()) == network.NotConnected &&
					bad.Libp2p().Network().Connectedness(r.creator.ID()) == network.NotConnected
			})
			ai := peer.AddrInfo{ID: r.creator.ID(), Addrs: r.creator.Libp2p().Addrs()}
			if err := bad.connect(context.Background(), ai); !errors.Is(err, ErrNotAdmitted) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("the refused peer dialing again: %v, want it to say why it was refused", err)
			}
			if why := r.creator.PeerInfo(bad.ID()).Refused; !strings.Contains(why, c.want) {
				t.Fatalf("the creator's refusal of the bad peer: %q, want %q", why, c.want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// The dialer may finish its handshake before the creator's
			// gater refuses it; the creator never keeps the connection.
			bad.Libp2p().Connect(ctx, peer.AddrInfo{ID: r.creator.ID(), Addrs: r.creator.Libp2p().Addrs()})
			_ = bad.Publish(ctx, []byte("from "+c.name))
			publishAndReceive(t, good, []*Host{r.creator}, "after "+c.name)
			for {
				select {
				case m := <-r.creator.Messages():
					t.Fatalf("creator delivered %q from %s", m.Data, m.From)
				default:
				}
				if r.creator.Libp2p().Network().Connectedness(bad.ID()) == network.NotConnected {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}

	t.Run("expires while connected", func(t *testing.T) {
		exp := time.Unix(time.Now().Add(3*time.Second).Unix(), 0) // tickets count whole seconds
		m := r.member(&syncBuffer{}, func(h *Host) []byte { return r.ticket(r.key, r.run, h.ID(), exp) })
		eventually(t, meshTimeout, "short-lived member admitted", func() bool { return r.creator.Admitted(m.ID()) })
		eventually(t, meshTimeout, "member dropped at expiry", func() bool {
			return r.creator.Libp2p().Network().Connectedness(m.ID()) == network.NotConnected && !r.creator.Admitted(m.ID())
		})
		if time.Now().Before(exp) {
			t.Fatal("dropped before its ticket expired")
		}
		if why := r.creator.PeerInfo(m.ID()).Refused; !strings.Contains(why, "ticket expired") {
			t.Fatalf("the creator's refusal at expiry: %q, want the expiry", why)
		}
	})
}

// TestAdmissionGatesStreams: a peer that does not speak the admission
// protocol at all gets no stream of the run's protocols either way while
// it is pending, the DHT and manifest protocols are open to it, and after
// the grace it is disconnected and refused.
func TestAdmissionGatesStreams(t *testing.T) {
	r := newAdmitRig(t, "gate")
	const runProto = "/intellect/test-run-protocol/1.0.0"
	served := make(chan struct{}, 4)
	r.creator.Libp2p().SetStreamHandler(runProto, func(s network.Stream) { served <- struct{}{}; s.Close() })
	r.creator.Libp2p().SetStreamHandler(ManifestProtocolID, func(s network.Stream) { s.Close() })
	key, _ := testKey(t)
	raw, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetStreamHandler(runProto, func(s network.Stream) { served <- struct{}{}; s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), meshTimeout)
	defer cancel()
	if err := raw.Connect(ctx, peer.AddrInfo{ID: r.creator.ID(), Addrs: r.creator.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	if s, err := raw.NewStream(ctx, r.creator.ID(), runProto); err == nil {
		if _, err := s.Read(make([]byte, 1)); err == nil {
			t.Fatal("a pending peer's run stream was served")
		}
	}
	if _, err := r.creator.Libp2p().NewStream(ctx, raw.ID(), runProto); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("opened a run stream to a pending peer: %v", err)
	}
	if s, err := raw.NewStream(ctx, r.creator.ID(), ManifestProtocolID); err != nil {
		t.Fatalf("manifest protocol closed to a pending peer: %v", err)
	} else {
		s.Close()
	}
	select {
	case <-served:
		t.Fatal("a run protocol handler ran for a pending peer")
	default:
	}
	eventually(t, meshTimeout, "pending peer refused after the grace", func() bool {
		return r.creator.Libp2p().Network().Connectedness(raw.ID()) == network.NotConnected &&
			strings.Contains(r.creator.PeerInfo(raw.ID()).Refused, "none valid presented within 2s")
	})
	if err := raw.Connect(ctx, peer.AddrInfo{ID: r.creator.ID(), Addrs: r.creator.Libp2p().Addrs()}); err == nil {
		eventually(t, 5*time.Second, "creator refusing the reconnection", func() bool {
			return r.creator.Libp2p().Network().Connectedness(raw.ID()) == network.NotConnected
		})
	}
}

// TestSetAdmissionRejects: a creator id without an inlined key, an
// oversized ticket and a second call are refused.
func TestSetAdmissionRejects(t *testing.T) {
	h := startHost(t, testConfig(t, "set-admission"))
	_, creator := testKey(t)
	if err := h.SetAdmission(Admission{Creator: peer.ID("x")}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("creator without a key: %v", err)
	}
	if err := h.SetAdmission(Admission{Creator: creator, Ticket: make([]byte, MaxTicketSize+1)}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("oversized ticket: %v", err)
	}
	if err := h.SetAdmission(Admission{Creator: creator}); err != nil {
		t.Fatal(err)
	}
	if err := h.SetAdmission(Admission{Creator: creator}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("second call: %v", err)
	}
}

func TestGatedProtocols(t *testing.T) {
	for proto, want := range map[string]bool{
		"/intellect/allreduce/1.0.0": true, "/intellect/ckpt/1.0.0": true, "/intellect/scatter/1.0.0": true,
		AdmitProtocolID: false, ManifestProtocolID: false, "/intellect/kad/1.0.0": false,
		"/meshsub/1.1.0": false, "/ipfs/id/1.0.0": false, "/ipfs/ping/1.0.0": false,
	} {
		if gatedProtocol(protocol.ID(proto)) != want {
			t.Errorf("%s gated: %v, want %v", proto, !want, want)
		}
	}
}
