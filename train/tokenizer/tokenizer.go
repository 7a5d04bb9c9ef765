// Package tokenizer turns text into the token ids the model trains on and
// back: a byte-level tokenizer (one token per byte) and Hugging Face
// tokenizer.json byte-level BPE as GPT-2 and Llama 3 ship it.
//
// BPE encoding follows tiktoken's rule over ranks built from the
// tokenizer.json (bpe.go: the split pattern by github.com/dlclark/regexp2, a
// heap merge for long pieces); it is exact against Hugging Face's own library
// on GPT-2 and Llama 3 (hf_test.go runs both on the same texts), see
// docs/data.md.
package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// ErrTokenizer is wrapped by every error about a tokenizer file this package
// cannot load.
var ErrTokenizer = errors.New("tokenizer")

// Tokenizer encodes text to token ids and decodes them back.
type Tokenizer interface {
	// ID names the tokenizer for manifests and checkpoints: "byte", or
	// "hf-bpe:" and the first 16 hex digits of the file's SHA-256.
	ID() string
	// Vocab is one more than the largest id Encode may return.
	Vocab() int
	// Encode tokenizes text literally: strings that look like special tokens
	// ("<|endoftext|>") are encoded as text, never as the special token.
	Encode(text string) []int32
	// Decode returns the text of ids; ids it does not know decode to U+FFFD.
	Decode(ids []int32) string
	// EOT is the end-of-text id that separates documents.
	EOT() int32
}

// maxFile bounds a tokenizer.json (Llama 3's is 9 MB).
const maxFile = 64 << 20

// Load returns the tokenizer spec names: "byte" (or "") for the byte-level
// tokenizer, else the path of a Hugging Face tokenizer.json.
func Load(spec string) (Tokenizer, error) {
	if spec == "" || spec == "byte" {
		return Byte{}, nil
	}
	b, err := readLimited(spec, maxFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenizer, err)
	}
	t, err := ParseHF(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, spec)
	}
	return t, nil
}

// File is a tokenizer.json as read from disk, of any model type (export
// copies files this package cannot encode with): its bytes, its added
// tokens, and the largest id of its vocabulary and added tokens.
type File struct {
	Raw   []byte
	Added []AddedToken
	MaxID int
}

// ReadFile reads the tokenizer.json at path, as Load does, but only for
// what describes it.
func ReadFile(path string) (*File, error) {
	b, err := readLimited(path, maxFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenizer, err)
	}
	var tj struct {
		AddedTokens []AddedToken `json:"added_tokens"`
		Model       struct {
			Type  string          `json:"type"`
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return nil, fmt.Errorf("%w: %s is not a tokenizer.json: %v", ErrTokenizer, path, err)
	}
	maxID, err := vocabMaxID(tj.Model.Vocab)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: model %q: %v", ErrTokenizer, path, tj.Model.Type, err)
	}
	for _, t := range tj.AddedTokens {
		maxID = max(maxID, int(t.ID))
	}
	return &File{Raw: b, Added: tj.AddedTokens, MaxID: maxID}, nil
}

// vocabMaxID returns the largest id of a tokenizer model's vocab: a map
// token → id (BPE, WordPiece, WordLevel) or a list of [piece, score] (Unigram).
func vocabMaxID(raw json.RawMessage) (int, error) {
	var m map[string]int
	if err := json.Unmarshal(raw, &m); err == nil && len(m) > 0 {
		maxID := 0
		for _, id := range m {
			if id < 0 {
				return 0, fmt.Errorf("negative token id %d", id)
			}
			maxID = max(maxID, id)
		}
		return maxID, nil
	}
	var l []json.RawMessage
	if err := json.Unmarshal(raw, &l); err == nil && len(l) > 0 {
		return len(l) - 1, nil
	}
	return 0, fmt.Errorf("no vocab")
}

func readLimited(path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory, want a tokenizer.json file or \"byte\"", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, st.Size(), limit)
	}
	return os.ReadFile(path)
}

func fileID(kind string, b []byte) string {
	h := sha256.Sum256(b)
	return kind + ":" + hex.EncodeToString(h[:8])
}

// Byte is the byte-level tokenizer: token i is byte i, vocabulary 256, and
// the end-of-text id is 0 (NUL, which text files do not contain).
type Byte struct{}

// ID returns "byte".
func (Byte) ID() string { return "byte" }

// Vocab returns 256.
func (Byte) Vocab() int { return 256 }

// EOT returns 0.
func (Byte) EOT() int32 { return 0 }

// Encode returns the bytes of text as ids.
func (Byte) Encode(text string) []int32 {
	out := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		out[i] = int32(text[i])
	}
	return out
}

// Decode returns the bytes of ids; ids outside 0..255 become U+FFFD.
func (Byte) Decode(ids []int32) string {
	b := make([]byte, 0, len(ids))
	for _, t := range ids {
		if t < 0 || t > 255 {
			b = append(b, "\uFFFD"...)
			continue
		}
		b = append(b, byte(t))
	}
	return string(b)
}
