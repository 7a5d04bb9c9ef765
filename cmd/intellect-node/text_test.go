package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestRealTextPipeline: real text in, a model out, as a user runs it —
// tokenize two corpora, train a node on a named mixture of them (its status
// counts tokens per source), then score and generate from its checkpoint.
func TestRealTextPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process e2e test")
	}
	dir := t.TempDir()
	tokenize := func(name string, args ...string) {
		out, err := exec.Command(binPath, append([]string{"tokenize", "--tokenizer", "byte", "--out", filepath.Join(dir, name)}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tokenize %s: %v\n%s", name, err, out)
		}
	}
	tokenize("code", "--include", "*.go", filepath.Join(runtime.GOROOT(), "src", "fmt"), filepath.Join(runtime.GOROOT(), "src", "strconv"))
	tokenize("docs", "--include", "*.md", "--heldout", "0.2", filepath.Join("..", "..", "docs"), filepath.Join("..", "..", "README.md"))
	mix := filepath.Join(dir, "mix.json")
	os.WriteFile(mix, []byte(`{"sources": [{"name": "code", "path": "code", "weight": 3}, {"name": "docs", "path": "docs", "weight": 1}]}`), 0o644)

	p := startNode(t, "a", "", "--run", "text", "--preset", "tiny", "--inner-steps", "8", "--min-members", "1",
		"--max-outer-steps", "4", "--data", mix)
	var by map[string]int64
	waitFor(t, 3*time.Minute, "tokens from both sources in /v1/status", func() bool {
		s, err := p.status()
		if err != nil {
			return false
		}
		by = s.TokensBySource
		// ≥ 48 sequences of 65 tokens: each is drawn from one source with
		// the weights' odds, so code's share has a standard deviation of
		// ≈ 0.06 around 0.75 (a ratio of 3).
		return by["code"] > 0 && by["docs"] > 0 && by["code"]+by["docs"] >= 48*65
	}, p)
	if r := float64(by["code"]) / float64(by["docs"]); r < 1.2 || r > 20 { // code's share 0.55–0.95: > 3 sd
		t.Errorf("tokens by source %v: code/docs %.2f, want about 3 (the weights)", by, r)
	}
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("node did not finish 4 outer steps")
	}

	text := filepath.Join(runtime.GOROOT(), "src", "fmt", "print.go")
	out, err := exec.Command(binPath, "score", "--checkpoint", p.home, "--json", text).Output()
	if err != nil {
		t.Fatalf("score: %v", err)
	}
	var sc struct {
		MeanLoss    float64 `json:"mean_loss"`
		Tokens      int64   `json:"tokens"`
		BitsPerByte float64 `json:"bits_per_byte"`
	}
	if err := json.Unmarshal(out, &sc); err != nil || sc.Tokens < 1000 || !(sc.BitsPerByte > 0 && sc.BitsPerByte < 8) {
		t.Fatalf("score: %s (%v)", out, err)
	}
	gen := func() string {
		out, err := exec.Command(binPath, "generate", "--checkpoint", p.home, "--prompt", "func (p *pp) ",
			"--max-tokens", "40", "--seed", "7", "--temperature", "0.8").Output()
		if err != nil {
			t.Fatalf("generate: %v", err)
		}
		return string(out)
	}
	if a, b := gen(), gen(); a != b || len(a) < 40 {
		t.Fatalf("generate with one seed gave %q then %q", a, b)
	}
	fmt.Fprintf(os.Stderr, "real text: %.3f bits per byte on fmt/print.go after 24 steps\n", sc.BitsPerByte)
}
