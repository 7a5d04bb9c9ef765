package p2p

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	noise "github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

const benchProto = protocol.ID("/intellect/bench-sink/1.0.0")

// benchTransfer is the size of one transfer in the throughput benchmark.
const benchTransfer = 32 << 20

// sinkHandler reads a stream to its end and acknowledges with one byte.
func sinkHandler(s network.Stream) {
	defer s.Close()
	if _, err := io.Copy(io.Discard, s); err != nil {
		s.Reset()
		return
	}
	s.Write([]byte{1})
}

// sendAll writes n zero bytes, half-closes, and waits for the ack.
func sendAll(w io.WriteCloser, r io.Reader, closeWrite func() error, n int, buf []byte) error {
	for left := n; left > 0; {
		k := min(left, len(buf))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		left -= k
	}
	if err := closeWrite(); err != nil {
		return err
	}
	_, err := io.ReadFull(r, make([]byte, 1))
	return err
}

// rawTCPTransfer measures the same transfer over a plain loopback TCP socket:
// the baseline the libp2p figures are divided by.
func rawTCPTransfer(b *testing.B, n int, buf []byte) time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.Discard, c)
		c.Write([]byte{1})
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if err := sendAll(c, c, c.(*net.TCPConn).CloseWrite, n, buf); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func libp2pTransfer(b *testing.B, from host.Host, to peer.ID, n int, buf []byte) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	s, err := from.NewStream(ctx, to, benchProto)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := sendAll(s, s, s.CloseWrite, n, buf); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkStreamThroughput sends 32 MiB one way over a warm connection to a
// Host, and the same over raw loopback TCP in the same run; it reports MiB/s
// and the ratio to raw TCP. "tls" is what two of our nodes negotiate; "noise"
// is a Noise-only peer dialing our Host, for comparison.
//
//	go test ./p2p/ -run '^$' -bench StreamThroughput -benchtime 10x
func BenchmarkStreamThroughput(b *testing.B) {
	noiseOnly := func(b *testing.B) host.Host {
		h, err := libp2p.New(
			libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
			libp2p.Transport(tcp.NewTCPTransport),
			libp2p.Security(noise.ID, noise.New),
		)
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		sender func(b *testing.B) host.Host
	}{
		{"tls", func(b *testing.B) host.Host { return startHost(b, testConfig(b, "bench")).Libp2p() }},
		{"noise", noiseOnly},
	} {
		b.Run(tc.name, func(b *testing.B) {
			recv := startHost(b, testConfig(b, "bench"))
			recv.Libp2p().SetStreamHandler(benchProto, sinkHandler)
			send := tc.sender(b)
			defer send.Close()
			if err := send.Connect(context.Background(), peer.AddrInfo{ID: recv.ID(), Addrs: recv.Libp2p().Addrs()}); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 256<<10)
			libp2pTransfer(b, send, recv.ID(), benchTransfer, buf) // warm up windows
			var p2p, raw time.Duration
			b.SetBytes(benchTransfer)
			b.ResetTimer()
			for range b.N {
				p2p += libp2pTransfer(b, send, recv.ID(), benchTransfer, buf)
				b.StopTimer()
				raw += rawTCPTransfer(b, benchTransfer, buf)
				b.StartTimer()
			}
			mib := float64(b.N) * benchTransfer / (1 << 20)
			b.ReportMetric(mib/p2p.Seconds(), "MiB/s")
			b.ReportMetric(mib/raw.Seconds(), "rawTCP-MiB/s")
			b.ReportMetric(raw.Seconds()/p2p.Seconds(), "x_rawTCP")
		})
	}
}

// BenchmarkGossipLatency measures publish-to-delivery time of a 1 KiB gossip
// message between two hosts, and in the same run the one-way time of 1 KiB
// written on an open libp2p stream between them; it reports the ratio.
//
//	go test ./p2p/ -run '^$' -bench GossipLatency -benchtime 200x
func BenchmarkGossipLatency(b *testing.B) {
	hosts := startNetwork(b, "bench-gossip", 2)
	a, c := hosts[0], hosts[1]
	eventually(b, meshTimeout, "full mesh", func() bool { return fullMesh(hosts) })

	got := make(chan struct{}, 1)
	c.Libp2p().SetStreamHandler(benchProto, func(s network.Stream) {
		defer s.Close()
		buf := make([]byte, 1024)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			got <- struct{}{}
		}
	})
	s, err := a.Libp2p().NewStream(context.Background(), c.ID(), benchProto)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	msg := bytes.Repeat([]byte{'g'}, 1024)
	var gossip, stream time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := a.Publish(context.Background(), msg); err != nil {
			b.Fatal(err)
		}
		<-c.Messages()
		gossip += time.Since(start)

		b.StopTimer()
		start = time.Now()
		if _, err := s.Write(msg); err != nil {
			b.Fatal(err)
		}
		<-got
		stream += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(float64(gossip.Microseconds())/float64(b.N), "us/msg")
	b.ReportMetric(float64(stream.Microseconds())/float64(b.N), "stream-us/msg")
	b.ReportMetric(gossip.Seconds()/stream.Seconds(), "x_stream")
}

// BenchmarkJoin starts 8 hosts that know only the first, and measures the
// time until all are connected and on the topic, then the time a newcomer
// bootstrapping from the last host takes to reach all of them. The baseline
// in the same run is the time spent in New+Start of the 8 hosts alone.
//
//	go test ./p2p/ -run '^$' -bench Join -benchtime 5x
func BenchmarkJoin(b *testing.B) {
	const n = 8
	var mesh, newcomer, starts time.Duration
	for i := range b.N {
		run := fmt.Sprintf("bench-join-%d", i)
		var hosts []*Host
		t0 := time.Now()
		for k := range n {
			cfg := testConfig(b, run)
			if k > 0 {
				cfg.Bootstrap = hosts[0].Addrs()
			}
			s := time.Now()
			h := startHost(b, cfg)
			starts += time.Since(s)
			hosts = append(hosts, h)
		}
		waitMesh(b, hosts)
		mesh += time.Since(t0)

		cfg := testConfig(b, run)
		cfg.Bootstrap = hosts[n-1].Addrs()
		t1 := time.Now()
		hosts = append(hosts, startHost(b, cfg))
		waitMesh(b, hosts)
		newcomer += time.Since(t1)
		for _, h := range hosts {
			h.Close()
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(mesh), "ms-mesh8")
	b.ReportMetric(ms(newcomer), "ms-newcomer")
	b.ReportMetric(ms(starts), "ms-start8")
	b.ReportMetric(mesh.Seconds()/starts.Seconds(), "x_start8")
}

func waitMesh(b *testing.B, hosts []*Host) {
	deadline := time.Now().Add(meshTimeout)
	tick := time.NewTicker(2 * time.Millisecond) // granularity of the measurement
	defer tick.Stop()
	for !fullMesh(hosts) {
		if time.Now().After(deadline) {
			b.Fatalf("no full mesh within %v", meshTimeout)
		}
		<-tick.C
	}
}
