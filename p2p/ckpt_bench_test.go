package p2p

import (
	"context"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ckptBenchRawProtocol moves raw bytes over one stream: the baseline.
const ckptBenchRawProtocol = "/intellect/ckpt-bench/raw/1.0.0"

// ckptServeRaw makes h answer every stream of the raw protocol with data.
func ckptServeRaw(h host.Host, data []byte) {
	h.SetStreamHandler(ckptBenchRawProtocol, func(s network.Stream) {
		defer s.Close()
		for off := 0; off < len(data); off += 1 << 20 {
			if _, err := s.Write(data[off:min(off+1<<20, len(data))]); err != nil {
				s.Reset()
				return
			}
		}
	})
}

// ckptReadRaw reads n bytes over one new raw stream into buf.
func ckptReadRaw(b *testing.B, j host.Host, from peer.ID, buf []byte) {
	s, err := j.NewStream(context.Background(), from, ckptBenchRawProtocol)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := io.ReadFull(s, buf); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCkptJoin compares joining (a 64 MiB snapshot fetched from 3
// donors, every chunk and θ₀ verified) with moving the same bytes over one
// libp2p stream between the same hosts, measured in the same run. Reported:
// join/stream (ratio of times) and extra-ms (join − 1.2 × stream).
func BenchmarkCkptJoin(b *testing.B) {
	snap := ckptTestSnapshot(5, 64<<20, CkptDefaultChunkSize, 21)
	j := ckptHost(b)
	var donors []host.Host
	for range 3 {
		h, _ := ckptServe(b, snap, CkptServeConfig{Rate: -1})
		ckptServeRaw(h, snap.Data)
		donors = append(donors, h)
	}
	ids := ckptConnect(b, j, donors...)
	buf := make([]byte, len(snap.Data))
	fetch := func() {
		if _, _, err := ckptFetch(b, j, ids, snap, CkptFetchConfig{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	fetch() // donors hash their snapshot on the first manifest request
	cold := time.Since(start)
	var stream, join time.Duration
	b.SetBytes(int64(len(snap.Data)))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		ckptReadRaw(b, j, ids[i%3], buf)
		stream += time.Since(start)
		start = time.Now()
		fetch()
		join += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(join)/float64(stream), "join/stream")
	b.ReportMetric((join.Seconds()-1.2*stream.Seconds())/n*1e3, "extra-ms")
	b.ReportMetric(float64(len(snap.Data))/(stream.Seconds()/n)/(1<<20), "stream-MiB/s")
	b.ReportMetric(float64(len(snap.Data))/(join.Seconds()/n)/(1<<20), "join-MiB/s")
	b.ReportMetric(float64(cold)/float64(join/time.Duration(b.N)), "cold/warm-join")
}

// ckptCompute is the donor's stand-in for training: a dependent float32
// multiply-add loop over an L1-resident array on one locked goroutine, run
// for d. It returns passes per second.
func ckptCompute(d time.Duration) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var x [1024]float32
	for i := range x {
		x[i] = float32(i)
	}
	passes := 0
	start := time.Now()
	for time.Since(start) < d {
		for k := 0; k < 64; k++ {
			for i := range x {
				x[i] = x[i]*0.9999 + 0.0001
			}
		}
		passes++
	}
	if x[0] == 42 { // keep the loop alive
		passes++
	}
	return float64(passes) / time.Since(start).Seconds()
}

// BenchmarkCkptDonorCompute measures a donor's compute rate while a joiner
// downloads from it nonstop at the donor's rate limit, against the same
// compute with no transfer, in alternating windows of the same run.
// Reported: compute-ratio (serving / idle) and the served rate. Joiner and
// donor share this machine's cores.
func BenchmarkCkptDonorCompute(b *testing.B) {
	for _, rate := range []int64{32 << 20, 64 << 20, 128 << 20} {
		b.Run("rate="+itoaMiB(rate), func(b *testing.B) { ckptBenchDonorCompute(b, rate) })
	}
}

// itoaMiB writes a byte rate as "<n>MiB/s" without fmt.
func itoaMiB(r int64) string {
	n := r >> 20
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s + "MiB-s"
}

func ckptBenchDonorCompute(b *testing.B, rate int64) {
	const window = 500 * time.Millisecond
	snap := ckptTestSnapshot(5, 16<<20, CkptDefaultChunkSize, 22)
	h, srv := ckptServe(b, snap, CkptServeConfig{Rate: rate})
	j := ckptHost(b)
	ids := ckptConnect(b, j, h)
	var idle, busy float64
	var served int64
	var busyTime time.Duration
	for b.Loop() {
		idle += ckptCompute(window)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			for ctx.Err() == nil {
				FetchCheckpoint(ctx, j, ids, CkptFetchSpec{snap.Step, snap.Hash}, CkptFetchConfig{}, nil)
			}
		})
		before, start := srv.Stats().BytesServed, time.Now()
		busy += ckptCompute(window)
		served += srv.Stats().BytesServed - before
		busyTime += time.Since(start)
		cancel()
		wg.Wait()
	}
	b.ReportMetric(busy/idle, "compute-ratio")
	b.ReportMetric(float64(served)/busyTime.Seconds()/(1<<20), "served-MiB/s")
}
