package ckpt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// ckptBenchDoneProtocol tells a WAN donor that the joiner has finished.
const ckptBenchDoneProtocol = "/intellect/ckpt-bench/done/1.0.0"

// TestCkptWANNode is one host of the emulated-WAN join measurement; it runs
// only under cmd/wanbench (needs root), on every host of a profile:
//
//	go test -c -o /tmp/ckpt.test ./p2p/
//	CKPT_WAN=1 wanbench run -profile usa -rate-scale 0.16 -- /tmp/ckpt.test -test.run '^TestCkptWANNode$' -test.v
//
// Host 0 is the joiner, the others donors of the same 64 MiB snapshot. The
// joiner measures, in the same run, moving the snapshot's bytes over one
// libp2p stream from donor 1, fetching it from donor 1 alone, and fetching
// it from all donors, and prints the ratios.
func TestCkptWANNode(t *testing.T) {
	if os.Getenv("CKPT_WAN") == "" {
		t.Skip("one host of the emulated-WAN join measurement; run under wanbench (see the doc comment)")
	}
	idx, _ := strconv.Atoi(os.Getenv("WAN_INDEX"))
	addrs := strings.Split(os.Getenv("WAN_ADDRS"), ",")
	snap := ckptTestSnapshot(5, 64<<20, DefaultChunkSize, 77)
	h := ckptWANHost(t, idx, addrs[idx])
	if idx > 0 {
		ckptWANDonor(t, h, snap)
		return
	}
	var ids []peer.ID
	for i := 1; i < len(addrs); i++ {
		ids = append(ids, ckptWANDial(t, h, i, addrs[i]))
	}
	defer func() {
		for _, id := range ids {
			if s, err := h.NewStream(context.Background(), id, ckptBenchDoneProtocol); err == nil {
				s.Close()
			}
		}
	}()
	ckptWANJoiner(t, h, ids, snap)
}

// ckptWANKey is host i's fixed identity, so peers know each other's ids.
func ckptWANKey(t *testing.T, i int) crypto.PrivKey {
	seed := sha256.Sum256([]byte("ckpt-wan-" + strconv.Itoa(i)))
	k, _, err := crypto.GenerateEd25519Key(bytes.NewReader(seed[:]))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ckptWANHost starts host i listening on addr:4001.
func ckptWANHost(t *testing.T, i int, addr string) host.Host {
	h, err := libp2p.New(libp2p.Identity(ckptWANKey(t, i)),
		libp2p.NoTransports, libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(libp2ptls.ID, libp2ptls.New), libp2p.DisableRelay(),
		libp2p.ListenAddrStrings("/ip4/"+addr+"/tcp/4001"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// ckptWANDial connects to host i, retrying while it starts.
func ckptWANDial(t *testing.T, h host.Host, i int, addr string) peer.ID {
	id, err := peer.IDFromPrivateKey(ckptWANKey(t, i))
	if err != nil {
		t.Fatal(err)
	}
	ai := peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/" + addr + "/tcp/4001")}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := h.Connect(context.Background(), ai)
		if err == nil {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect to host %d: %v", i, err)
		}
		time.Sleep(200 * time.Millisecond) // the donor process is still starting
	}
}

// ckptWANDonor serves snap (checkpoint protocol at the default rate limit,
// and the raw baseline) until the joiner says it is done.
func ckptWANDonor(t *testing.T, h host.Host, snap *Snapshot) {
	srv, err := Serve(h, func() *Snapshot { return snap }, ServeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ckptServeRaw(h, snap.Data)
	done := make(chan struct{})
	h.SetStreamHandler(ckptBenchDoneProtocol, func(s network.Stream) { s.Close(); close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		t.Fatal("the joiner never finished")
	}
	t.Logf("donor served %+v", srv.Stats())
}

// ckptWANJoiner measures the three transfers, alternating, three rounds.
func ckptWANJoiner(t *testing.T, h host.Host, ids []peer.ID, snap *Snapshot) {
	buf := make([]byte, len(snap.Data))
	timeIt := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	raw := func() error {
		s, err := h.NewStream(context.Background(), ids[0], ckptBenchRawProtocol)
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = io.ReadFull(s, buf)
		return err
	}
	fetch := func(donors []peer.ID) func() error {
		return func() error {
			_, _, err := Fetch(context.Background(), h, donors, FetchSpec{Step: snap.Step, Hash: snap.Hash}, FetchConfig{}, nil)
			return err
		}
	}
	timeIt(raw) // warm the connection up (the first transfer on a new connection is slow)
	var stream, one, all time.Duration
	const rounds = 3
	for range rounds {
		stream += timeIt(raw)
		one += timeIt(fetch(ids[:1]))
		all += timeIt(fetch(ids))
	}
	mib := float64(len(snap.Data)) / (1 << 20)
	per := func(d time.Duration) float64 { return d.Seconds() / rounds }
	fmt.Printf("ckpt WAN: 64 MiB; one stream from donor 1: %.2f s (%.1f MiB/s); join from donor 1 alone: %.2f s (%.2fx); join from %d donors: %.2f s (%.2fx stream, %.1f MiB/s)\n",
		per(stream), mib/per(stream), per(one), float64(one)/float64(stream), len(ids), per(all), float64(all)/float64(stream), mib/per(all))
}
