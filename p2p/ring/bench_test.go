//go:build linux

package ring

import (
	"context"
	"fmt"
	"github.com/intellect-node/intellect-node/p2p"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

const arBenchProto = "/intellect/bench/stream/1.0.0"

// procCPU is the CPU time of this process (all hosts of the benchmark).
func procCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// arStreamRate measures one libp2p stream's one-way rate in bytes/s from a
// to c: total bytes in frames of frame bytes, the best of rounds; and the CPU
// seconds per byte both ends spent. With l, the sender waits for l's tokens
// before each frame (an uplink of l's rate).
func arStreamRate(b *testing.B, a, c host.Host, l *p2p.Limiter, rounds, total, frame int) (rate, cpuPerByte float64) {
	c.SetStreamHandler(arBenchProto, func(s network.Stream) {
		buf := make([]byte, frame)
		for {
			if _, _, err := p2p.ReadFrame(s, frame, buf); err != nil {
				break
			}
		}
		_, _ = s.Write([]byte{1})
		_ = s.Close()
	})
	defer c.RemoveStreamHandler(arBenchProto)
	payload := make([]byte, frame)
	best := 0.0
	cpu0 := procCPU()
	for range rounds {
		s, err := a.NewStream(context.Background(), c.ID(), arBenchProto)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for sent := 0; sent < total; sent += frame {
			if l != nil {
				if err := l.Wait(context.Background(), frame); err != nil {
					b.Fatal(err)
				}
			}
			if err := p2p.WriteFrame(s, arMsgChunk, payload); err != nil {
				b.Fatal(err)
			}
		}
		_ = s.CloseWrite()
		if _, err := io.ReadFull(s, make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		best = max(best, float64(total)/time.Since(start).Seconds())
		_ = s.Close()
	}
	return best, (procCPU() - cpu0).Seconds() / float64(rounds*total)
}

// BenchmarkAllReduceLoopback runs the all-reduce between 4 real libp2p hosts
// (TCP + TLS + yamux on 127.0.0.1) and compares its algorithm bandwidth,
// fp32 vector bytes / time, with one libp2p stream's rate measured in the
// same run (x-stream). A ring member sends 2(k−1)/k of the int8 vector, so
// with int8 the ring moves 1.5/4 of the fp32 bytes per member at k = 4. On a
// shared machine wall time mostly measures the wait for a core, so it also
// reports the CPU seconds per all-reduce and cpu-x-stream, the same ratio
// per CPU-second spent.
func BenchmarkAllReduceLoopback(b *testing.B) {
	const k, n = 4, 4 << 20 // 16 MiB of fp32 per member
	hs, svcs, ids := arRing(b, k, ServiceConfig{IOTimeout: time.Minute})
	stream, streamCPU := arStreamRate(b, hs[0], hs[1], nil, 3, 64<<20, 64<<10)
	b.Logf("one libp2p stream: %.0f MiB/s, %.2f CPU s/GiB (both ends)", stream/(1<<20), streamCPU*(1<<30))
	in := arVecs(5, k, n)
	w := []float32{1, 1, 1, 1}
	// The fp32 all-reduce of the same inputs, the reference of rel-err-vs-fp32.
	fp32 := arClone(in)
	arBenchRound(b, svcs, ids, "bench-ref", fp32, w, collective.AllReduceConfig{Shards: 4, Codec: collective.CodecFP32}, nil)
	for _, bc := range []struct {
		shards int
		codec  collective.Codec
	}{{1, collective.CodecInt8}, {2, collective.CodecInt8}, {4, collective.CodecInt8}, {8, collective.CodecInt8}, {4, collective.CodecFP32}} {
		b.Run(fmt.Sprintf("k=%d/S=%d/%v", k, bc.shards, bc.codec), func(b *testing.B) {
			cfg := collective.AllReduceConfig{Shards: bc.shards, Codec: bc.codec}
			// One untimed round on the original inputs: its relative L2
			// distance from the fp32 all-reduce.
			out := arClone(in)
			arBenchRound(b, svcs, ids, fmt.Sprintf("bench-err-%d-%v", bc.shards, bc.codec), out, w, cfg, nil)
			relErr := arRelErr(out[0], fp32[:1], []float32{1})
			b.SetBytes(4 * n)
			round := 0
			cpu0 := procCPU()
			for b.Loop() {
				round++
				arBenchRound(b, svcs, ids, fmt.Sprintf("bench-%d-%v-%d", bc.shards, bc.codec, round), out, w, cfg, nil)
			}
			per := b.Elapsed().Seconds() / float64(b.N)
			cpu := (procCPU() - cpu0).Seconds() / float64(b.N)
			algbw := 4 * n / per
			b.ReportMetric(algbw/(1<<20), "algbw-MiB/s")
			b.ReportMetric(algbw/stream, "x-stream")
			b.ReportMetric(relErr, "rel-err-vs-fp32")
			b.ReportMetric(cpu, "cpu-s/op")
			// CPU the wire bytes alone cost at the stream's CPU price.
			var wire float64 = 2 * 3 * 4 * n / 4 // k=4: 4 members × 1.5 × int8 bytes
			if bc.codec == collective.CodecFP32 {
				wire *= 4
			}
			b.ReportMetric(wire*streamCPU/cpu, "wire-cpu-share")
			// Contention-robust: fp32 bytes reduced per CPU-second of the
			// ring vs bytes carried per CPU-second of the stream.
			b.ReportMetric((4*n/cpu)*streamCPU, "cpu-x-stream")
		})
	}
}

// arClone copies every member's vector.
func arClone(v [][]float32) [][]float32 {
	c := make([][]float32, len(v))
	for i := range v {
		c[i] = append([]float32(nil), v[i]...)
	}
	return c
}

// arBenchRound runs one all-reduce on every member and returns the bytes each
// sent; with links, member i sends through links[i].
func arBenchRound(b *testing.B, svcs []*Service, ids []peer.ID, id string, in [][]float32, w []float32,
	cfg collective.AllReduceConfig, links []*p2p.Limiter) []int64 {
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	sent := make([]int64, len(ids))
	for i := range ids {
		wg.Go(func() {
			if links == nil {
				var rs Stats
				_, rs, errs[i] = AllReduce(context.Background(), svcs[i], Spec{ID: id, Step: 1, Members: ids, Self: i}, w, collective.Buffers{Dst: in[i]}, cfg)
				sent[i] = rs.BytesSent
				return
			}
			t, err := svcs[i].Open(Spec{ID: id, Step: 1, Members: ids, Self: i, Shards: cfg.Shards})
			if err != nil {
				errs[i] = err
				return
			}
			defer t.Close()
			_, errs[i] = collective.AllReduce(context.Background(), linkedTransport{t, links[i]}, i, w, in[i], nil, cfg)
			sent[i] = t.Stats().BytesSent
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return sent
}

// linkedTransport sends through a token bucket: this member's uplink.
type linkedTransport struct {
	*Transport
	l *p2p.Limiter
}

func (t linkedTransport) Send(ctx context.Context, shard int, msg []byte) error {
	if err := t.l.Wait(ctx, len(msg)); err != nil {
		return err
	}
	return t.Transport.Send(ctx, shard, msg)
}

// arLinkRate and arLinkBurst are the emulated per-member uplink of
// BenchmarkAllReduceLinks: slow enough that the 2 cores of this machine are
// not the bottleneck of 4 members (≈ 0.12 CPU-s per all-reduce of 16 MiB).
// AR_LINK_MIB=R sets R MiB/s instead (docs/allreduce.md has 32, 64, 128).
var arLinkRate = func() int64 {
	if v, err := strconv.Atoi(os.Getenv("AR_LINK_MIB")); err == nil && v > 0 {
		return int64(v) << 20
	}
	return 32 << 20
}()

const arLinkBurst = 256 << 10

// BenchmarkAllReduceLinks is BenchmarkAllReduceLoopback with the situation
// the all-reduce is built for: one member per machine, each behind its own
// link. Every member's sends go through its own token bucket of arLinkRate
// bytes/s (the mechanism of --max-send-rate), and the baseline is one libp2p
// stream through an identical bucket, in the same run. It reports algbw
// (fp32 vector bytes / time) against that stream (x-stream) and link-busy,
// the busiest member's wire bytes / (time × rate): how close the ring runs
// to its links, whatever the codec.
func BenchmarkAllReduceLinks(b *testing.B) {
	const k, n = 4, 4 << 20 // 16 MiB of fp32 per member
	hs, svcs, ids := arRing(b, k, ServiceConfig{IOTimeout: time.Minute})
	stream, _ := arStreamRate(b, hs[0], hs[1], p2p.NewLimiter(arLinkRate, arLinkBurst), 1, 32<<20, 64<<10)
	b.Logf("one libp2p stream through a %d MiB/s bucket: %.1f MiB/s", arLinkRate>>20, stream/(1<<20))
	links := make([]*p2p.Limiter, k)
	for i := range links {
		links[i] = p2p.NewLimiter(arLinkRate, arLinkBurst)
	}
	in := arVecs(6, k, n)
	for _, codec := range []collective.Codec{collective.CodecInt8, collective.CodecFP32} {
		b.Run(fmt.Sprintf("k=%d/S=4/%v", k, codec), func(b *testing.B) {
			cfg := collective.AllReduceConfig{Shards: 4, Codec: codec}
			w := []float32{1, 1, 1, 1}
			b.SetBytes(4 * n)
			var busiest int64
			round := 0
			for b.Loop() {
				round++
				sent := arBenchRound(b, svcs, ids, fmt.Sprintf("links-%v-%d", codec, round), in, w, cfg, links)
				busiest += slices.Max(sent)
			}
			per := b.Elapsed().Seconds() / float64(b.N)
			algbw := 4 * n / per
			b.ReportMetric(algbw/(1<<20), "algbw-MiB/s")
			b.ReportMetric(algbw/stream, "x-stream")
			b.ReportMetric(float64(busiest)/float64(b.N)/(per*float64(arLinkRate)), "link-busy")
		})
	}
}
