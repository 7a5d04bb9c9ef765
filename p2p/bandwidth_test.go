package p2p

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// negotiationSlack bounds the multistream-select bytes of one stream.
const negotiationSlack = 128

// TestBandwidthPerProtocol sends a known number of bytes over a stream
// protocol and checks both ends count them under that protocol.
func TestBandwidthPerProtocol(t *testing.T) {
	const proto = protocol.ID("/intellect/test-bandwidth/1.0.0")
	const size = 3<<20 + 17
	hosts := startNetwork(t, "bandwidth", 2)
	a, b := hosts[0], hosts[1]
	// b dials a while starting; a learns b's addresses only from that
	// connection, so wait for it before a opens a stream to b.
	eventually(t, meshTimeout, "full mesh", func() bool { return fullMesh(hosts) })

	received := make(chan int64, 1)
	b.Libp2p().SetStreamHandler(proto, func(s network.Stream) {
		defer s.Close()
		n, err := io.Copy(io.Discard, io.LimitReader(s, size+1))
		if err != nil {
			s.Reset()
			return
		}
		s.Write([]byte{1}) // ack: everything was read, so counted
		received <- n      // after the ack's Write returned, so it is counted too
	})
	beforeA, beforeB := a.TotalBandwidth(), b.TotalBandwidth()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := a.Libp2p().NewStream(ctx, b.ID(), proto)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(s, bytes.NewReader(make([]byte, size))); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 1)
	if _, err := io.ReadFull(s, ack); err != nil {
		t.Fatalf("read ack: %v", err)
	}
	s.Close()
	if n := <-received; n != size {
		t.Fatalf("handler read %d bytes, want %d", n, size)
	}

	// Multistream negotiation (about 50 bytes each way) may be counted under
	// the protocol too, when libp2p sends it optimistically with the data.
	sent, got := a.Bandwidth()[proto], b.Bandwidth()[proto]
	within := func(v, want uint64) bool { return v >= want && v <= want+negotiationSlack }
	if !within(sent.Out, size) || !within(got.In, size) {
		t.Fatalf("protocol counters: sender out=%d, receiver in=%d, want %d (+%d) both", sent.Out, got.In, size, negotiationSlack)
	}
	if !within(sent.In, 1) || !within(got.Out, 1) {
		t.Fatalf("ack counters: sender in=%d, receiver out=%d, want 1 (+%d)", sent.In, got.Out, negotiationSlack)
	}
	if d := a.TotalBandwidth().Out - beforeA.Out; d < size {
		t.Fatalf("sender total out grew by %d < %d", d, size)
	}
	if d := b.TotalBandwidth().In - beforeB.In; d < size {
		t.Fatalf("receiver total in grew by %d < %d", d, size)
	}
	if p := a.PeerBandwidth(b.ID()); p.Out < size {
		t.Fatalf("per-peer out %d < %d", p.Out, size)
	}
	gossip := a.Bandwidth()
	var other uint64
	for p, tr := range gossip {
		if p != proto {
			other += tr.In + tr.Out
		}
	}
	if other == 0 {
		t.Fatal("no traffic counted for the DHT / gossip / identify protocols")
	}
}

func TestBandwidthCounterConcurrent(t *testing.T) {
	bw := newBandwidthCounter()
	protos := []protocol.ID{"/a", "/b", "/c"}
	peers := []peer.ID{"p1", "p2"}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				bw.LogSentMessage(3)
				bw.LogSentMessageStream(3, protos[(w+i)%3], peers[i%2])
				bw.LogRecvMessage(5)
				bw.LogRecvMessageStream(5, protos[i%3], peers[(w+i)%2])
			}
		})
	}
	wg.Wait()
	var sum Traffic
	for _, s := range bw.GetBandwidthByProtocol() {
		sum.In += uint64(s.TotalIn)
		sum.Out += uint64(s.TotalOut)
	}
	want := Traffic{In: 8 * 1000 * 5, Out: 8 * 1000 * 3}
	if sum != want || bw.total.load() != want {
		t.Fatalf("by protocol %+v, total %+v, want %+v", sum, bw.total.load(), want)
	}
	var peerSum int64
	for _, s := range bw.GetBandwidthByPeer() {
		peerSum += s.TotalIn + s.TotalOut
	}
	if peerSum != 8*1000*8 {
		t.Fatalf("by peer sum %d", peerSum)
	}
	if got := bw.GetBandwidthForProtocol("/none"); got.TotalIn != 0 || got.TotalOut != 0 {
		t.Fatalf("unknown protocol counted: %+v", got)
	}
	bw.LogSentMessage(-4) // never decreases the counters
	if bw.total.load() != want {
		t.Fatal("negative count changed the totals")
	}
}
