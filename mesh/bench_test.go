package mesh

import (
	"fmt"
	"testing"
)

// simFigures are the costs of the protocol measured in one simulation.
type simFigures struct {
	ticksPerStep  float64 // wall ticks per completed outer step
	agreeTicks    float64 // mean ticks from the last Ready to the decision
	rounds        float64 // mean round of the deciding vote
	votesPerStep  float64 // Propose messages per node per step
	bytesPerStep  float64 // all mesh bytes published per node per step
	hbBytesPerStp float64 // heartbeat bytes per node per step
}

// simMeasure runs n nodes for steps outer steps (train 10 ticks, reduce 4).
func simMeasure(tb testing.TB, n, steps int, drop float64, maxDelay int) simFigures {
	s := newSimNet(tb, 42)
	s.drop, s.dup, s.maxDelay = drop, drop/2, maxDelay
	s.addN(n, func(c *Config) { c.MinMembers = n })
	s.runUntil(100*steps, "steps", func() bool { return s.minStep() >= uint64(steps) })
	var f simFigures
	for _, d := range s.done {
		f.agreeTicks += float64(d.agree)
		f.rounds += float64(d.ring.Round)
	}
	k, ns := float64(len(s.done)), float64(n*len(s.done))
	total := 0
	for _, b := range s.sentBytes {
		total += b
	}
	f.ticksPerStep = float64(s.now) / k
	f.agreeTicks /= k
	f.rounds /= k
	f.votesPerStep = float64(s.sentMsgs[MsgPropose]) / ns
	f.bytesPerStep = float64(total) / ns
	f.hbBytesPerStp = float64(s.sentBytes[MsgHeartbeat]) / ns
	return f
}

// BenchmarkSimAgreement reports the agreement's cost on a lossy network
// (20 % loss, 10 % duplicates, 1–6 ticks delay) as ratios against a
// lossless 1-tick network measured in the same run.
func BenchmarkSimAgreement(b *testing.B) {
	for _, n := range []int{4, 16, 64} {
		base := simMeasure(b, n, 20, 0, 1)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var f simFigures
			for b.Loop() {
				f = simMeasure(b, n, 20, 0.2, 6)
			}
			b.ReportMetric(f.ticksPerStep, "ticks/step")
			b.ReportMetric(f.ticksPerStep/base.ticksPerStep, "ticks/step-vs-lossless")
			b.ReportMetric(f.agreeTicks, "agree-ticks")
			b.ReportMetric(f.agreeTicks/max(base.agreeTicks, 1e-9), "agree-ticks-vs-lossless")
			b.ReportMetric(f.rounds, "rounds")
			b.ReportMetric(f.votesPerStep, "votes/node/step")
			b.ReportMetric(f.bytesPerStep, "B/node/step")
			b.ReportMetric(f.bytesPerStep/base.bytesPerStep, "B/node/step-vs-lossless")
			b.ReportMetric(f.bytesPerStep/f.hbBytesPerStp, "B-vs-heartbeats-only")
		})
	}
}

// BenchmarkCodec measures Encode and Decode of a vote; the Decode figure is
// also reported as a ratio to Encode of the same message in the same run.
func BenchmarkCodec(b *testing.B) {
	for _, n := range []int{16, MaxMembers} {
		msg := simBigPropose(n)
		msg.Excluded = nil
		enc, err := Encode(msg)
		if err != nil {
			b.Fatal(err)
		}
		var encNs float64
		b.Run(fmt.Sprintf("encode/members=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := Encode(msg); err != nil {
					b.Fatal(err)
				}
			}
			encNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
		b.Run(fmt.Sprintf("decode/members=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
			dec := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(dec/encNs, "x-encode-time")
		})
	}
}
