package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/intellect-node/intellect-node/train"
	"github.com/intellect-node/intellect-node/train/tokenizer"
)

var (
	ckptOnce sync.Once
	ckptHome string
	ckptErr  error
)

// testCheckpoint returns a --home holding a checkpoint of a small model
// after a few steps on the default corpus, made once per test binary in
// TestMain's directory.
func testCheckpoint(t *testing.T) string {
	t.Helper()
	ckptOnce.Do(func() {
		o, err := train.DefaultOptions("tiny")
		if err != nil {
			ckptErr = err
			return
		}
		o.Model = train.Config{Name: "gen-test", Vocab: 256, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 64,
			SeqLen: 32, RopeTheta: 10000, NormEps: 1e-5, ZLoss: 1e-4}
		o.Batch, o.Seq, o.WarmupSteps, o.TotalSteps = 8, 32, 2, 20
		tr, err := train.NewTrainer(o, train.DefaultSource())
		if err != nil {
			ckptErr = err
			return
		}
		for range 10 {
			if _, ckptErr = tr.Step(); ckptErr != nil {
				return
			}
		}
		ckptHome = filepath.Join(filepath.Dir(binPath), "gen-home") // removed by TestMain
		_, ckptErr = tr.SaveCheckpoint(filepath.Join(ckptHome, "checkpoints"), 0)
	})
	if ckptErr != nil {
		t.Fatal(ckptErr)
	}
	return ckptHome
}

// runCmd runs a command's function and returns its output.
func runCmd(t *testing.T, f func(args []string, out, info *bytes.Buffer) error, args ...string) (string, error) {
	t.Helper()
	var out, info bytes.Buffer
	err := f(args, &out, &info)
	return out.String(), err
}

func gen(args []string, out, info *bytes.Buffer) error { return generate(args, out, info) }

func TestGenerateDeterministic(t *testing.T) {
	home := testCheckpoint(t)
	args := []string{"--checkpoint", home, "--prompt", "12+34=", "--max-tokens", "60", "--temperature", "1", "--seed", "7"}
	a, err := runCmd(t, gen, args...)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := runCmd(t, gen, args...)
	if a != b || len(a) != 61 { // 60 byte tokens (no EOT drawn from this corpus) and a newline
		t.Fatalf("same seed gave %q and %q", a, b)
	}
	c, _ := runCmd(t, gen, append(args, "--seed", "8")...)
	if a == c {
		t.Fatalf("seeds 7 and 8 gave the same text %q", a)
	}
}

// TestGenerateGreedyIsArgmax: at temperature 0 each token is the argmax of
// the model's logits after the text so far.
func TestGenerateGreedyIsArgmax(t *testing.T) {
	home := testCheckpoint(t)
	out, err := runCmd(t, gen, "--checkpoint", home, "--prompt", "3+4=", "--max-tokens", "40", "--temperature", "0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := train.LoadModel(home)
	if err != nil {
		t.Fatal(err)
	}
	tok := tokenizer.Byte{}
	logits, _ := m.Forward(tok.Encode("3+4="))
	want := make([]int32, 40)
	for i := range want {
		want[i] = train.Argmax(logits)
		logits, _ = m.Forward(want[i : i+1])
	}
	if out != tok.Decode(want)+"\n" {
		t.Fatalf("greedy text %q, argmax text %q", out, tok.Decode(want))
	}
}

func TestGenerateRejects(t *testing.T) {
	home := testCheckpoint(t)
	corrupt := t.TempDir()
	os.WriteFile(filepath.Join(corrupt, "state.json"), []byte("{not json"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prompt", "x"}, "--checkpoint is required"},
		{[]string{"--checkpoint", filepath.Join(home, "nope"), "--prompt", "x"}, "no such file"},
		{[]string{"--checkpoint", corrupt, "--prompt", "x"}, "bad checkpoint"},
		{[]string{"--checkpoint", home}, "--prompt is required"},
		{[]string{"--checkpoint", home, "--prompt", "x", "--temperature", "-1"}, "temperature"},
		{[]string{"--checkpoint", home, "--prompt", "x", "--top-p", "0"}, "top-p"},
		{[]string{"--checkpoint", home, "--prompt", "x", "--top-p", "1.5"}, "top-p"},
		{[]string{"--checkpoint", home, "--prompt", "x", "--max-tokens", "0"}, "--max-tokens"},
		{[]string{"--checkpoint", home, "--prompt", "x", "--context", "33"}, "context 33, want 1..32"},
		{[]string{"--checkpoint", home, "--prompt", "x", "--context", "-1"}, "--context"},
		{[]string{"--checkpoint", home, "--prompt", "x", "--tokenizer", "gpt2.json"}, "no such file"},
	} {
		if _, err := runCmd(t, gen, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestGenerateTokenizerLargerThanModel: a tokenizer.json of 260 ids does not
// fit the 256-token model.
func TestGenerateTokenizerLargerThanModel(t *testing.T) {
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[tokenizer.ByteLevel(string([]byte{byte(b)}))] = b
	}
	vocab["ab"], vocab["abc"] = 256, 257
	f := map[string]any{
		"added_tokens":  []any{map[string]any{"id": 258, "content": "<|endoftext|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"a b", "ab c"}},
	}
	b, _ := json.Marshal(f)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(path, b, 0o644)
	_, err := runCmd(t, gen, "--checkpoint", testCheckpoint(t), "--prompt", "abc", "--tokenizer", path)
	if err == nil || !strings.Contains(err.Error(), "259") || !strings.Contains(err.Error(), "256") {
		t.Fatalf("error %v, want one naming 259 and 256", err)
	}
}

func TestGenerateStreamsWholeCharacters(t *testing.T) {
	for s, want := range map[string]bool{"ab": false, "a\xc3": true, "a\xc3\xa9": false, "\xe2\x82": true, "\xff": false, "": false} {
		if incompleteTail(s) != want {
			t.Errorf("incompleteTail(%q) = %v", s, !want)
		}
	}
}

func scoreCmd(stdin string) func(args []string, out, info *bytes.Buffer) error {
	return func(args []string, out, info *bytes.Buffer) error {
		return score(args, strings.NewReader(stdin), out, info)
	}
}

// TestScoreJSON: the fields are there, the total is the sum of the files,
// bits_per_byte = mean_loss·tokens/ln 2/bytes, and the loss is the model's.
func TestScoreJSON(t *testing.T) {
	home := testCheckpoint(t)
	file := filepath.Join(t.TempDir(), "a.txt")
	text := strings.Repeat("12+34=46\n5+7=12\n", 6) // 96 bytes: three windows of the 32-token model
	os.WriteFile(file, []byte(text), 0o644)
	out, err := runCmd(t, scoreCmd("1+1=2\n"), "--checkpoint", home, file, "--json", "-")
	if err != nil {
		t.Fatal(err)
	}
	var rep scoreReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	for _, k := range []string{`"mean_loss"`, `"tokens"`, `"bytes"`, `"perplexity"`, `"bits_per_byte"`, `"files"`} {
		if !strings.Contains(out, k) {
			t.Fatalf("no %s in %s", k, out)
		}
	}
	if len(rep.Files) != 2 || rep.Tokens != 95+5 || rep.Bytes != 96+6 {
		t.Fatalf("files %d, tokens %d, bytes %d", len(rep.Files), rep.Tokens, rep.Bytes)
	}
	want := rep.MeanLoss * float64(rep.Tokens) / math.Ln2 / float64(rep.Bytes)
	if math.Abs(rep.BitsPerByte-want) > 1e-12*want || math.Abs(rep.Perplexity-math.Exp(rep.MeanLoss)) > 1e-9 {
		t.Fatalf("bits_per_byte %v perplexity %v for mean loss %v", rep.BitsPerByte, rep.Perplexity, rep.MeanLoss)
	}
	m, _ := train.LoadModel(home)
	nats, n, _ := m.Score(tokenizer.Byte{}.Encode(text))
	if f := rep.Files[0]; f.Tokens != n || math.Abs(f.MeanLoss-nats/float64(n)) > 1e-12 {
		t.Fatalf("file loss %v over %d, model says %v over %d", f.MeanLoss, f.Tokens, nats/float64(n), n)
	}
}

func TestScoreText(t *testing.T) {
	home := testCheckpoint(t)
	out, err := runCmd(t, scoreCmd("1+1=2\n"), "--checkpoint", home, "-")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "bits_per_byte") || !strings.HasPrefix(strings.TrimSpace(lines[1]), "-") {
		t.Fatalf("output %q", out)
	}
}

func TestScoreRejects(t *testing.T) {
	home := testCheckpoint(t)
	for _, tc := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"--checkpoint", home}, "", "no FILE"},
		{[]string{"-"}, "abc", "--checkpoint is required"},
		{[]string{"--checkpoint", home, "/nonexistent/file"}, "", "no such file"},
		{[]string{"--checkpoint", home, "-"}, "x", "too short"},
		{[]string{"--checkpoint", home, "--context", "40", "-"}, "abc", "context 40, want 1..32"},
		{[]string{"--checkpoint", t.TempDir(), "-"}, "abc", "holds no checkpoint"},
	} {
		if _, err := runCmd(t, scoreCmd(tc.stdin), tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
