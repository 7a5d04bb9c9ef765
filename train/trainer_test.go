package train

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// testOptions is a fast configuration on the default corpus.
func testOptions(t testing.TB) Options {
	t.Helper()
	o, err := DefaultOptions("tiny")
	if err != nil {
		t.Fatal(err)
	}
	o.Model = Config{Name: "test", Vocab: 256, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 64,
		SeqLen: 32, RopeTheta: 10000, NormEps: 1e-5, ZLoss: 1e-4}
	o.Batch, o.Seq, o.GradAccum, o.EvalBatches = 4, 24, 2, 2
	o.LR, o.MinLR, o.WarmupSteps, o.TotalSteps, o.DecayFrac = 1e-2, 1e-3, 3, 40, 0.25
	o.Seed = 7
	return o
}

func run(t *testing.T, tr Engine, n int) []float64 {
	t.Helper()
	var losses []float64
	for i := 0; i < n; i++ {
		st, err := tr.Step()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, st.Loss)
	}
	return losses
}

// TestResumeBitIdentical: kill after k steps (checkpoint), resume, and the
// loss curve and final parameters equal an uninterrupted run's bit for bit.
func TestResumeBitIdentical(t *testing.T) {
	full, c := resumeRoundTrip(t, testOptions(t))
	if c.StepCount() != 8 {
		t.Fatalf("resumed run ended at step %d, want 8", c.StepCount())
	}
	if full[len(full)-1] >= full[0] {
		t.Errorf("loss did not fall: %v", full)
	}
}

// resumeRoundTrip trains 8 steps uninterrupted, and 4 steps, a checkpoint,
// a step more ("killed" after the checkpoint) and 4 steps resumed from it;
// it fails unless both give the same losses and parameters bit for bit,
// and returns the uninterrupted losses and the resumed trainer.
func resumeRoundTrip(t *testing.T, o Options) ([]float64, *Trainer) {
	t.Helper()
	a, err := NewTrainer(o, DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	full := run(t, a, 8)
	b, _ := NewTrainer(o, DefaultSource())
	first := run(t, b, 4)
	dir, err := b.SaveCheckpoint(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	b.Step() // the "killed" process goes on a little; the checkpoint is what counts
	c, err := ResumeTrainer(dir, DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	if c.StepCount() != 4 {
		t.Fatalf("resumed at step %d, want 4", c.StepCount())
	}
	resumed := append(first, run(t, c, 4)...)
	for i := range full {
		if math.Float64bits(full[i]) != math.Float64bits(resumed[i]) {
			t.Fatalf("step %d: loss %v uninterrupted, %v resumed", i+1, full[i], resumed[i])
		}
	}
	if Hash(a.Params()) != Hash(c.Params()) {
		t.Fatal("final parameters differ after resume")
	}
	return full, c
}

func TestDeterministicAcrossTrainersAndWorkers(t *testing.T) {
	o := testOptions(t)
	a, _ := NewTrainer(o, DefaultSource())
	b, _ := NewTrainer(o, DefaultSource())
	if Hash(a.Params()) != Hash(b.Params()) {
		t.Fatal("same seed, different init")
	}
	la, lb := run(t, a, 2), run(t, b, 2)
	if la[1] != lb[1] || Hash(a.Params()) != Hash(b.Params()) {
		t.Fatal("same seed and worker, different training")
	}
	o.Worker = 1
	w, _ := NewTrainer(o, DefaultSource())
	if lw := run(t, w, 2); lw[0] == la[0] {
		t.Fatal("worker 1 drew the same data as worker 0")
	}
	ea, _ := a.Eval()
	a2, _ := NewTrainer(testOptions(t), DefaultSource())
	a2.SetParams(a.Params())
	eb, _ := a2.Eval()
	if ea != eb {
		t.Fatalf("Eval differs for identical params: %v vs %v", ea, eb)
	}
}

func TestSetParamsAndEngineRegistry(t *testing.T) {
	o := testOptions(t)
	e, err := NewEngine("cpu", o, DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.SetParams(make([]float32, 3)); err == nil {
		t.Error("SetParams accepted a wrong length")
	}
	p := append([]float32(nil), e.Params()...)
	p[0] = 42
	if err := e.SetParams(p); err != nil || e.Params()[0] != 42 {
		t.Errorf("SetParams: %v, p[0] = %v", err, e.Params()[0])
	}
	if _, err := NewEngine("abacus", o, DefaultSource()); err == nil {
		t.Error("unknown device accepted")
	}
}

func TestCheckpointCorruptionIsDetected(t *testing.T) {
	o := testOptions(t)
	tr, _ := NewTrainer(o, DefaultSource())
	run(t, tr, 1)
	dir := filepath.Join(t.TempDir(), "ck")
	if err := tr.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := ResumeTrainer(dir, DefaultSource()); err != nil {
		t.Fatalf("intact checkpoint: %v", err)
	}
	cases := map[string]func(t *testing.T, d string){
		"truncated model": func(t *testing.T, d string) { truncate(t, filepath.Join(d, modelFile), 100) },
		"truncated optimizer": func(t *testing.T, d string) {
			truncate(t, filepath.Join(d, optimizerFile), 9)
		},
		"flipped weight": func(t *testing.T, d string) { flipByte(t, filepath.Join(d, modelFile), -5) },
		"bad header":     func(t *testing.T, d string) { flipByte(t, filepath.Join(d, modelFile), 12) },
		"missing state":  func(t *testing.T, d string) { os.Remove(filepath.Join(d, stateFile)) },
		"garbage state": func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, stateFile), []byte("{\"format\":"), 0o644)
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "ck")
			if err := tr.Save(d); err != nil {
				t.Fatal(err)
			}
			corrupt(t, d)
			_, err := ResumeTrainer(d, DefaultSource())
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("got %v, want ErrCheckpoint", err)
			}
		})
	}
}

func truncate(t *testing.T, path string, by int64) {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, st.Size()-by); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, at int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at += len(b)
	}
	b[at] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWriteDirAtomicKeepsLast(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"step-00000001", "step-00000002", "step-00000003", "step-00000002"} {
		err := WriteDirAtomic(root, n, func(d string) error {
			return os.WriteFile(filepath.Join(d, "f"), []byte(n), 0o644)
		}, 2)
		if err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(root, "other"), 0o755)
	dirs, _ := stepDirs(root, CheckpointPrefix)
	if len(dirs) != 2 || dirs[0] != "step-00000002" || dirs[1] != "step-00000003" {
		t.Fatalf("kept %v", dirs)
	}
	es, _ := os.ReadDir(root)
	if len(es) != 3 {
		t.Fatalf("leftovers in root: %v", es)
	}
	latest, err := LatestCheckpoint(root)
	if err != nil || filepath.Base(latest) != "step-00000003" {
		t.Fatalf("LatestCheckpoint = %q, %v", latest, err)
	}
	wantErr := errors.New("boom")
	if err := WriteDirAtomic(root, "step-00000009", func(string) error { return wantErr }, 2); !errors.Is(err, wantErr) {
		t.Fatalf("write error: %v", err)
	}
	if l, _ := LatestCheckpoint(root); filepath.Base(l) != "step-00000003" {
		t.Fatalf("failed write left %s", l)
	}
}

// TestWriteDirAtomicRemovesInterruptedWrites: a process killed while it
// wrote a checkpoint leaves its temporary directory (and, killed between
// the two renames, the replaced one); the next successful write removes
// them, so that kill -9 after kill -9 does not fill the disk.
func TestWriteDirAtomicRemovesInterruptedWrites(t *testing.T) {
	root := t.TempDir()
	stale := []string{".tmp-step-00000004-1234", ".tmp-step-00000006-99.old"}
	for _, d := range stale {
		if err := os.MkdirAll(filepath.Join(root, d, "engine"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(root, ".tmp-export-1") // another prefix's: not ours to remove
	os.Mkdir(other, 0o755)
	if err := WriteDirAtomic(root, "step-00000008", func(d string) error {
		return os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644)
	}, 3); err != nil {
		t.Fatal(err)
	}
	for _, d := range stale {
		if _, err := os.Stat(filepath.Join(root, d)); !os.IsNotExist(err) {
			t.Errorf("%s left after a successful write (%v)", d, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another prefix's temporary directory removed: %v", err)
	}
}

func TestLRSchedule(t *testing.T) {
	o := Options{LR: 1, MinLR: 0.1, WarmupSteps: 4, TotalSteps: 20, DecayFrac: 0.5}
	want := map[int]float64{0: 0.25, 3: 1, 4: 1, 9: 1, 10: 1 - 0.9/10, 19: 0.1, 25: 0.1}
	for s, w := range want {
		if got := o.LRAt(s); math.Abs(got-w) > 1e-12 {
			t.Errorf("LRAt(%d) = %v, want %v", s, got, w)
		}
	}
}

func TestHashIsLittleEndianSHA256(t *testing.T) {
	sum := sha256.Sum256([]byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}) // 1.0, -2.0 as little-endian float32
	if got, want := Hash([]float32{1, -2}), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("Hash = %s, want %s", got, want)
	}
	big := make([]float32, 5000) // crosses the internal buffer size
	big[4999] = 1
	if Hash(big) == Hash(make([]float32, 5000)) {
		t.Fatal("Hash ignores the tail")
	}
}
