package mesh

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var meshUpdateGolden = flag.Bool("update", false, "rewrite testdata/mesh_*.golden from this run")

// TestTranscript records one clear scenario — three nodes agree step 0; in
// step 1 n02 crashes during the all-reduce, the survivors report it and
// agree a new ring for the same step; n03 joins without a model, fetches
// and enters the ring of a later step — and compares it with a golden file.
// Heartbeats are left out of the transcript. Rewrite with -update.
func TestTranscript(t *testing.T) {
	var lines []string
	s := newSimNet(t, 1)
	s.trace = func(l string) { lines = append(lines, l) }
	s.reduceTicks = 6
	s.addN(3, nil)
	s.runUntil(200, "step 1 reducing", func() bool {
		st := s.nodes["n02"].m.Status()
		return st.Step == 1 && st.State == StateReducing
	})
	s.crash("n02")
	s.runUntil(200, "step 2", func() bool { return s.minStep() >= 2 })
	s.add("n03", 0, "", nil)
	s.runUntil(300, "n03 in a ring", func() bool { return s.nodes["n03"].rings > 0 })
	got := strings.Join(lines, "\n") + "\n"

	path := filepath.Join("..", "testdata", "mesh_crash_join.golden")
	if *meshUpdateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("transcript differs from %s at line %d:\n got: %s\nwant: %s\n(rerun with -update if the change is intended)", path, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("transcript differs from %s in length: %d vs %d lines", path, len(gl), len(wl))
	}
}
