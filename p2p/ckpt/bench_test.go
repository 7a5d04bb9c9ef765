package ckpt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
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
// join/stream (ratio of wall times), join-cpu/stream-cpu (ratio of the CPU
// time of all hosts, which all live in this process), extra-ms (join − 1.2 ×
// stream), both rates and cold/warm-join (the first join, when donors still
// hash their snapshot, against the average).
func BenchmarkCkptJoin(b *testing.B) {
	snap := ckptTestSnapshot(5, 64<<20, DefaultChunkSize, 21)
	j := ckptHost(b)
	var donors []host.Host
	for range 3 {
		h, _ := ckptServe(b, snap, ServeConfig{Rate: -1})
		ckptServeRaw(h, snap.Data)
		donors = append(donors, h)
	}
	ids := ckptConnect(b, j, donors...)
	buf := make([]byte, len(snap.Data))
	fetch := func() {
		if _, _, err := ckptFetch(b, j, ids, snap, FetchConfig{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	fetch() // donors hash their snapshot on the first manifest request
	cold := time.Since(start)
	var stream, join, streamCPU, joinCPU time.Duration
	b.SetBytes(int64(len(snap.Data)))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start, c := time.Now(), ckptCPUTime()
		ckptReadRaw(b, j, ids[i%3], buf)
		stream += time.Since(start)
		streamCPU += ckptCPUTime() - c
		start, c = time.Now(), ckptCPUTime()
		fetch()
		join += time.Since(start)
		joinCPU += ckptCPUTime() - c
	}
	b.ReportMetric(float64(joinCPU)/float64(streamCPU), "join-cpu/stream-cpu")
	n := float64(b.N)
	b.ReportMetric(float64(join)/float64(stream), "join/stream")
	b.ReportMetric((join.Seconds()-1.2*stream.Seconds())/n*1e3, "extra-ms")
	b.ReportMetric(float64(len(snap.Data))/(stream.Seconds()/n)/(1<<20), "stream-MiB/s")
	b.ReportMetric(float64(len(snap.Data))/(join.Seconds()/n)/(1<<20), "join-MiB/s")
	b.ReportMetric(float64(cold)/float64(join/time.Duration(b.N)), "cold/warm-join")
}

// ckptCompute is the donor's stand-in for training: a dependent float32
// multiply-add loop over an L1-resident array on one locked goroutine, run
// for d. It returns passes per second and the CPU time its thread got.
func ckptCompute(d time.Duration) (rate float64, cpu time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := ckptThreadCPUTime()
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
	return float64(passes) / time.Since(start).Seconds(), ckptThreadCPUTime() - c0
}

// ckptThreadCPUTime is the CPU time of the calling OS thread.
func ckptThreadCPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCkptDonorCompute measures a donor's compute rate (one locked
// goroutine, the stand-in for training) while a joiner in another process
// downloads from it nonstop at the donor's rate limit, against the same
// compute while the donor has nothing to serve, in alternating windows of
// the same run. Reported: compute-ratio (the median over window pairs of
// serving / idle; -min the worst pair), the served rate, and
// serve-cpu-s/GiB: the donor process's CPU time outside the compute thread,
// serving minus idle, per GiB served (unlike the ratio, this does not
// depend on what else the machine runs). The joiner runs in a
// child process (this test binary, TestCkptBenchJoinerProcess) so that its
// allocations and garbage collection are not charged to the donor; on this
// 2-core machine it still competes with the donor for the cores.
func BenchmarkCkptDonorCompute(b *testing.B) {
	for _, rate := range []int64{16 << 20, 32 << 20, 64 << 20, 128 << 20} {
		b.Run(fmt.Sprintf("rate=%dMiB-s", rate>>20), func(b *testing.B) { ckptBenchDonorCompute(b, rate) })
	}
}

func ckptBenchDonorCompute(b *testing.B, rate int64) {
	const window = 150 * time.Millisecond
	snap := ckptTestSnapshot(5, 16<<20, DefaultChunkSize, 22)
	var serving atomic.Bool
	h := ckptHost(b)
	srv, err := Serve(h, func() *Snapshot {
		if serving.Load() {
			return snap
		}
		return nil
	}, ServeConfig{Rate: rate, Burst: 256 << 10})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	stop := ckptStartJoinerProcess(b, h, snap)
	defer stop()
	var ratios []float64
	var served int64
	var busyTime, idleCPU, busyCPU time.Duration
	for b.Loop() { // one idle window, then one serving window
		c := ckptCPUTime()
		idle, tc := ckptCompute(window)
		idleCPU += ckptCPUTime() - c - tc
		serving.Store(true)
		before, start, c := srv.Stats().BytesServed, time.Now(), ckptCPUTime()
		busy, tc := ckptCompute(window)
		busyCPU += ckptCPUTime() - c - tc
		served += srv.Stats().BytesServed - before
		busyTime += time.Since(start)
		serving.Store(false)
		ratios = append(ratios, busy/idle)
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "compute-ratio")
	b.ReportMetric(ratios[0], "compute-ratio-min")
	b.ReportMetric(float64(served)/busyTime.Seconds()/(1<<20), "served-MiB/s")
	if served > 0 {
		b.ReportMetric((busyCPU-idleCPU).Seconds()/(float64(served)/(1<<30)), "serve-cpu-s/GiB")
	}
}

// ckptCPUTime is the user + system CPU time of this process so far.
func ckptCPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Environment of the joiner child process of BenchmarkCkptDonorCompute.
const (
	ckptEnvJoinAddr = "CKPT_BENCH_JOIN_ADDR" // donor multiaddr with /p2p/ id
	ckptEnvJoinStep = "CKPT_BENCH_JOIN_STEP"
	ckptEnvJoinHash = "CKPT_BENCH_JOIN_HASH"
)

// ckptStartJoinerProcess starts this test binary as a joiner fetching snap
// from h over and over, and returns a function that stops it.
func ckptStartJoinerProcess(b *testing.B, h host.Host, snap *Snapshot) func() {
	addr := fmt.Sprintf("%s/p2p/%s", h.Addrs()[0], h.ID())
	cmd := exec.Command(os.Args[0], "-test.run=^TestCkptBenchJoinerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), ckptEnvJoinAddr+"="+addr,
		ckptEnvJoinStep+"="+strconv.FormatUint(snap.Step, 10), ckptEnvJoinHash+"="+snap.Hash)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// TestCkptBenchJoinerProcess is the joiner of BenchmarkCkptDonorCompute; it
// does nothing unless started by it. It fetches until killed, probing every
// 20 ms while the donor has nothing to serve.
func TestCkptBenchJoinerProcess(t *testing.T) {
	addr := os.Getenv(ckptEnvJoinAddr)
	if addr == "" {
		t.Skip("helper process of BenchmarkCkptDonorCompute")
	}
	step, _ := strconv.ParseUint(os.Getenv(ckptEnvJoinStep), 10, 64)
	want := FetchSpec{Step: step, Hash: os.Getenv(ckptEnvJoinHash)}
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		t.Fatal(err)
	}
	j := ckptHost(t)
	if err := j.Connect(context.Background(), *ai); err != nil {
		t.Fatal(err)
	}
	quiet := FetchConfig{Logger: slog.New(slog.DiscardHandler), BusyRetries: -1}
	for {
		if _, _, err := Fetch(context.Background(), j, []peer.ID{ai.ID}, want, quiet, nil); err != nil {
			time.Sleep(20 * time.Millisecond) // the donor has nothing to serve right now
		}
	}
}
