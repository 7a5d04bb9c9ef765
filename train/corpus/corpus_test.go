package corpus

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"

	"github.com/intellect-node/intellect-node/train"
	"github.com/intellect-node/intellect-node/train/tokenizer"
)

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func zst(b []byte) []byte {
	e, _ := zstd.NewWriter(nil)
	return e.EncodeAll(b, nil)
}

type row struct {
	Text string `parquet:"text"`
	ID   int64  `parquet:"id"`
}

// corpusTree writes one input of every kind and returns the documents in
// the order Tokenize must read them.
func corpusTree(t *testing.T) (string, []string) {
	dir := t.TempDir()
	var docs []string
	// Lexical walk order: a.txt, b.jsonl.gz, bin.dat (skipped), c.parquet, d.txt.zst, sub/e.ndjson
	write(t, filepath.Join(dir, "a.txt"), []byte("first document\nwith two lines\n"))
	docs = append(docs, "first document\nwith two lines\n")
	var jl strings.Builder
	for i := range 50 {
		s := fmt.Sprintf("json doc %d: \"quoted\" é", i)
		fmt.Fprintf(&jl, "{\"text\": %q, \"n\": %d}\n\n", s, i)
		docs = append(docs, s)
	}
	write(t, filepath.Join(dir, "b.jsonl.gz"), gz([]byte(jl.String())))
	write(t, filepath.Join(dir, "bin.dat"), []byte{1, 2, 0, 3})
	var rows []row
	for i := range 300 {
		rows = append(rows, row{Text: fmt.Sprintf("parquet row %d %s", i, strings.Repeat("x", i%7)), ID: int64(i)})
		docs = append(docs, rows[i].Text)
	}
	if err := parquet.WriteFile(filepath.Join(dir, "c.parquet"), rows, parquet.Compression(&parquet.Zstd)); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "d.txt.zst"), zst([]byte("zstd text")))
	docs = append(docs, "zstd text")
	write(t, filepath.Join(dir, "sub", "e.ndjson"), []byte(`{"text":"nested"}`+"\n"))
	docs = append(docs, "nested")
	write(t, filepath.Join(dir, ".hidden", "x.txt"), []byte("never read"))
	return dir, docs
}

// readBack returns the documents of a split, cut at the end-of-text token.
func readBack(t *testing.T, dir string, s Split, tok tokenizer.Tokenizer) []string {
	var all []int32
	for _, name := range s.Shards {
		sh, err := train.OpenShard(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for i := range sh.Len() {
			v, _ := sh.Token(i)
			all = append(all, v)
		}
		sh.Close()
	}
	var docs []string
	start := 0
	for i, v := range all {
		if v == tok.EOT() {
			docs = append(docs, tok.Decode(all[start:i]))
			start = i + 1
		}
	}
	if start != len(all) {
		t.Fatalf("%d tokens after the last end-of-text", len(all)-start)
	}
	return docs
}

func TestTokenizeEveryFormat(t *testing.T) {
	in, docs := corpusTree(t)
	out := filepath.Join(t.TempDir(), "out")
	tok := tokenizer.Byte{}
	m, err := Tokenize(context.Background(), Options{Tokenizer: tok, ShardTokens: 1024}, out, []string{in})
	if err != nil {
		t.Fatal(err)
	}
	got := readBack(t, out, m.Train, tok)
	if strings.Join(got, "|") != strings.Join(docs, "|") {
		t.Fatalf("documents differ:\n got %q\nwant %q", got[:min(5, len(got))], docs[:5])
	}
	if len(m.Skipped) != 1 || !strings.HasSuffix(m.Skipped[0].Path, "bin.dat") {
		t.Fatalf("skipped: %+v", m.Skipped)
	}
	if m.Sources[0].Files != 5 || m.Sources[0].Documents != int64(len(docs)) || len(m.Train.Shards) < 2 {
		t.Fatalf("manifest: %+v", m)
	}
	m2, err := ReadManifest(out)
	if err != nil || m2.Train.Tokens != m.Train.Tokens {
		t.Fatalf("read manifest: %v %+v", err, m2)
	}
}

// TestSameShardsAnyWorkers: 1 and 3 workers write byte-identical shards, and
// the held-out documents are whole documents, about the asked fraction.
func TestSameShardsAnyWorkers(t *testing.T) {
	in, docs := corpusTree(t)
	var outs []string
	for _, w := range []int{1, 3} {
		out := filepath.Join(t.TempDir(), "out")
		m, err := Tokenize(context.Background(), Options{Tokenizer: tokenizer.Byte{}, Workers: w, HeldOut: 0.2, ShardTokens: 4096}, out, []string{in})
		if err != nil {
			t.Fatal(err)
		}
		held := readBack(t, out, m.Held, tokenizer.Byte{})
		if n := len(held); n < len(docs)/10 || n > len(docs)*3/10 || int64(n) != m.Held.Documents {
			t.Fatalf("%d of %d documents held out, want about 20 %%", n, len(docs))
		}
		outs = append(outs, out)
	}
	for _, sub := range []string{"train", "heldout"} {
		a, _ := filepath.Glob(filepath.Join(outs[0], sub, "*"))
		for _, f := range a {
			x, _ := os.ReadFile(f)
			y, err := os.ReadFile(filepath.Join(outs[1], sub, filepath.Base(f)))
			if err != nil || !bytes.Equal(x, y) {
				t.Fatalf("%s/%s differs between 1 and 3 workers", sub, filepath.Base(f))
			}
		}
	}
}

// TestTrainReadsTokenizedDir: train.OpenSource on the output draws training
// windows from train/ only and held-out windows from heldout/ only.
func TestTrainReadsTokenizedDir(t *testing.T) {
	in := t.TempDir()
	for i := range 40 {
		letter := "t"
		if isHeld(0.25, fmt.Sprintf("%02d.txt", i), 0) {
			letter = "h"
		}
		write(t, filepath.Join(in, fmt.Sprintf("%02d.txt", i)), []byte(strings.Repeat(letter, 300)))
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Tokenize(context.Background(), Options{Tokenizer: tokenizer.Byte{}, HeldOut: 0.25}, out, []string{in}); err != nil {
		t.Fatal(err)
	}
	src, err := train.OpenSource(out)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]int32, 4*32)
	for i := range 20 {
		src.Train(row, 4, 32, train.Key{Seed: 1, Step: i})
		if bytes.ContainsRune([]byte(tokenizer.Byte{}.Decode(row)), 'h') {
			t.Fatal("a held-out document in a training row")
		}
		src.Eval(row, 4, 32, i)
		if bytes.ContainsRune([]byte(tokenizer.Byte{}.Decode(row)), 't') {
			t.Fatal("a training document in a held-out row")
		}
	}
	if n := src.(*train.ShardSource).TokensBySource()[out]; n != 20*4*32 {
		t.Fatalf("tokens by source: %d", n)
	}
}

func TestTokenizeErrors(t *testing.T) {
	in, _ := corpusTree(t)
	nonEmpty := t.TempDir()
	write(t, filepath.Join(nonEmpty, "x"), []byte("x"))
	badJSON := t.TempDir()
	write(t, filepath.Join(badJSON, "a.jsonl"), []byte("{\"text\":\"ok\"}\n{\"text\": 3}\n"))
	badPq := t.TempDir()
	write(t, filepath.Join(badPq, "a.parquet"), []byte("PAR1 not really"))
	empty := t.TempDir()
	write(t, filepath.Join(empty, "a.txt"), nil)
	ok := Options{Tokenizer: tokenizer.Byte{}}
	for name, c := range map[string]struct {
		opts   Options
		out    string
		inputs []string
		want   string
	}{
		"no inputs":      {ok, "", nil, "no input"},
		"missing input":  {ok, "", []string{filepath.Join(in, "nope")}, "no such file"},
		"out not empty":  {ok, nonEmpty, []string{in}, "not empty"},
		"heldout 1":      {Options{Tokenizer: tokenizer.Byte{}, HeldOut: 1}, "", []string{in}, "heldout"},
		"bad json line":  {ok, "", []string{badJSON}, "a.jsonl:2"},
		"wrong field":    {Options{Tokenizer: tokenizer.Byte{}, TextField: "body"}, "", []string{in}, "\"body\""},
		"bad parquet":    {ok, "", []string{badPq}, "a.parquet"},
		"bad include":    {Options{Tokenizer: tokenizer.Byte{}, Include: "["}, "", []string{in}, "include"},
		"nothing matchs": {Options{Tokenizer: tokenizer.Byte{}, Include: "*.rs"}, "", []string{in}, "no files"},
		"only empty":     {ok, "", []string{empty}, "no text"},
	} {
		out := c.out
		if out == "" {
			out = filepath.Join(t.TempDir(), "out")
		}
		_, err := Tokenize(context.Background(), c.opts, out, c.inputs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to say %q", name, err, c.want)
		}
		if c.out == "" {
			if _, serr := os.Stat(out); serr == nil {
				t.Errorf("%s: a failed run left %s behind", name, out)
			}
		}
	}
}

func TestTokenizeCancel(t *testing.T) {
	in, _ := corpusTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Tokenize(ctx, Options{Tokenizer: tokenizer.Byte{}}, filepath.Join(t.TempDir(), "o"), []string{in}); err == nil {
		t.Fatal("a cancelled run succeeded")
	}
}
