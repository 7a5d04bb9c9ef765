package train

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestFitVocab: a preset takes the data's vocabulary rounded up to 64; a
// config's explicit vocabulary stays unless it is too small; vocab 0 needs
// shards.
func TestFitVocab(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.tok")
	if err := WriteShard(path, make([]uint32, 4096), 50257); err != nil {
		t.Fatal(err)
	}
	src, err := OpenSource(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.(*ShardSource).Close()
	tiny, _ := Preset("tiny")
	if c, err := FitVocab(tiny, src, true); err != nil || c.Vocab != 50304 {
		t.Fatalf("preset: vocab %d, %v", c.Vocab, err)
	}
	big := tiny
	big.Vocab = 60000
	if c, err := FitVocab(big, src, false); err != nil || c.Vocab != 60000 {
		t.Fatalf("explicit larger: vocab %d, %v", c.Vocab, err)
	}
	if _, err := FitVocab(tiny, src, false); !errors.Is(err, ErrConfig) {
		t.Fatalf("explicit 256 for data of 50257: %v", err)
	}
	zero := tiny
	zero.Vocab = 0
	if c, err := FitVocab(zero, src, false); err != nil || c.Vocab != 50304 {
		t.Fatalf("vocab 0: %d, %v", c.Vocab, err)
	}
	if _, err := FitVocab(zero, DefaultSource(), false); !errors.Is(err, ErrConfig) {
		t.Fatalf("vocab 0 with the embedded corpus: %v", err)
	}
	if c, err := FitVocab(tiny, DefaultSource(), true); err != nil || c.Vocab != 256 {
		t.Fatalf("preset with the embedded corpus: %d, %v", c.Vocab, err)
	}
	if c, err := parseConfig([]byte(`{"dim": 64, "layers": 1, "heads": 2, "kv_heads": 1, "ffn": 128, "seq_len": 32}`)); err != nil || c.Vocab != 0 {
		t.Fatalf("a config without vocab: %+v %v", c, err)
	}
}
