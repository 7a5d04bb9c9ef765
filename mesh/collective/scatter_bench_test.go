package collective

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkScatterVsRing times one all-reduce of every member of an
// in-memory group, the ring (AllReduceInto, int8) and the robust direct
// scatter (ScatterAllReduce) interleaved in the same loop, with the default
// shards and chunks, and reports both and their ratios: wall time per
// all-reduce and bytes sent per member.
func BenchmarkScatterVsRing(b *testing.B) {
	for _, k := range []int{4, 8} {
		for _, n := range []int{1 << 20, 1 << 24} {
			b.Run(fmt.Sprintf("k=%d/n=%dM", k, n>>20), func(b *testing.B) {
				benchScatterVsRing(b, k, n, 0)
			})
		}
	}
}

// BenchmarkScatterVsRingLink is BenchmarkScatterVsRing with every member's
// sends paced at R MiB/s (SCATTER_LINK_MIB, default 8: low enough that the
// links, not the 2 shared cores running every member, are the bottleneck),
// as on a WAN.
func BenchmarkScatterVsRingLink(b *testing.B) {
	mib := 8.0
	if v, err := strconv.ParseFloat(os.Getenv("SCATTER_LINK_MIB"), 64); err == nil && v > 0 {
		mib = v
	}
	for _, k := range []int{4, 8} {
		const n = 4 << 20
		b.Run(fmt.Sprintf("k=%d/n=%dM/R=%gMiB", k, n>>20, mib), func(b *testing.B) {
			benchScatterVsRing(b, k, n, mib*(1<<20))
		})
	}
}

// pacer spaces one member's sends at rate bytes per second (no burst).
type pacer struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func (p *pacer) wait(ctx context.Context, n int) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	d := p.next.Sub(now)
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newPacers(k int, rate float64) []*pacer {
	ps := make([]*pacer, k)
	if rate > 0 {
		for i := range ps {
			ps[i] = &pacer{rate: rate}
		}
	}
	return ps
}

type pacedRing struct {
	*MemTransport
	p *pacer
}

func (r pacedRing) Send(ctx context.Context, shard int, msg []byte) error {
	if err := r.p.wait(ctx, len(msg)); err != nil {
		return err
	}
	return r.MemTransport.Send(ctx, shard, msg)
}

type pacedMesh struct {
	*MemMesh
	p *pacer
}

func (m pacedMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	if err := m.p.wait(ctx, len(msg)); err != nil {
		return err
	}
	return m.MemMesh.Send(ctx, to, lane, msg)
}

func benchScatterVsRing(b *testing.B, k, n int, rate float64) {
	xs := benchVecs(k, n)
	w := honestWeights(k)
	dst := make([][]float32, k)
	for i := range dst {
		dst[i] = make([]float32, n)
	}
	ctx := context.Background()
	scfg := ScatterConfig{Robust: RobustConfig{MaxWeight: testH}}
	var ringT, scatT time.Duration
	var ringB, scatB int64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		ringB = benchRing(b, ctx, xs, dst, w, newPacers(k, rate))
		t1 := time.Now()
		scatB = benchScatter(b, ctx, xs, dst, w, scfg, newPacers(k, rate))
		scatT += time.Since(t1)
		ringT += t1.Sub(t0)
	}
	b.ReportMetric(float64(ringT.Nanoseconds())/float64(b.N), "ring-ns/op")
	b.ReportMetric(float64(scatT.Nanoseconds())/float64(b.N), "scatter-ns/op")
	b.ReportMetric(float64(scatT)/float64(ringT), "x-time")
	b.ReportMetric(float64(ringB), "ring-B/member")
	b.ReportMetric(float64(scatB), "scatter-B/member")
	b.ReportMetric(float64(scatB)/float64(ringB), "x-bytes")
}

// benchVecs draws k pseudo-gradients quickly (one noise pattern per member,
// shifted), enough for timing.
func benchVecs(k, n int) [][]float32 {
	rng := rand.New(rand.NewPCG(1, 2))
	base, _ := pseudoGrads(rng, 1, n)
	xs := make([][]float32, k)
	for i := range xs {
		xs[i] = make([]float32, n)
		for t := range xs[i] {
			xs[i][t] = base[0][(t+i*7919)%n] + 0.5*base[0][t]
		}
	}
	return xs
}

// benchRing runs the ring on every member; it returns member 0's bytes sent.
func benchRing(b *testing.B, ctx context.Context, xs, dst [][]float32, w []float32, ps []*pacer) int64 {
	ts := NewMemRing(len(xs), DefaultShards)
	st := make([]Stats, len(xs))
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i := range xs {
		wg.Go(func() {
			st[i], errs[i] = AllReduceInto(ctx, pacedRing{ts[i], ps[i]}, i, w, Buffers{Src: xs[i], Dst: dst[i]}, AllReduceConfig{})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return st[0].BytesSent
}

// benchScatter runs the scatter on every member; it returns member 0's
// bytes sent.
func benchScatter(b *testing.B, ctx context.Context, xs, dst [][]float32, w []float32, cfg ScatterConfig, ps []*pacer) int64 {
	ts := NewMemMesh(len(xs), 2*DefaultShards)
	res := make([]ScatterResult, len(xs))
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i := range xs {
		wg.Go(func() {
			res[i], errs[i] = ScatterAllReduce(ctx, pacedMesh{ts[i], ps[i]}, i, w, Buffers{Src: xs[i], Dst: dst[i]}, cfg)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return res[0].Stats.BytesSent
}

// BenchmarkSentNorm prices ScatterResult.SentNorms: per chunk of the
// default size, a member's MessageNorm of what it sent against the int8
// encoding of that chunk it does anyway, interleaved in one loop; it
// reports both and their ratio.
func BenchmarkSentNorm(b *testing.B) {
	n := DefaultChunkElems
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	msg := make([]byte, CodecInt8.msgSize(n))
	putHeader(msg, chunkHeader{codec: CodecInt8, n: uint32(n)})
	var qz quantizer
	var tab [256]float32
	var enc, nrm time.Duration
	var sink float32
	for b.Loop() {
		t0 := time.Now()
		if err := qz.encodeInt8Scanned(msg[chunkHeaderSize:], &tab, x, prepScan(x, nil, 1)); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		v, _ := MessageNorm(msg)
		sink += v
		enc, nrm = enc+t1.Sub(t0), nrm+time.Since(t1)
	}
	if sink < 0 {
		b.Fatal("negative norm")
	}
	b.ReportMetric(float64(enc.Nanoseconds())/float64(b.N)/float64(n), "encode-ns/value")
	b.ReportMetric(float64(nrm.Nanoseconds())/float64(b.N)/float64(n), "norm-ns/value")
	b.ReportMetric(float64(nrm)/float64(enc), "norm/encode")
}
