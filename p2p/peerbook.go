package p2p

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// PeerBookFile, in Home, keeps the run peers this host has been connected
// to (their addresses, most recently seen first), so that a member
// restarted with its home can find the run again when its bootstrap peers
// are gone: they may have left, or have been the peers it could reach on its
// side of a partition that has healed since (soak seed 1: a member started
// with two bootstrap peers that then left trained alone to the end).
const PeerBookFile = "peers.json"

const (
	// peerBookMaxBytes bounds the file read: 256 peers × 16 addresses fit.
	peerBookMaxBytes = 1 << 20
	// peerBookMaxAddrs bounds the addresses kept per peer.
	peerBookMaxAddrs = 16
	// peerBookSaveEvery spaces the writes of a changed book.
	peerBookSaveEvery = 30 * time.Second
)

// knownPeer is a remembered run peer: its addresses and when it was last
// connected and identified.
type knownPeer struct {
	ai   peer.AddrInfo
	seen time.Time
}

type peerBookEntry struct {
	ID    string    `json:"id"`
	Addrs []string  `json:"addrs"`
	Seen  time.Time `json:"seen"`
}

type peerBook struct {
	Peers []peerBookEntry `json:"peers"`
}

// readPeerBook reads path. A missing file is an empty book; entries that do
// not parse are skipped and counted; a file that is not a book at all is an
// error (the caller starts without it).
func readPeerBook(path string) (peers []knownPeer, skipped int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, peerBookMaxBytes+1))
	if err != nil {
		return nil, 0, err
	}
	if len(data) > peerBookMaxBytes {
		return nil, 0, fmt.Errorf("%s is larger than %d bytes", path, peerBookMaxBytes)
	}
	var b peerBook
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	seen := make(map[peer.ID]bool)
	for _, e := range b.Peers {
		id, err := peer.Decode(e.ID)
		if err != nil || seen[id] || len(peers) == maxKnownPeers {
			skipped++
			continue
		}
		var addrs []ma.Multiaddr
		for _, s := range e.Addrs[:min(len(e.Addrs), peerBookMaxAddrs)] {
			if a, err := ma.NewMultiaddr(s); err == nil {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			skipped++
			continue
		}
		seen[id] = true
		peers = append(peers, knownPeer{ai: peer.AddrInfo{ID: id, Addrs: addrs}, seen: e.Seen})
	}
	return peers, skipped, nil
}

// writePeerBook stores peers at path atomically, most recently seen first.
func writePeerBook(path string, peers []knownPeer) error {
	slices.SortFunc(peers, func(a, b knownPeer) int {
		if c := b.seen.Compare(a.seen); c != 0 {
			return c
		}
		return cmp.Compare(a.ai.ID, b.ai.ID)
	})
	var b peerBook
	for _, p := range peers {
		e := peerBookEntry{ID: p.ai.ID.String(), Seen: p.seen.UTC().Round(time.Second)}
		for _, a := range p.ai.Addrs[:min(len(p.ai.Addrs), peerBookMaxAddrs)] {
			e.Addrs = append(e.Addrs, a.String())
		}
		b.Peers = append(b.Peers, e)
	}
	data, err := json.MarshalIndent(b, "", " ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// loadPeerBook fills the remembered run peers from Home's book.
func (h *Host) loadPeerBook() {
	if h.cfg.Home == "" {
		return
	}
	peers, skipped, err := readPeerBook(filepath.Join(h.cfg.Home, PeerBookFile))
	if err != nil {
		h.log.Warn("peer book unreadable: starting without it", "err", err)
		return
	}
	if skipped > 0 {
		h.log.Warn("peer book: entries skipped", "skipped", skipped, "kept", len(peers))
	}
	h.knownMu.Lock()
	defer h.knownMu.Unlock()
	for _, p := range peers {
		if p.ai.ID != h.h.ID() {
			h.known[p.ai.ID] = p
		}
	}
}

// savePeerBook writes the remembered run peers to Home's book if they
// changed since the last write and, unless force, the last write is
// peerBookSaveEvery old.
func (h *Host) savePeerBook(force bool) {
	if h.cfg.Home == "" {
		return
	}
	h.knownMu.Lock()
	if !h.knownDirty || !force && time.Since(h.knownSaved) < peerBookSaveEvery {
		h.knownMu.Unlock()
		return
	}
	peers := make([]knownPeer, 0, len(h.known))
	for _, p := range h.known {
		peers = append(peers, p)
	}
	h.knownDirty, h.knownSaved = false, time.Now()
	h.knownMu.Unlock()
	if err := writePeerBook(filepath.Join(h.cfg.Home, PeerBookFile), peers); err != nil {
		h.log.Warn("peer book not saved", "err", err)
	}
}
