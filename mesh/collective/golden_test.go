package collective

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden-codecs.txt")

// hashFloats is the SHA-256 of the bits of every vector, in order.
func hashFloats(vs ...[]float32) string {
	h := sha256.New()
	var b [4]byte
	for _, v := range vs {
		for _, x := range v {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(x))
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// goldenRing runs two rounds of an in-memory ring with error feedback and
// returns the hash of every member's output and residual.
func goldenRing(t *testing.T, k, n int, cfg AllReduceConfig) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(k), uint64(n)))
	w := make([]float32, k)
	for i := range w {
		w[i] = float32(3 + i)
	}
	res := make([][2][]float32, k)
	for i := range res {
		res[i] = [2][]float32{make([]float32, n), make([]float32, n)}
	}
	var outs [][]float32
	for range 2 {
		in := randVecs(rng, k, n)
		ts := NewMemRing(k, max(cfg.Shards, 1))
		outs = make([][]float32, k)
		var wg sync.WaitGroup
		errs := make([]error, k)
		for i := range k {
			outs[i] = make([]float32, n)
			wg.Go(func() {
				_, errs[i] = AllReduceInto(context.Background(), ts[i], i, w,
					Buffers{Src: in[i], Dst: outs[i], ResIn: res[i][0], ResOut: res[i][1]}, cfg)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("member %d: %v", i, err)
			}
			res[i][0], res[i][1] = res[i][1], res[i][0]
		}
	}
	all := append([][]float32{}, outs...)
	for i := range res {
		all = append(all, res[i][0])
	}
	return hashFloats(all...)
}

// goldenScatter runs two rounds of an in-memory robust scatter with error
// feedback and returns the hash of every member's output and residual and
// of the commitments.
func goldenScatter(t *testing.T, k, n int, cfg ScatterConfig) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(k), uint64(n)+7))
	w := honestWeights(k)
	res := make([][2][]float32, k)
	for i := range res {
		res[i] = [2][]float32{make([]float32, n), make([]float32, n)}
	}
	h := sha256.New()
	var outs [][]float32
	for range 2 {
		xs, _ := pseudoGrads(rng, k, n)
		ts := NewMemMesh(k, 2*cfg.Shards)
		outs = make([][]float32, k)
		results := make([]ScatterResult, k)
		errs := make([]error, k)
		var wg sync.WaitGroup
		for i := range k {
			outs[i] = make([]float32, n)
			wg.Go(func() {
				results[i], errs[i] = ScatterAllReduce(context.Background(), ts[i], i, w,
					Buffers{Src: xs[i], Dst: outs[i], ResIn: res[i][0], ResOut: res[i][1]}, cfg)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("member %d: %v", i, err)
			}
			res[i][0], res[i][1] = res[i][1], res[i][0]
			for _, c := range results[i].Sent {
				h.Write(c[:])
			}
			for _, c := range results[i].Got {
				h.Write(c[:])
			}
		}
	}
	all := append([][]float32{}, outs...)
	for i := range res {
		all = append(all, res[i][0])
	}
	return hashFloats(all...) + " " + hex.EncodeToString(h.Sum(nil))[:16]
}

// TestGoldenCodecs pins the bits the int8 and fp32 codecs produce, ring and
// scatter, error feedback on: other codecs must not change them.
// Rewrite with -update-golden.
func TestGoldenCodecs(t *testing.T) {
	var lines []string
	for _, k := range []int{2, 3, 4} {
		for _, codec := range []Codec{CodecInt8, CodecFP32} {
			cfg := AllReduceConfig{Shards: 2, ChunkElems: 700, Codec: codec, ErrorFeedback: true}
			lines = append(lines, fmt.Sprintf("ring %v k=%d %s", codec, k, goldenRing(t, k, 3001, cfg)))
		}
		cfg := ScatterConfig{Shards: 2, ChunkElems: 500, ErrorFeedback: true, Robust: RobustConfig{MaxWeight: testH}}
		lines = append(lines, fmt.Sprintf("scatter int8 k=%d %s", k, goldenScatter(t, k, 3001, cfg)))
	}
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "golden-codecs.txt")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("bits changed:\n got:\n%s want:\n%s", got, want)
	}
}
