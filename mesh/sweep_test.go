package mesh

import (
	"cmp"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSimRandomFaultsSweep runs the random-fault simulation over a range of
// seeds given by MESH_SWEEP="FIRST-LAST[:MINSIZE-MAXSIZE]" (sizes default
// 4-64), in parallel, printing progress; the failing seeds are listed at
// the end. MESH_SWEEP_REDUCE=N makes every all-reduce last N ticks (4
// otherwise; 30 is ten heartbeats, a WAN all-reduce). MESH_SWEEP_TRACE=DIR
// writes each seed's trace (every message, decision and fault) to
// DIR/SEED.trace: for one seed at a time, to read why it failed. Without
// MESH_SWEEP it is skipped (make test-sim runs it).
func TestSimRandomFaultsSweep(t *testing.T) {
	spec := os.Getenv("MESH_SWEEP")
	if spec == "" {
		t.Skip("MESH_SWEEP=FIRST-LAST[:MIN-MAX] (make test-sim)")
	}
	first, last, lo, hi, err := parseSweep(spec)
	if err != nil {
		t.Fatal(err)
	}
	reduce := 0
	if r := os.Getenv("MESH_SWEEP_REDUCE"); r != "" {
		if reduce, err = strconv.Atoi(r); err != nil || reduce < 1 {
			t.Fatalf("MESH_SWEEP_REDUCE %q: want a number of ticks ≥ 1", r)
		}
	}
	// The simulation allocates many short-lived maps: collecting a quarter
	// as often takes 12 % less CPU per seed for twice the heap (≈ 360 MB).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	traceDir := os.Getenv("MESH_SWEEP_TRACE")
	var done atomic.Int64
	var mu sync.Mutex
	var failed []string
	start := time.Now()
	total := int64(last - first + 1)
	t.Run("seeds", func(t *testing.T) {
		for seed := first; seed <= last; seed++ {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				defer func() {
					n := done.Add(1)
					if t.Failed() {
						mu.Lock()
						failed = append(failed, fmt.Sprint(seed))
						mu.Unlock()
						fmt.Fprintf(os.Stderr, "sweep: seed %d failed\n", seed)
					}
					if n%100 == 0 || n == total {
						fmt.Fprintf(os.Stderr, "sweep: %d/%d seeds, %d failed, %s\n", n, total, len(failed), time.Since(start).Round(time.Second))
					}
				}()
				var trace func(string)
				if traceDir != "" {
					f, err := os.Create(fmt.Sprintf("%s/%d.trace", traceDir, seed))
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					trace = func(line string) { fmt.Fprintln(f, line) }
				}
				simRandomRunSized(t, seed, lo, hi, reduce, trace)
			})
		}
	})
	slices.SortFunc(failed, func(a, b string) int { return cmp.Compare(len(a), len(b))*2 + cmp.Compare(a, b) })
	fmt.Fprintf(os.Stderr, "sweep: seeds %d-%d, %d-%d members, all-reduce %d ticks: %d failed in %s: %s\n",
		first, last, lo, hi, cmp.Or(reduce, 4), len(failed), time.Since(start).Round(time.Second), strings.Join(failed, " "))
}

// parseSweep reads "FIRST-LAST[:MIN-MAX]".
func parseSweep(spec string) (first, last uint64, lo, hi int, err error) {
	lo, hi = 4, 64
	seeds, sizes, ok := strings.Cut(spec, ":")
	a, b, _ := strings.Cut(seeds, "-")
	if first, err = strconv.ParseUint(a, 10, 64); err == nil {
		last, err = strconv.ParseUint(b, 10, 64)
	}
	if err == nil && ok {
		x, y, _ := strings.Cut(sizes, "-")
		if lo, err = strconv.Atoi(x); err == nil {
			hi, err = strconv.Atoi(y)
		}
	}
	if err == nil && (last < first || lo < 2 || hi < lo) {
		err = fmt.Errorf("bad range")
	}
	if err != nil {
		err = fmt.Errorf("MESH_SWEEP %q: want FIRST-LAST[:MIN-MAX]: %v", spec, err)
	}
	return first, last, lo, hi, err
}
