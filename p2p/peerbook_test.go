package p2p

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRejoinFromPeerBook: a member restarted with its home, whose
// bootstrap peers are gone, finds the run through the peers it was
// connected to before the restart (PeerBookFile) — the soak's member
// restarted inside a partition with two bootstrap peers that then left,
// which trained alone to the end.
func TestRejoinFromPeerBook(t *testing.T) {
	member := startHost(t, testConfig(t, "book"))
	home := t.TempDir()
	cfg := testConfig(t, "book")
	cfg.Home, cfg.Bootstrap = home, member.Addrs()
	first := startHost(t, cfg)
	eventually(t, meshTimeout, "the first run connected", func() bool { return fullMesh([]*Host{first, member}) })
	first.Close() // writes the book
	b, err := os.ReadFile(filepath.Join(home, PeerBookFile))
	if err != nil || !strings.Contains(string(b), member.ID().String()) {
		t.Fatalf("the peer book does not hold the member it was connected to (%v):\n%s", err, b)
	}

	goneCfg := testConfig(t, "book")
	gone, err := New(context.Background(), goneCfg)
	if err != nil {
		t.Fatal(err)
	}
	goneAddrs := gone.Addrs()
	gone.Close()
	cfg.Bootstrap, cfg.Rejoin, cfg.DialTimeout = goneAddrs, true, time.Second
	again := startHost(t, cfg)
	eventually(t, meshTimeout, "the restarted member found the run through its peer book", func() bool {
		return fullMesh([]*Host{again, member})
	})
}

// TestPeerBookBadInput: a book that is not one is ignored with a warning;
// entries that do not parse are skipped; the rest is kept.
func TestPeerBookBadInput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, PeerBookFile)
	for _, bad := range []string{"not json", `{"peers": 7}`, strings.Repeat(" ", peerBookMaxBytes+1)} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readPeerBook(path); err == nil {
			t.Fatalf("book %.20q read without an error", bad)
		}
		cfg := testConfig(t, "book")
		cfg.Home = dir
		h, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatalf("a bad peer book stopped the host: %v", err)
		}
		h.Close()
	}
	const id = "12D3KooWFMw6YUjjgcvDMX285bL5gUD9vEmFVXDFoEMNWXbLtciN"
	book := `{"peers": [
		{"id": "nonsense", "addrs": ["/ip4/10.0.0.1/tcp/4001"]},
		{"id": "` + id + `", "addrs": ["bogus", "/ip4/10.0.0.2/tcp/4001"]},
		{"id": "` + id + `", "addrs": ["/ip4/10.0.0.3/tcp/4001"]},
		{"id": "12D3KooWH5nktqsWvT921avcJBBzzCFfoN93bhTQCsvebLjeXFMc", "addrs": ["bogus"]}
	]}`
	if err := os.WriteFile(path, []byte(book), 0o600); err != nil {
		t.Fatal(err)
	}
	peers, skipped, err := readPeerBook(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 1 || skipped != 3 || peers[0].ai.ID.String() != id || len(peers[0].ai.Addrs) != 1 || peers[0].ai.Addrs[0].String() != "/ip4/10.0.0.2/tcp/4001" {
		t.Fatalf("kept %v, skipped %d: want the one valid entry with its valid address, 3 skipped", peers, skipped)
	}
	if peers, skipped, err := readPeerBook(filepath.Join(dir, "missing.json")); err != nil || len(peers) != 0 || skipped != 0 {
		t.Fatalf("a missing book: %v, %d, %v; want empty", peers, skipped, err)
	}
}

// TestIslandsMergeThroughBootstrap: two members that could not reach their
// bootstrap node when they started, and found each other instead, connect
// to it once it answers, though they are not alone.
func TestIslandsMergeThroughBootstrap(t *testing.T) {
	boot, bootCfg := newHomeHost(t, "islands")
	bootAddrs := boot.Addrs()
	boot.Close()

	cfg := testConfig(t, "islands")
	cfg.Bootstrap, cfg.Rejoin, cfg.DialTimeout = bootAddrs, true, time.Second
	first := startHost(t, cfg)
	cfg.Bootstrap = append(slices.Clone(bootAddrs), first.Addrs()...)
	second := startHost(t, cfg)
	eventually(t, meshTimeout, "the two members found each other", func() bool { return fullMesh([]*Host{first, second}) })

	again := restartHost(t, bootCfg, boot, bootAddrs[0])
	eventually(t, meshTimeout, "the island joined the bootstrap node", func() bool {
		return fullMesh([]*Host{again, first, second})
	})
}
