package train

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func batch(t *testing.T, s Source, rows, width int, k Key) []int32 {
	t.Helper()
	dst := make([]int32, rows*width)
	if err := s.Train(dst, rows, width, k); err != nil {
		t.Fatal(err)
	}
	return dst
}

func eq(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// samplerChecks: determinism per key; different workers, steps, micro-batches
// and seeds draw different rows; and across two workers almost no row repeats.
func samplerChecks(t *testing.T, s Source, width int) {
	k := Key{Seed: 1, Worker: 3, Step: 10, Micro: 1}
	a := batch(t, s, 4, width, k)
	if !eq(a, batch(t, s, 4, width, k)) {
		t.Fatal("same key gave different tokens")
	}
	for _, k2 := range []Key{{1, 4, 10, 1}, {1, 3, 11, 1}, {1, 3, 10, 0}, {2, 3, 10, 1}} {
		if eq(a, batch(t, s, 4, width, k2)) {
			t.Fatalf("key %+v drew the same rows as %+v", k2, k)
		}
	}
	rows := map[string]bool{}
	for step := 0; step < 50; step++ {
		b := batch(t, s, 4, width, Key{Seed: 1, Worker: 0, Step: step})
		for r := 0; r < 4; r++ {
			rows[fmtRow(b[r*width:(r+1)*width])] = true
		}
	}
	dup := 0
	for step := 0; step < 50; step++ {
		b := batch(t, s, 4, width, Key{Seed: 1, Worker: 1, Step: step})
		for r := 0; r < 4; r++ {
			if rows[fmtRow(b[r*width:(r+1)*width])] {
				dup++
			}
		}
	}
	if dup > 2 { // ≈ 0.14 expected by chance for 300 k shard positions
		t.Fatalf("workers 0 and 1 shared %d of 200 rows", dup)
	}
}

func fmtRow(r []int32) string {
	var sb strings.Builder
	for _, v := range r {
		sb.WriteRune(rune(v + 1))
	}
	return sb.String()
}

func TestDefaultSource(t *testing.T) {
	s := DefaultSource()
	samplerChecks(t, s, 48)
	row := batch(t, s, 1, 40, Key{Seed: 5})
	text := ByteTokenizer{}.Decode(row)
	for _, line := range strings.Split(text, "\n")[:2] { // complete problems
		var a, b, c int
		if _, err := fmtSscanf(line, &a, &b, &c); err != nil || a+b != c || heldOut(a, b) {
			t.Fatalf("bad training problem %q in %q", line, text)
		}
	}
	ev := make([]int32, 2*40)
	if err := s.Eval(ev, 2, 40, 3); err != nil {
		t.Fatal(err)
	}
	ev2 := make([]int32, 2*40)
	s.Eval(ev2, 2, 40, 3)
	if !eq(ev, ev2) {
		t.Fatal("Eval not deterministic")
	}
	for _, line := range strings.Split(ByteTokenizer{}.Decode(ev), "\n")[:2] {
		var a, b, c int
		if _, err := fmtSscanf(line, &a, &b, &c); err != nil || a+b != c || !heldOut(a, b) || a < 100 || b < 100 {
			t.Fatalf("bad held-out problem %q: want a held-out pair of 3-digit operands", line)
		}
	}
}

func writeTestShard(t *testing.T, path string, n, vocab, salt int) []uint32 {
	toks := make([]uint32, n)
	for i := range toks {
		toks[i] = uint32((i*7 + salt) % vocab)
	}
	if err := WriteShard(path, toks, vocab); err != nil {
		t.Fatal(err)
	}
	return toks
}

func TestShardSourceAndMixture(t *testing.T) {
	dir := t.TempDir()
	writeTestShard(t, filepath.Join(dir, "a.tok"), 20000, 1000, 0)
	big := writeTestShard(t, filepath.Join(dir, "big.tok"), 300000, 300001, 3) // uint32 tokens
	s, err := OpenSource(filepath.Join(dir, "big.tok"))
	if err != nil {
		t.Fatal(err)
	}
	samplerChecks(t, s, 64)
	// rows are contiguous windows of the train region; eval rows of the held-out tail
	row := batch(t, s, 1, 64, Key{Seed: 9})
	trainLen, _ := split(s.(*ShardSource).comps[0].shards[0], 64)
	start := indexOf(big, row)
	if start < 0 || start+64 > trainLen {
		t.Fatalf("train window at %d (train region %d)", start, trainLen)
	}
	ev := make([]int32, 64)
	s.Eval(ev, 1, 64, 0)
	if p := indexOf(big, ev); p < trainLen {
		t.Fatalf("eval window at %d, inside the train region", p)
	}

	spec := `{"sources": [{"path": "a.tok", "weight": 3}, {"path": "big.tok", "weight": 1}]}`
	os.WriteFile(filepath.Join(dir, "mix.json"), []byte(spec), 0o644)
	m, err := OpenSource(filepath.Join(dir, "mix.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Vocab() != 300001 {
		t.Fatalf("mixture vocab %d", m.Vocab())
	}
	fromA := 0
	for step := 0; step < 100; step++ {
		b := batch(t, m, 4, 16, Key{Step: step})
		for r := 0; r < 4; r++ {
			if b[r*16] < 1000 && b[r*16+1] < 1000 && (b[r*16+1]-b[r*16]+1000)%1000 == 7 {
				fromA++ // a's pattern: consecutive tokens differ by 7 mod 1000
			}
		}
	}
	if fromA < 240 || fromA > 360 { // weight 3:1 → 75 % of 400 rows
		t.Errorf("%d of 400 rows from weight-3 source, want ≈ 300", fromA)
	}
	d, err := OpenSource(dir) // directory: both shards
	if err != nil || len(d.(*ShardSource).comps[0].shards) != 2 {
		t.Fatalf("dir source: %v", err)
	}
}

func indexOf(hay []uint32, needle []int32) int {
outer:
	for i := 0; i+len(needle) <= len(hay); i++ {
		for j, v := range needle {
			if hay[i+j] != uint32(v) {
				continue outer
			}
		}
		return i
	}
	return -1
}

func TestShardRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.tok")
	writeTestShard(t, p, 100, 50, 0)
	good, _ := os.ReadFile(p)
	for name, b := range map[string][]byte{
		"empty":     {},
		"magic":     append([]byte("NOTMAGIC"), good[8:]...),
		"truncated": good[:len(good)-1],
		"width":     patch(good, 8, 3),
		"count":     patch(good, 16, 101),
	} {
		os.WriteFile(p, b, 0o644)
		if _, err := OpenShard(p); !errors.Is(err, ErrShard) {
			t.Errorf("%s: got %v, want ErrShard", name, err)
		}
	}
	// a token over the header's vocabulary is caught when read
	bad := patch(good, 12, 5)
	os.WriteFile(p, bad, 0o644)
	s, err := OpenSource(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Train(make([]int32, 8), 1, 8, Key{}); !errors.Is(err, ErrShard) {
		t.Errorf("token ≥ vocab: got %v", err)
	}
	if _, err := OpenSource(filepath.Join(dir, "missing.tok")); err == nil {
		t.Error("missing file accepted")
	}
}

func patch(b []byte, at int, v byte) []byte {
	c := append([]byte(nil), b...)
	c[at] = v
	return c
}

func FuzzParseShard(f *testing.F) {
	dir := f.TempDir()
	p := filepath.Join(dir, "x.tok")
	toks := []uint32{1, 2, 3}
	WriteShard(p, toks, 10)
	good, _ := os.ReadFile(p)
	f.Add(good)
	f.Add(good[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseShard(b)
		if err != nil {
			return
		}
		s.path = "fuzz"
		for i := 0; i < s.Len(); i++ {
			s.token(i) // must not panic
		}
	})
}

// fmtSscanf parses "a+b=c".
func fmtSscanf(line string, a, b, c *int) (int, error) {
	return fmt.Sscanf(line, "%d+%d=%d", a, b, c)
}
