//go:build linux

package p2p

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh"
)

const arBenchProto = "/intellect/bench/stream/1.0.0"

// procCPU is the CPU time of this process (all hosts of the benchmark).
func procCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// arStreamRate measures one libp2p stream's one-way rate in bytes/s from a
// to c: total bytes in frames of frame bytes, best of three; and the CPU
// seconds per byte both ends spent.
func arStreamRate(b *testing.B, a, c host.Host, total, frame int) (rate, cpuPerByte float64) {
	c.SetStreamHandler(arBenchProto, func(s network.Stream) {
		buf := make([]byte, frame)
		for {
			if _, _, err := ReadFrame(s, frame, buf); err != nil {
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
	for range 3 {
		s, err := a.NewStream(context.Background(), c.ID(), arBenchProto)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for sent := 0; sent < total; sent += frame {
			if err := WriteFrame(s, arMsgChunk, payload); err != nil {
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
	return best, (procCPU() - cpu0).Seconds() / float64(3*total)
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
	hs, svcs, ids := arRing(b, k, AllReduceServiceConfig{IOTimeout: time.Minute})
	stream, streamCPU := arStreamRate(b, hs[0], hs[1], 64<<20, 64<<10)
	b.Logf("one libp2p stream: %.0f MiB/s, %.2f CPU s/GiB (both ends)", stream/(1<<20), streamCPU*(1<<30))
	in := arVecs(5, k, n)
	for _, bc := range []struct {
		shards int
		codec  mesh.Codec
	}{{1, mesh.CodecInt8}, {2, mesh.CodecInt8}, {4, mesh.CodecInt8}, {8, mesh.CodecInt8}, {4, mesh.CodecFP32}} {
		b.Run(fmt.Sprintf("k=%d/S=%d/%v", k, bc.shards, bc.codec), func(b *testing.B) {
			cfg := mesh.AllReduceConfig{Shards: bc.shards, Codec: bc.codec}
			w := []float32{1, 1, 1, 1}
			b.SetBytes(4 * n)
			round := 0
			cpu0 := procCPU()
			for b.Loop() {
				round++
				arBenchRound(b, svcs, ids, fmt.Sprintf("bench-%d-%v-%d", bc.shards, bc.codec, round), in, w, cfg)
			}
			per := b.Elapsed().Seconds() / float64(b.N)
			cpu := (procCPU() - cpu0).Seconds() / float64(b.N)
			algbw := 4 * n / per
			b.ReportMetric(algbw/(1<<20), "algbw-MiB/s")
			b.ReportMetric(algbw/stream, "x-stream")
			b.ReportMetric(cpu, "cpu-s/op")
			// CPU the wire bytes alone cost at the stream's CPU price.
			var wire float64 = 2 * 3 * 4 * n / 4 // k=4: 4 members × 1.5 × int8 bytes
			if bc.codec == mesh.CodecFP32 {
				wire *= 4
			}
			b.ReportMetric(wire*streamCPU/cpu, "wire-cpu-share")
			// Contention-robust: fp32 bytes reduced per CPU-second of the
			// ring vs bytes carried per CPU-second of the stream.
			b.ReportMetric((4*n/cpu)*streamCPU, "cpu-x-stream")
		})
	}
}

func arBenchRound(b *testing.B, svcs []*AllReduceService, ids []peer.ID, id string, in [][]float32, w []float32, cfg mesh.AllReduceConfig) {
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i := range ids {
		wg.Go(func() {
			_, _, errs[i] = AllReduce(context.Background(), svcs[i], RingSpec{ID: id, Step: 1, Members: ids, Self: i}, w, in[i], nil, cfg)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}
