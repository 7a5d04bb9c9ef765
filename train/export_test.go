package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// trainedCheckpoint trains the test model a few steps and saves it under
// home/checkpoints; it returns the trainer and the step directory.
func trainedCheckpoint(t *testing.T, home string) (*Trainer, string) {
	t.Helper()
	tr, err := NewTrainer(testOptions(t), DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	run(t, tr, 2)
	dir, err := tr.SaveCheckpoint(filepath.Join(home, "checkpoints"), 0)
	if err != nil {
		t.Fatal(err)
	}
	return tr, dir
}

func TestLoadCheckpointModelPaths(t *testing.T) {
	home := t.TempDir()
	tr, dir := trainedCheckpoint(t, home)
	run(t, tr, 1)
	newest, _ := tr.SaveCheckpoint(filepath.Join(home, "checkpoints"), 0)
	for _, c := range []struct{ path, want string }{
		{dir, dir}, {home, newest}, {filepath.Join(home, "checkpoints"), newest},
	} {
		m, err := LoadCheckpointModel(c.path)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if m.Dir != c.want || m.Config != tr.Options().Model || int64(len(m.Params)) != m.Config.NumParams() {
			t.Fatalf("%s: read %s, config %+v", c.path, m.Dir, m.Config)
		}
	}
	m, _ := LoadCheckpointModel(home)
	if m.Step != 3 || Hash(m.Params) != Hash(tr.Params()) {
		t.Fatalf("newest checkpoint: step %d", m.Step)
	}
}

func TestExportRoundTrip(t *testing.T) {
	tr, dir := trainedCheckpoint(t, t.TempDir())
	m, err := LoadCheckpointModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []DType{F32, BF16} {
		out := filepath.Join(t.TempDir(), "hf")
		var reports, last, total int64
		progress := func(done, tot int64) {
			if done < last || (total != 0 && tot != total) {
				t.Errorf("%s: progress %d/%d after %d/%d", dt, done, tot, last, total)
			}
			reports, last, total = reports+1, done, tot
		}
		if err := Export(m, out, ExportOptions{DType: dt, Progress: progress}); err != nil {
			t.Fatal(err)
		}
		if want := int64(len(m.Params)) * dt.size(); reports != int64(len(tr.Layout())) || last != want || total != want {
			t.Errorf("%s: %d progress reports ending at %d/%d, want %d ending at %d/%d", dt, reports, last, total, len(tr.Layout()), want, want)
		}
		ts, meta, err := ReadSafetensors(filepath.Join(out, "model.safetensors"))
		if err != nil || !reflect.DeepEqual(meta, map[string]string{"format": "pt"}) {
			t.Fatalf("%s: %v, metadata %v", dt, err, meta)
		}
		lay := tr.Layout()
		if len(ts) != len(lay) {
			t.Fatalf("%s: %d tensors, want %d", dt, len(ts), len(lay))
		}
		for i, ti := range lay {
			if ts[i].Name != ti.Name || !reflect.DeepEqual(ts[i].Shape, ti.Shape) {
				t.Fatalf("%s: tensor %d is %s %v, want %s %v", dt, i, ts[i].Name, ts[i].Shape, ti.Name, ti.Shape)
			}
			for j, v := range tr.Params()[ti.Offset : ti.Offset+ti.Size()] {
				if want := roundTo(dt, v); ts[i].Data[j] != want {
					t.Fatalf("%s: %s[%d] = %v, want %v", dt, ti.Name, j, ts[i].Data[j], want)
				}
			}
		}
		checkHFConfig(t, out, m.Config, dt)
	}
}

func roundTo(dt DType, v float32) float32 {
	if dt == BF16 {
		return FromBF16(ToBF16(v))
	}
	return v
}

// checkHFConfig checks config.json and the other small files of an export.
func checkHFConfig(t *testing.T, out string, c Config, dt DType) {
	t.Helper()
	var got map[string]any
	readJSON(t, filepath.Join(out, "config.json"), &got)
	torch := map[DType]string{F32: "float32", BF16: "bfloat16"}[dt]
	want := map[string]any{
		"architectures": []any{"LlamaForCausalLM"}, "model_type": "llama",
		"vocab_size": 256.0, "hidden_size": 32.0, "intermediate_size": 64.0, "num_hidden_layers": 2.0,
		"num_attention_heads": 4.0, "num_key_value_heads": 2.0, "head_dim": 8.0,
		"max_position_embeddings": 32.0, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
		"tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false, "attention_dropout": 0.0,
		"initializer_range": 0.02, "pretraining_tp": 1.0, "rope_scaling": nil, "torch_dtype": torch,
		"use_cache": true, "bos_token_id": nil, "eos_token_id": nil, "transformers_version": hfTransformersVersion,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("config.json:\n got %v\nwant %v", got, want)
	}
	var gen map[string]any
	readJSON(t, filepath.Join(out, "generation_config.json"), &gen)
	if gen["max_length"] != float64(c.SeqLen) || gen["do_sample"] != false || gen["eos_token_id"] != nil {
		t.Fatalf("generation_config.json: %v", gen)
	}
	var tc map[string]any
	readJSON(t, filepath.Join(out, "tokenizer_config.json"), &tc)
	if tc["tokenizer_class"] != "PreTrainedTokenizerFast" || tc["model_max_length"] != float64(c.SeqLen) {
		t.Fatalf("tokenizer_config.json: %v", tc)
	}
	es, _ := os.ReadDir(out)
	if len(es) != 5 {
		t.Fatalf("%d files in the export, want 5", len(es))
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestByteLevelTokenizerJSON(t *testing.T) {
	var tj struct {
		Model struct {
			Type   string         `json:"type"`
			Vocab  map[string]int `json:"vocab"`
			Merges []string       `json:"merges"`
		} `json:"model"`
		PreTokenizer map[string]any `json:"pre_tokenizer"`
		Normalizer   any            `json:"normalizer"`
	}
	if err := json.Unmarshal(byteLevelTokenizerJSON(), &tj); err != nil {
		t.Fatal(err)
	}
	v := tj.Model.Vocab
	if tj.Model.Type != "BPE" || len(v) != 256 || tj.Model.Merges == nil || len(tj.Model.Merges) != 0 || tj.Normalizer != nil {
		t.Fatalf("model %s, %d tokens, merges %v", tj.Model.Type, len(v), tj.Model.Merges)
	}
	// GPT-2's table: printable bytes are themselves, space is Ġ, newline Ċ, 0xAD is Ń.
	for s, id := range map[string]int{"A": 'A', "~": '~', "Ġ": ' ', "Ċ": '\n', "Ā": 0, "Ń": 0xAD, "ÿ": 0xFF} {
		if v[s] != id {
			t.Errorf("vocab[%q] = %d, want %d", s, v[s], id)
		}
	}
	if tj.PreTokenizer["use_regex"] != false || tj.PreTokenizer["add_prefix_space"] != false {
		t.Fatalf("pre_tokenizer %v", tj.PreTokenizer)
	}
}

func TestExportTokenizerFile(t *testing.T) {
	_, dir := trainedCheckpoint(t, t.TempDir())
	m, err := LoadCheckpointModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok := []byte(`{"version":"1.0","added_tokens":[{"id":254,"content":"<|begin_of_text|>","special":true},` +
		`{"id":255,"content":"<|end_of_text|>","special":true}],"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(path, tok, 0o644)
	out := filepath.Join(t.TempDir(), "hf")
	if err := Export(m, out, ExportOptions{Tokenizer: path}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "tokenizer.json")); !bytes.Equal(b, tok) {
		t.Fatal("tokenizer.json not copied as is")
	}
	var cfg, tc map[string]any
	readJSON(t, filepath.Join(out, "config.json"), &cfg)
	readJSON(t, filepath.Join(out, "tokenizer_config.json"), &tc)
	if cfg["bos_token_id"] != 254.0 || cfg["eos_token_id"] != 255.0 || tc["eos_token"] != "<|end_of_text|>" || tc["bos_token"] != "<|begin_of_text|>" {
		t.Fatalf("config %v, tokenizer_config %v", cfg, tc)
	}
	big := bytes.Replace(tok, []byte(`"id":255`), []byte(`"id":256`), 1)
	os.WriteFile(path, big, 0o644)
	if err := Export(m, filepath.Join(t.TempDir(), "x"), ExportOptions{Tokenizer: path}); !errors.Is(err, ErrConfig) {
		t.Fatalf("token id beyond the vocab: %v", err)
	}
	os.WriteFile(path, []byte(`{"model":{}}`), 0o644)
	if err := Export(m, filepath.Join(t.TempDir(), "x"), ExportOptions{Tokenizer: path}); !errors.Is(err, ErrConfig) {
		t.Fatalf("tokenizer without vocab: %v", err)
	}
}

func TestExportRefusesExisting(t *testing.T) {
	_, dir := trainedCheckpoint(t, t.TempDir())
	m, err := LoadCheckpointModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	out := filepath.Join(root, "hf")
	os.Mkdir(out, 0o755) // an empty directory is fine
	if err := Export(m, out, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Export(m, out, ExportOptions{DType: BF16}); !errors.Is(err, ErrExists) {
		t.Fatalf("non-empty out: %v", err)
	}
	file := filepath.Join(root, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if err := Export(m, file, ExportOptions{}); !errors.Is(err, ErrExists) {
		t.Fatalf("out is a file: %v", err)
	}
	if err := Export(m, out, ExportOptions{DType: BF16, Force: true}); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	readJSON(t, filepath.Join(out, "config.json"), &cfg)
	if cfg["torch_dtype"] != "bfloat16" {
		t.Fatalf("--force did not replace the export: %v", cfg["torch_dtype"])
	}
	if err := Export(m, filepath.Join(root, "y"), ExportOptions{DType: "F16"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("dtype F16: %v", err)
	}
	if es, _ := os.ReadDir(root); len(es) != 2 {
		t.Fatalf("%d entries left in the output's parent, want 2 (hf, file)", len(es))
	}
}

func TestLoadCheckpointModelCorrupt(t *testing.T) {
	corrupt := map[string]func(dir string){
		"no state":      func(d string) { os.Remove(filepath.Join(d, stateFile)) },
		"no model":      func(d string) { os.Remove(filepath.Join(d, modelFile)) },
		"state garbage": func(d string) { os.WriteFile(filepath.Join(d, stateFile), []byte("{"), 0o644) },
		"truncated model": func(d string) {
			p := filepath.Join(d, modelFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-5], 0o644)
		},
		"hash mismatch": func(d string) {
			p := filepath.Join(d, modelFile)
			ts, meta, _ := ReadSafetensors(p)
			ts[3].Data[0] += 1
			WriteSafetensors(p, ts, meta)
		},
		"missing tensor": func(d string) {
			p := filepath.Join(d, modelFile)
			ts, meta, _ := ReadSafetensors(p)
			WriteSafetensors(p, ts[1:], meta)
		},
	}
	for name, f := range corrupt {
		home := t.TempDir()
		_, dir := trainedCheckpoint(t, home)
		f(dir)
		if _, err := LoadCheckpointModel(home); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, p := range []string{filepath.Join(t.TempDir(), "missing"), t.TempDir()} {
		if _, err := LoadCheckpointModel(p); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestLoadNodeCheckpoint builds a node checkpoint as node/checkpoint.go writes it
// (engine/, outer.safetensors, node.json) and reads θ₀ from it, not the
// engine's own parameters.
func TestLoadNodeCheckpoint(t *testing.T) {
	tr, _ := trainedCheckpoint(t, t.TempDir())
	theta0 := append([]float32{}, tr.Params()...)
	for i := range theta0 {
		theta0[i] *= 0.5
	}
	home := t.TempDir()
	dir := filepath.Join(home, "checkpoints", "step-00000004")
	if err := tr.Save(filepath.Join(dir, "engine")); err != nil {
		t.Fatal(err)
	}
	ts := []Tensor{{Name: "theta0", Shape: []int{len(theta0)}, Data: theta0}, {Name: "outer_momentum", Shape: []int{len(theta0)}, Data: theta0}}
	WriteSafetensors(filepath.Join(dir, "outer.safetensors"), ts, nil)
	writeJSON(t, filepath.Join(dir, "node.json"), map[string]any{"format": nodeStateFormat, "run": "r", "step": 4, "hash": Hash(theta0)})
	m, err := LoadCheckpointModel(home)
	if err != nil {
		t.Fatal(err)
	}
	if m.Dir != dir || m.Step != 4 || Hash(m.Params) != Hash(theta0) || m.Config != tr.Options().Model {
		t.Fatalf("read %s step %d", m.Dir, m.Step)
	}
	writeJSON(t, filepath.Join(dir, "node.json"), map[string]any{"format": nodeStateFormat, "step": 4, "hash": Hash(tr.Params())})
	if _, err := LoadCheckpointModel(dir); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("θ₀ not matching node.json's hash: %v", err)
	}
}

// TestByteTokenizerJSONInHF: Hugging Face's own tokenizers library (the npm
// package `make tok-deps` installs) loads the byte tokenizer.json Export
// writes and maps every byte to the id of its value, and back.
func TestByteTokenizerJSONInHF(t *testing.T) {
	ref := filepath.Join("..", "testdata", "tokenizers")
	if _, err := os.Stat(filepath.Join(ref, "node_modules", "tokenizers")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("reference tokenizers not installed (make tok-deps): %v", err)
		}
		t.Skip("needs `make tok-deps`")
	}
	dir := t.TempDir()
	tj, in, out := filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json")
	os.WriteFile(tj, byteLevelTokenizerJSON(), 0o644)
	text := "héllo, wörld\n\t  12 😀 <|endoftext|> \u00a0"
	b, _ := json.Marshal([]string{text})
	os.WriteFile(in, b, 0o644)
	cmd := exec.Command("node", "hf.js", "encode", tj, in, out)
	cmd.Dir = ref
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node: %v\n%s", err, o)
	}
	var ids [][]int
	b, _ = os.ReadFile(out)
	if err := json.Unmarshal(b, &ids); err != nil || len(ids) != 1 || len(ids[0]) != len(text) {
		t.Fatalf("HF ids %v (%v), want one per byte of %q", ids, err, text)
	}
	for i := range len(text) {
		if ids[0][i] != int(text[i]) {
			t.Fatalf("byte %d (%#x) encoded as %d", i, text[i], ids[0][i])
		}
	}
}
