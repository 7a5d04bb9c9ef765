package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// gpt2Pattern is the split pattern of a ByteLevel pre-tokenizer with
// use_regex true (GPT-2's).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// eotNames are the end-of-text tokens looked for, in order, among the added
// tokens: GPT-2's, Llama 3's, SentencePiece's, Llama 3 instruct's.
var eotNames = []string{"<|endoftext|>", "<|end_of_text|>", "</s>", "<|eot_id|>"}

// HF is a Hugging Face byte-level BPE tokenizer read from tokenizer.json.
type HF struct {
	id      string
	bpe     *bpe
	rankID  []int32          // tiktoken rank → token id
	idBytes map[int32]string // token id → bytes (vocabulary and added tokens)
	vocab   int
	eot     int32
	added   []AddedToken
}

// AddedToken is one of tokenizer.json's added tokens.
type AddedToken struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
}

type hfFile struct {
	AddedTokens  []AddedToken    `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        struct {
		Type         string          `json:"type"`
		Vocab        map[string]int  `json:"vocab"`
		Merges       json.RawMessage `json:"merges"`
		ByteFallback bool            `json:"byte_fallback"`
		Prefix       *string         `json:"continuing_subword_prefix"`
		Suffix       *string         `json:"end_of_word_suffix"`
	} `json:"model"`
}

type preTok struct {
	Type           string                  `json:"type"`
	AddPrefixSpace bool                    `json:"add_prefix_space"`
	UseRegex       bool                    `json:"use_regex"`
	Pretokenizers  []preTok                `json:"pretokenizers"`
	Pattern        *struct{ Regex string } `json:"pattern"`
	Behavior       string                  `json:"behavior"`
	Invert         bool                    `json:"invert"`
}

// ParseHF reads a tokenizer.json. It accepts what GPT-2 and Llama 3 ship:
// model BPE over byte-level symbols, no normalizer, a ByteLevel pre-tokenizer
// (GPT-2's pattern) or a Split on a regex followed by ByteLevel without regex.
func ParseHF(b []byte) (*HF, error) {
	var f hfFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json: %v", ErrTokenizer, err)
	}
	if err := checkModel(&f); err != nil {
		return nil, err
	}
	pattern, err := splitPattern(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}
	t := &HF{id: fileID("hf-bpe", b), idBytes: map[int32]string{}, added: f.AddedTokens}
	ranks, err := t.buildRanks(f.Model.Vocab, merges)
	if err != nil {
		return nil, err
	}
	if err := t.addTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	if t.bpe, err = newBPE(pattern, ranks); err != nil {
		return nil, fmt.Errorf("%w: split pattern: %v", ErrTokenizer, err)
	}
	return t, nil
}

func checkModel(f *hfFile) error {
	m := f.Model
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("%w: model type %q, only byte-level BPE is supported", ErrTokenizer, m.Type)
	case len(f.Normalizer) > 0 && string(f.Normalizer) != "null":
		return fmt.Errorf("%w: a normalizer is not supported (GPT-2 and Llama 3 have none)", ErrTokenizer)
	case m.ByteFallback || (m.Prefix != nil && *m.Prefix != "") || (m.Suffix != nil && *m.Suffix != ""):
		return fmt.Errorf("%w: byte_fallback and subword prefixes/suffixes are not supported", ErrTokenizer)
	case len(m.Vocab) < 256 || len(m.Vocab) > 1<<24:
		return fmt.Errorf("%w: vocabulary of %d tokens", ErrTokenizer, len(m.Vocab))
	}
	return nil
}

// splitPattern returns the regex that cuts text into pieces before BPE.
func splitPattern(raw json.RawMessage) (string, error) {
	var p preTok
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", fmt.Errorf("%w: pre_tokenizer: %v", ErrTokenizer, err)
	}
	bad := fmt.Errorf("%w: pre_tokenizer %s is not a byte-level one this package supports", ErrTokenizer, abbrev(raw))
	switch {
	case p.Type == "ByteLevel" && p.UseRegex && !p.AddPrefixSpace:
		return gpt2Pattern, nil
	case p.Type != "Sequence" || len(p.Pretokenizers) != 2:
		return "", bad
	}
	s, bl := p.Pretokenizers[0], p.Pretokenizers[1]
	if s.Type != "Split" || s.Pattern == nil || s.Pattern.Regex == "" || s.Behavior != "Isolated" || s.Invert ||
		bl.Type != "ByteLevel" || bl.UseRegex || bl.AddPrefixSpace {
		return "", bad
	}
	return s.Pattern.Regex, nil
}

func abbrev(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "…"
	}
	return string(b)
}

// parseMerges accepts both forms tokenizer.json uses: "a b" and ["a", "b"].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var pairs [][2]string
	if json.Unmarshal(raw, &pairs) == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("%w: merges: %v", ErrTokenizer, err)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok {
			return nil, fmt.Errorf("%w: merge %d %q is not two symbols", ErrTokenizer, i, l)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

// buildRanks orders the vocabulary as BPE merges it: single bytes first, then
// every merged token by its first merge, then tokens no merge makes (reachable
// only as whole pieces). tiktoken merges by this rank; rankID maps back.
func (t *HF) buildRanks(vocab map[string]int, merges [][2]string) (map[string]int, error) {
	first := make(map[string]int, len(merges))
	for i, m := range merges {
		if _, seen := first[m[0]+m[1]]; !seen {
			first[m[0]+m[1]] = i
		}
	}
	type entry struct {
		bytes string
		id    int32
		order int
	}
	es := make([]entry, 0, len(vocab))
	for sym, id := range vocab {
		raw, ok := unByteLevel(sym)
		if !ok || id < 0 || id >= 1<<24 {
			return nil, fmt.Errorf("%w: vocabulary entry %q (id %d) is not byte-level", ErrTokenizer, sym, id)
		}
		e := entry{bytes: raw, id: int32(id), order: len(merges) + id}
		if m, ok := first[sym]; ok {
			e.order = m
		}
		if len(raw) == 1 {
			e.order = -256 + int(raw[0])
		}
		if prev, dup := t.idBytes[e.id]; dup {
			return nil, fmt.Errorf("%w: id %d names both %q and %q", ErrTokenizer, id, prev, raw)
		}
		t.idBytes[e.id] = raw
		t.vocab = max(t.vocab, id+1)
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool {
		return es[i].order < es[j].order || es[i].order == es[j].order && es[i].id < es[j].id
	})
	ranks := make(map[string]int, len(es))
	t.rankID = make([]int32, len(es))
	for r, e := range es {
		if _, dup := ranks[e.bytes]; dup {
			return nil, fmt.Errorf("%w: two vocabulary entries decode to %q", ErrTokenizer, e.bytes)
		}
		ranks[e.bytes] = r
		t.rankID[r] = e.id
	}
	for b := 0; b < 256; b++ {
		if _, ok := ranks[string([]byte{byte(b)})]; !ok {
			return nil, fmt.Errorf("%w: byte %#02x has no token", ErrTokenizer, b)
		}
	}
	return ranks, nil
}

func (t *HF) addTokens(added []AddedToken) error {
	t.eot = -1
	for _, a := range added {
		if a.ID < 0 || a.ID >= 1<<24 || a.Content == "" {
			return fmt.Errorf("%w: added token %q with id %d", ErrTokenizer, a.Content, a.ID)
		}
		t.idBytes[a.ID] = a.Content
		t.vocab = max(t.vocab, int(a.ID)+1)
	}
	for _, name := range eotNames {
		for _, a := range added {
			if a.Content == name && t.eot < 0 {
				t.eot = a.ID
			}
		}
	}
	if t.eot < 0 {
		return fmt.Errorf("%w: no end-of-text token among the added tokens (looked for %s)", ErrTokenizer, strings.Join(eotNames, ", "))
	}
	return nil
}

// ID returns "hf-bpe:" and the first 16 hex digits of the file's SHA-256.
func (t *HF) ID() string { return t.id }

// Vocab returns one more than the largest id, added tokens included.
func (t *HF) Vocab() int { return t.vocab }

// EOT returns the end-of-text id.
func (t *HF) EOT() int32 { return t.eot }

// Added returns the added (special) tokens of the file.
func (t *HF) Added() []AddedToken { return t.added }

// Encode tokenizes text literally (as tiktoken's encode_ordinary); invalid
// UTF-8 bytes become U+FFFD first, as Hugging Face's library sees them.
func (t *HF) Encode(text string) []int32 {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	out := make([]int32, 0, len(text)/3)
	t.bpe.encode(text, func(r int) { out = append(out, t.rankID[r]) })
	return out
}

// Decode returns the text of ids; unknown ids become U+FFFD. Bytes that do
// not form UTF-8 are kept as they are (a cut inside a character).
func (t *HF) Decode(ids []int32) string {
	var sb strings.Builder
	for _, id := range ids {
		s, ok := t.idBytes[id]
		if !ok {
			s = "\uFFFD"
		}
		sb.WriteString(s)
	}
	return sb.String()
}
