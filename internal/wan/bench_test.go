package wan

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkLink sends bulk TCP through one emulated 1 Gbit/s link with a
// 100 ms round trip and reports the steady goodput as a ratio to the link's
// ideal TCP goodput and to the emulator's capacity (no delay, no rate limit)
// measured in the same run, with and without TCP segmentation offload.
//
//	go test -run '^$' -bench Link -benchtime 2x ./internal/wan
func BenchmarkLink(b *testing.B) {
	if testing.Short() {
		b.Skip("wan: namespace benchmark skipped in -short mode")
	}
	const size = 512 << 20
	ideal := 1000e6 / 8 * 1448 / 1500
	for _, off := range []bool{true, false} {
		b.Run(fmt.Sprintf("offload=%v", off), func(b *testing.B) {
			needRootB(b)
			capacity := steady(b, Pair(0, 0, 0), off, size, 1)
			n, err := Start(context.Background(), Pair(100, 1000, 0), Options{NoOffload: !off})
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			b.SetBytes(size)
			var sum float64
			var runs int
			for b.Loop() {
				tr, err := n.Bulk(context.Background(), 0, 1, size)
				if err != nil {
					b.Fatal(err)
				}
				sum += tr.SteadyRate()
				runs++
			}
			got := sum / float64(runs)
			b.ReportMetric(got/(1<<20), "MiB/s")
			b.ReportMetric(got/ideal, "of-ideal")
			b.ReportMetric(got/capacity, "of-capacity")
			b.ReportMetric(capacity/(1<<20), "capacity-MiB/s")
		})
	}
}

// steady is the mean steady goodput of runs transfers on a fresh network of p.
func steady(b *testing.B, p Profile, off bool, size int64, runs int) float64 {
	n, err := Start(context.Background(), p, Options{NoOffload: !off})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	var sum float64
	for range runs {
		tr, err := n.Bulk(context.Background(), 0, 1, size)
		if err != nil {
			b.Fatal(err)
		}
		sum += tr.SteadyRate()
	}
	return sum / float64(runs)
}

func needRootB(b *testing.B) {
	b.Helper()
	if !canBuild() {
		b.Skip("wan: needs root and /dev/net/tun")
	}
}
