package p2p

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// newLinkedHosts returns two hosts (not started), b connected to a.
func newLinkedHosts(t *testing.T) (a, b *Host) {
	t.Helper()
	var hs []*Host
	for range 2 {
		h, err := New(context.Background(), testConfig(t, "manifest"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs = append(hs, h)
	}
	ai := peer.AddrInfo{ID: hs[0].ID(), Addrs: hs[0].Libp2p().Addrs()}
	if err := hs[1].Libp2p().Connect(context.Background(), ai); err != nil {
		t.Fatal(err)
	}
	return hs[0], hs[1]
}

// TestManifestExchange: a joiner gets the served bytes with their id, a
// pinned id that differs is refused, and so are frames whose bytes do not
// hash to the id they claim, oversized frames and empty ones.
func TestManifestExchange(t *testing.T) {
	a, b := newLinkedHosts(t)
	data := []byte(`{"version":1}`)
	srv, err := ServeManifest(a.Libp2p(), data, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	got, id, err := FetchManifest(context.Background(), b.Libp2p(), a.ID(), "")
	if err != nil || id != want || !bytes.Equal(got, data) {
		t.Fatalf("fetch: %q %s %v, want %q %s", got, id, err, data, want)
	}
	if _, _, err := FetchManifest(context.Background(), b.Libp2p(), a.ID(), want); err != nil {
		t.Fatalf("fetch pinned to the right id: %v", err)
	}
	other := strings.Repeat("0", 64)
	if _, _, err := FetchManifest(context.Background(), b.Libp2p(), a.ID(), other); !errors.Is(err, ErrManifestMismatch) {
		t.Fatalf("fetch pinned to another id: %v, want ErrManifestMismatch", err)
	}
	srv.Close()
	bad := map[string]struct {
		payload []byte
		want    error
	}{
		"wrong id":  {append(make([]byte, 32), data...), ErrManifestMismatch},
		"no bytes":  {sum[:], ErrManifestProtocol},
		"oversized": {make([]byte, 32+MaxManifestSize+1), ErrFrameTooLarge},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			a.Libp2p().SetStreamHandler(ManifestProtocolID, func(s network.Stream) {
				_ = WriteFrame(s, manifestMsg, tc.payload)
				_ = s.Close()
			})
			_, _, err := FetchManifest(context.Background(), b.Libp2p(), a.ID(), "")
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	a.Libp2p().RemoveStreamHandler(ManifestProtocolID)
	if _, err := ServeManifest(a.Libp2p(), make([]byte, MaxManifestSize+1), nil); err == nil {
		t.Fatal("served an oversized manifest")
	}
}

// TestRunIDSeparatesRuns: hosts of one run name but different manifest ids,
// bootstrapped into each other, never share the gossip topic; those of the
// same id do.
func TestRunIDSeparatesRuns(t *testing.T) {
	idA, idB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	cfg := testConfig(t, "same-name")
	cfg.RunID = idA
	a := startHost(t, cfg)
	cfg.Bootstrap = a.Addrs()
	a2 := startHost(t, cfg)
	cfg.RunID = idB
	b := startHost(t, cfg)
	b2 := startHost(t, cfg)
	eventually(t, meshTimeout, "a and a2 on one topic", func() bool { return fullMesh([]*Host{a, a2}) })
	// b found its own run's topic through the same bootstrap peer: its
	// discovery has run, so had it shared a's topic it would show now.
	eventually(t, meshTimeout, "b and b2 on one topic", func() bool { return fullMesh([]*Host{b, b2}) })
	for _, h := range []*Host{a, a2} {
		if slices.Contains(h.TopicPeers(), b.ID()) || slices.Contains(b.TopicPeers(), h.ID()) {
			t.Fatalf("a host of manifest %s shares the topic of %s", idB[:8], idA[:8])
		}
	}
	if a.RunID() != idA || b.RunID() != idB {
		t.Fatalf("RunID %q %q", a.RunID(), b.RunID())
	}
	if err := a.SetRun("same-name", idB); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("SetRun after Start: %v", err)
	}
	bad := testConfig(t, "x")
	bad.RunID = "ABC"
	if err := bad.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad run id accepted: %v", err)
	}
}

func FuzzDecodeManifestFrame(f *testing.F) {
	data := []byte(`{"version":1}`)
	sum := sha256.Sum256(data)
	f.Add(append(sum[:], data...))
	f.Add(append(make([]byte, 32), data...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		got, id, err := DecodeManifestFrame(p)
		if err != nil {
			return
		}
		s := sha256.Sum256(got)
		if hex.EncodeToString(s[:]) != id || len(got) > MaxManifestSize || len(got) == 0 {
			t.Fatalf("accepted %d bytes with id %s", len(got), id)
		}
	})
}
