package train

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseState: state.json from disk never panics the reader, and what it
// accepts has valid options (so newTrainer cannot be asked for absurd sizes).
func FuzzParseState(f *testing.F) {
	o, _ := DefaultOptions("tiny")
	good, _ := json.Marshal(checkpointState{Format: stateFormat, Options: o, Step: 3, Data: dataState{Step: 3}})
	f.Add(good)
	f.Add([]byte(`{"format":"intellect-node/train-checkpoint/1","step":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseState(b)
		if err != nil {
			return
		}
		if err := st.Options.Validate(); err != nil || st.Step < 0 {
			t.Fatalf("accepted invalid state: %v", err)
		}
	})
}

// FuzzParseConfig: model config files.
func FuzzParseConfig(f *testing.F) {
	c, _ := Preset("small")
	good, _ := json.Marshal(c)
	f.Add(good)
	f.Add([]byte(`{"vocab":1e9}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseConfig(b)
		if err == nil && c.Validate() != nil {
			t.Fatal("accepted an invalid config")
		}
	})
}

func TestLoadConfigAndMixtureErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.json")
	os.WriteFile(p, []byte(`{"vocab":300,"dim":64,"layers":2,"heads":4,"kv_heads":2,"ffn":128,"seq_len":32}`), 0o644)
	c, err := LoadConfig(p)
	if err != nil || c.RopeTheta != 500000 || c.NormEps != 1e-5 || c.Dim != 64 {
		t.Fatalf("LoadConfig: %+v, %v", c, err)
	}
	os.WriteFile(p, []byte(`{"vocab":300,"dim":63}`), 0o644)
	if _, err := LoadConfig(p); err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, spec := range []string{`{"sources":[]}`, `{"sources":[{"path":"x.tok","weight":-1}]}`, `{"sources":`} {
		m := filepath.Join(dir, "m.json")
		os.WriteFile(m, []byte(spec), 0o644)
		if _, err := OpenSource(m); err == nil {
			t.Errorf("mixture %s accepted", spec)
		}
	}
}
