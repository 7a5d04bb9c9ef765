package tokenizer

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pkoukk/tiktoken-go"
	"unicode/utf8"
)

// fixtureDir is where `make tok-deps` installs Hugging Face's tokenizers
// library and the GPT-2 and Llama 3 vocabularies (testdata/tokenizers).
const fixtureDir = "../../testdata/tokenizers"

// referenceFiles writes gpt2.json and llama3.json with the reference side
// (hf.js) and returns their directory. Without Node.js or the installed
// packages the test skips, except under CI, where make test installs them.
func referenceFiles(t testing.TB) string {
	t.Helper()
	_, err := os.Stat(filepath.Join(fixtureDir, "node_modules", "tokenizers"))
	if _, nerr := exec.LookPath("node"); err != nil || nerr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("reference tokenizers not installed (run make tok-deps): %v %v", err, nerr)
		}
		t.Skip("needs node and `make tok-deps`")
	}
	dir := t.TempDir()
	runNode(t, "files", dir)
	return dir
}

func runNode(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command("node", append([]string{"hf.js"}, args...)...)
	cmd.Dir = fixtureDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node hf.js %s: %v\n%s", args[0], err, out)
	}
}

// hfEncode runs Hugging Face's library on texts.
func hfEncode(t testing.TB, tok string, texts []string) [][]int32 {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json")
	writeJSONFile(t, in, texts)
	abs, _ := filepath.Abs(tok)
	runNode(t, "encode", abs, in, out)
	var ids [][]int32
	readJSONFile(t, out, &ids)
	return ids
}

func writeJSONFile(t testing.TB, path string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSONFile(t testing.TB, path string, v any) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// testTexts are real files (Go sources, this repo's docs) cut at paragraph
// breaks, and generated strings that stress the split pattern: contractions,
// digit runs, whitespace runs before words, CRLF, accents, CJK, emoji.
func testTexts(t testing.TB, n int) []string {
	var texts []string
	files, _ := filepath.Glob(filepath.Join(runtime.GOROOT(), "src", "net", "http", "*.go"))
	more, _ := filepath.Glob("../../docs/*.md")
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range strings.Split(string(b), "\n\n") {
			if len(texts) < n/2 && p != "" {
				texts = append(texts, p)
			}
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	for len(texts) < n {
		texts = append(texts, randomText(r, 1+r.IntN(80)))
	}
	return texts
}

var atoms = []string{
	"the", " cat", "'s", "'S", "'ll", "'re", "n't", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n",
	"1", "12", "123", "1234567", "3.14", "é", "naïve", "Ünïcödé", "日本語", "中文", "😀", "👩‍👩‍👧",
	"…", "—", "!!", "?!", "((", "))", "{}", "<|", "|>", "__init__", "x=1;", "\u00a0", "ℕ", "𝔘",
	"Ελληνικά", "русский", "עִבְרִית", "العربية", "  \n", " \t ", "é́", "e\u0301",
}

func randomText(r *rand.Rand, n int) string {
	var sb strings.Builder
	for range n {
		if r.IntN(10) == 0 {
			sb.WriteRune(rune(0x20 + r.IntN(0x2FFF)))
			continue
		}
		sb.WriteString(atoms[r.IntN(len(atoms))])
	}
	return strings.ToValidUTF8(sb.String(), "")
}

// TestMatchesHuggingFace: token for token what Hugging Face's tokenizers
// library gives, on GPT-2's and Llama 3's tokenizer.json; and decoding gives
// the text back.
func TestMatchesHuggingFace(t *testing.T) {
	dir := referenceFiles(t)
	texts := testTexts(t, 2000)
	for _, name := range []string{"gpt2", "llama3"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".json")
			tok, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			want := hfEncode(t, path, texts)
			bad := 0
			for i, s := range texts {
				got := tok.Encode(s)
				if !slices.Equal(got, want[i]) {
					if bad++; bad <= 3 {
						t.Errorf("text %d %q:\n got %v\nwant %v", i, abbrev([]byte(s)), got, want[i])
					}
				}
				if d := tok.Decode(got); d != s {
					t.Errorf("text %d does not decode back: %q", i, abbrev([]byte(d)))
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d texts differ from Hugging Face", bad, len(texts))
			}
			t.Logf("%d texts identical to Hugging Face; vocab %d, eot %d", len(texts), tok.Vocab(), tok.EOT())
		})
	}
}

// TestKnownIDs pins the ids of one string on both real vocabularies (the
// values Hugging Face and tiktoken give), the vocabulary sizes and the
// end-of-text ids.
func TestKnownIDs(t *testing.T) {
	dir := referenceFiles(t)
	for _, c := range []struct {
		name       string
		ids        []int32
		vocab, eot int
	}{
		{"gpt2", []int32{15496, 995, 11, 17031, 30325, 222}, 50257, 50256},
		{"llama3", []int32{9906, 1917, 11, 220, 4513, 91416}, 128256, 128001},
	} {
		tok, err := Load(filepath.Join(dir, c.name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("Hello world, 123 😀"); !slices.Equal(got, c.ids) {
			t.Errorf("%s: %v, want %v", c.name, got, c.ids)
		}
		if tok.Vocab() != c.vocab || int(tok.EOT()) != c.eot {
			t.Errorf("%s: vocab %d eot %d, want %d %d", c.name, tok.Vocab(), tok.EOT(), c.vocab, c.eot)
		}
		if got := tok.Encode("<|endoftext|>"); len(got) < 2 {
			t.Errorf("%s: a special token's text became the special token: %v", c.name, got)
		}
	}
}

func TestByte(t *testing.T) {
	s := "héllo\x00\xff"
	ids := Byte{}.Encode(s)
	if len(ids) != len(s) || ids[1] != 0xC3 || ids[len(ids)-1] != 0xFF {
		t.Fatalf("encode: %v", ids)
	}
	if (Byte{}).Decode(ids) != s {
		t.Fatal("decode")
	}
	if got := (Byte{}).Decode([]int32{'a', 300, -1}); got != "a\uFFFD\uFFFD" {
		t.Fatalf("decode of unknown ids: %q", got)
	}
	if tok, err := Load("byte"); err != nil || tok.ID() != "byte" || tok.Vocab() != 256 || tok.EOT() != 0 {
		t.Fatalf("Load(byte) = %v, %v", tok, err)
	}
}

// tinyFile is a byte-level BPE tokenizer.json with three merges.
func tinyFile(mutate func(m map[string]any)) []byte {
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[ByteLevel(string([]byte{byte(b)}))] = b
	}
	vocab["ab"] = 256
	vocab["abc"] = 257
	vocab[ByteLevel(" ")+"x"] = 258
	f := map[string]any{
		"added_tokens":  []any{map[string]any{"id": 259, "content": "<|endoftext|>", "special": true}},
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"model": map[string]any{"type": "BPE", "vocab": vocab,
			"merges": []string{"a b", "ab c", ByteLevel(" ") + " x"}},
	}
	if mutate != nil {
		mutate(f)
	}
	b, _ := json.Marshal(f)
	return b
}

func TestParseHFSmall(t *testing.T) {
	tok, err := ParseHF(tinyFile(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("abcab x"); !slices.Equal(got, []int32{257, 256, 258}) {
		t.Fatalf("encode: %v", got)
	}
	if tok.Vocab() != 260 || tok.EOT() != 259 || tok.Decode([]int32{257, 259, 999}) != "abc<|endoftext|>\uFFFD" {
		t.Fatalf("vocab %d eot %d decode %q", tok.Vocab(), tok.EOT(), tok.Decode([]int32{257, 259, 999}))
	}
	if got := tok.Encode("a\xffb"); tok.Decode(got) != "a\uFFFDb" {
		t.Fatalf("invalid UTF-8: %v", got)
	}
}

// TestParseHFRejects: files this package cannot tokenize exactly are errors
// that say why, never a tokenizer that gives other ids.
func TestParseHFRejects(t *testing.T) {
	model := func(k string, v any) func(map[string]any) {
		return func(f map[string]any) { f["model"].(map[string]any)[k] = v }
	}
	cases := map[string][]byte{
		"not json":      []byte(`{"model": `),
		"wordpiece":     tinyFile(model("type", "WordPiece")),
		"byte fallback": tinyFile(model("byte_fallback", true)),
		"bad merge":     tinyFile(model("merges", []string{"abc"})),
		"normalizer":    tinyFile(func(f map[string]any) { f["normalizer"] = map[string]any{"type": "NFC"} }),
		"prefix space": tinyFile(func(f map[string]any) {
			f["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}
		}),
		"metaspace": tinyFile(func(f map[string]any) { f["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }),
		"no eot":    tinyFile(func(f map[string]any) { f["added_tokens"] = []any{} }),
		"bad regex": tinyFile(splitWith("(?<")),
		"not bytes": tinyFile(model("vocab", map[string]int{"\u4e00": 0})),
		"neg added": tinyFile(func(f map[string]any) { f["added_tokens"] = []any{map[string]any{"id": -1, "content": "x"}} }),
		"missing 0x": tinyFile(func(f map[string]any) {
			delete(f["model"].(map[string]any)["vocab"].(map[string]int), ByteLevel("\x00"))
		}),
	}
	for name, b := range cases {
		if _, err := ParseHF(b); err == nil || !strings.Contains(err.Error(), "tokenizer") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("a directory loaded as a tokenizer")
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing file loaded")
	}
}

func splitWith(re string) func(map[string]any) {
	return func(f map[string]any) {
		f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": re}, "behavior": "Isolated"},
			map[string]any{"type": "ByteLevel", "use_regex": false},
		}}
	}
}

func TestSplitPatternSequence(t *testing.T) {
	tok, err := ParseHF(tinyFile(splitWith(`\p{N}{1,3}|[^\p{N}]+`)))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Decode(tok.Encode("ab12345")); got != "ab12345" || !utf8.ValidString(got) {
		t.Fatalf("round trip: %q", got)
	}
}

// FuzzParseHF: any bytes either load as a tokenizer that round-trips text,
// or give an error; never a panic.
func FuzzParseHF(f *testing.F) {
	f.Add(tinyFile(nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := ParseHF(b)
		if err != nil {
			return
		}
		if s := "abc 12 é"; tok.Decode(tok.Encode(s)) != s {
			t.Fatalf("round trip failed")
		}
	})
}

// BenchmarkEncodeVsHF measures one core's encode throughput of ours and of
// Hugging Face's library (Node.js binding, one encode call at a time) on the
// same text in the same run: bytes/s of each and ours/HF.
func BenchmarkEncodeVsHF(b *testing.B) {
	dir := referenceFiles(b)
	var text strings.Builder
	files, _ := filepath.Glob(filepath.Join(runtime.GOROOT(), "src", "net", "http", "*.go"))
	for _, f := range files {
		s, _ := os.ReadFile(f)
		if text.Len() > 0 {
			text.WriteByte(0x1e) // document separator of hf.js bench
		}
		text.Write(s)
	}
	corpusFile := filepath.Join(b.TempDir(), "corpus.txt")
	os.WriteFile(corpusFile, []byte(text.String()), 0o644)
	docs := strings.Split(text.String(), "\x1e") // one document per file
	for _, name := range []string{"gpt2", "llama3"} {
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(dir, name+".json")
			tok, err := Load(path)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(text.Len()))
			for b.Loop() {
				for _, d := range docs {
					tok.Encode(d)
				}
			}
			ours := float64(text.Len()) * float64(b.N) / b.Elapsed().Seconds()
			cmd := exec.Command("node", "hf.js", "bench", path, corpusFile, "3")
			cmd.Dir = fixtureDir
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("node bench: %v", err)
			}
			var r struct{ Bytes, Tokens, Seconds float64 }
			if err := json.Unmarshal(out, &r); err != nil {
				b.Fatal(err)
			}
			hf := r.Bytes / r.Seconds
			b.ReportMetric(ours/1e6, "MB/s")
			b.ReportMetric(hf/1e6, "hf-MB/s")
			b.ReportMetric(ours/hf, "x-hf")
		})
	}
}

// TestLongPieces: the heap merge gives the rescanning merge's parts on long
// pieces of real vocabularies, the whole encoder gives tiktoken-go's ranks
// (an independent BPE implementation), and a megabyte-long piece costs
// about 16× a 64 KiB one, not 256× (as a quadratic merge would).
func TestLongPieces(t *testing.T) {
	dir := referenceFiles(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, name := range []string{"gpt2", "llama3"} {
		tok, err := Load(filepath.Join(dir, name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		b := tok.(*HF).bpe
		ref, err := tiktoken.NewCoreBPE(b.ranks, map[string]int{}, b.re.String())
		if err != nil {
			t.Fatal(err)
		}
		tk := tiktoken.NewTiktoken(ref, &tiktoken.Encoding{MergeableRanks: b.ranks}, nil)
		for i := range 200 {
			piece := randomLetters(r, 65+r.IntN(400), i%3 == 0)
			if h, s := b.mergeHeap(piece), b.mergeScan(piece); !slices.Equal(h, s) {
				t.Fatalf("%s: heap and scan merges differ on %q", name, piece)
			}
			text := randomText(r, 200) + piece + " " + piece[:65]
			var got []int
			b.encode(text, func(rk int) { got = append(got, rk) })
			if want := tk.EncodeOrdinary(text); !slices.Equal(got, want) {
				t.Fatalf("%s: differs from tiktoken-go on %q", name, abbrev([]byte(text)))
			}
		}
		// Linear, not quadratic: a 1 MiB piece against 64 KiB ones timed in
		// the same run (16× the work; a quadratic merge would be 256×).
		small := time.Duration(math.MaxInt64)
		for range 3 {
			start := time.Now()
			tok.Encode(randomLetters(r, 1<<16, false))
			small = min(small, time.Since(start))
		}
		took := time.Duration(math.MaxInt64)
		for range 2 {
			start := time.Now()
			tok.Encode(randomLetters(r, 1<<20, false))
			took = min(took, time.Since(start))
		}
		if ratio := float64(took) / float64(small); ratio > 64 {
			t.Fatalf("%s: a 1 MiB piece took %v, %.0f× a 64 KiB one (%v)", name, took, ratio, small)
		} else {
			t.Logf("%s: a 1 MiB letter run encoded in %v, %.1f× a 64 KiB one", name, took, ratio)
		}
	}
}

// randomLetters is a run of n letters (or, with digitsToo, letters and
// digits mixed so the split pattern cuts it differently).
func randomLetters(r *rand.Rand, n int, digitsToo bool) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	alphabet := letters
	if digitsToo {
		alphabet += "0123456789"
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// TestReadFile: the light read export uses takes any model type — the
// largest id over the vocabulary (map or Unigram list) and added tokens —
// and refuses what is not a tokenizer.json.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f, err := ReadFile(write("bpe.json", string(tinyFile(nil))))
	if err != nil || f.MaxID != 259 || len(f.Added) != 1 || f.Added[0].Content != "<|endoftext|>" {
		t.Fatalf("bpe file: %+v, %v", f, err)
	}
	f, err = ReadFile(write("unigram.json", `{"model":{"type":"Unigram","vocab":[["a",0],["b",-1],["c",-2]]}}`))
	if err != nil || f.MaxID != 2 {
		t.Fatalf("unigram file: %+v, %v", f, err)
	}
	for name, body := range map[string]string{
		"nojson.json":   `{"model":`,
		"novocab.json":  `{"model":{"type":"BPE","vocab":{}}}`,
		"negative.json": `{"model":{"type":"BPE","vocab":{"a":-1}}}`,
	} {
		if _, err := ReadFile(write(name, body)); !errors.Is(err, ErrTokenizer) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
