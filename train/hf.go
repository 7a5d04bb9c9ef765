package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/intellect-node/intellect-node/train/tokenizer"
	"os"
	"path/filepath"
	"strconv"
)

// hfTransformersVersion is the transformers release whose LlamaConfig reads
// every field of hfConfig (head_dim and mlp_bias are the newest).
const hfTransformersVersion = "4.45.0"

// hfConfig is config.json of a LlamaForCausalLM, field for field as
// transformers' LlamaConfig reads it.
type hfConfig struct {
	Architectures         []string  `json:"architectures"`
	ModelType             string    `json:"model_type"`
	VocabSize             int       `json:"vocab_size"`
	HiddenSize            int       `json:"hidden_size"`
	IntermediateSize      int       `json:"intermediate_size"`
	NumHiddenLayers       int       `json:"num_hidden_layers"`
	NumAttentionHeads     int       `json:"num_attention_heads"`
	NumKeyValueHeads      int       `json:"num_key_value_heads"`
	HeadDim               int       `json:"head_dim"`
	MaxPositionEmbeddings int       `json:"max_position_embeddings"`
	RopeTheta             float64   `json:"rope_theta"`
	RopeScaling           *struct{} `json:"rope_scaling"` // always null
	RMSNormEps            float64   `json:"rms_norm_eps"`
	HiddenAct             string    `json:"hidden_act"`
	TieWordEmbeddings     bool      `json:"tie_word_embeddings"`
	AttentionBias         bool      `json:"attention_bias"`
	MLPBias               bool      `json:"mlp_bias"`
	AttentionDropout      float64   `json:"attention_dropout"`
	InitializerRange      float64   `json:"initializer_range"`
	PretrainingTP         int       `json:"pretraining_tp"`
	TorchDType            string    `json:"torch_dtype"`
	UseCache              bool      `json:"use_cache"`
	BOSTokenID            *int      `json:"bos_token_id"`
	EOSTokenID            *int      `json:"eos_token_id"`
	TransformersVersion   string    `json:"transformers_version"`
}

func newHFConfig(c Config, dt DType, tok *hfTokenizer) hfConfig {
	torch := "float32"
	if dt == BF16 {
		torch = "bfloat16"
	}
	return hfConfig{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
		VocabSize: c.Vocab, HiddenSize: c.Dim, IntermediateSize: c.FFN, NumHiddenLayers: c.Layers,
		NumAttentionHeads: c.Heads, NumKeyValueHeads: c.KVHeads, HeadDim: c.HeadDim(),
		MaxPositionEmbeddings: c.SeqLen, RopeTheta: c.RopeTheta, RMSNormEps: c.NormEps,
		HiddenAct: "silu", InitializerRange: 0.02, PretrainingTP: 1, TorchDType: torch, UseCache: true,
		BOSTokenID: tokenID(tok.bos), EOSTokenID: tokenID(tok.eos), TransformersVersion: hfTransformersVersion,
	}
}

// hfGenerationConfig is generation_config.json: greedy decoding up to the
// model's context length.
type hfGenerationConfig struct {
	BOSTokenID          *int   `json:"bos_token_id"`
	EOSTokenID          *int   `json:"eos_token_id"`
	MaxLength           int    `json:"max_length"`
	DoSample            bool   `json:"do_sample"`
	TransformersVersion string `json:"transformers_version"`
}

// hfToken is a special token of a tokenizer.
// hfToken is a special token of the tokenizer export writes.
type hfToken = tokenizer.AddedToken

func tokenID(t *hfToken) *int {
	if t == nil {
		return nil
	}
	id := int(t.ID)
	return &id
}

func tokenContent(t *hfToken) any {
	if t == nil {
		return nil
	}
	return t.Content
}

// hfTokenizer is the tokenizer.json to write and its bos/eos (nil: none).
type hfTokenizer struct {
	json     []byte
	bos, eos *hfToken
}

// loadHFTokenizer returns the byte tokenizer for spec "" or "byte", else
// reads the tokenizer.json at spec (tokenizer.ReadFile); its ids must be
// below vocab.
func loadHFTokenizer(spec string, vocab int) (*hfTokenizer, error) {
	if spec == "" || spec == "byte" {
		if vocab < 256 {
			return nil, fmt.Errorf("%w: the byte tokenizer needs vocab ≥ 256, model has %d", ErrConfig, vocab)
		}
		return &hfTokenizer{json: byteLevelTokenizerJSON()}, nil
	}
	f, err := tokenizer.ReadFile(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if f.MaxID >= vocab {
		return nil, fmt.Errorf("%w: %s has token ids up to %d, the model's vocab is %d", ErrConfig, spec, f.MaxID, vocab)
	}
	byName := map[string]*hfToken{}
	for i, t := range f.Added {
		byName[t.Content] = &f.Added[i]
	}
	return &hfTokenizer{json: f.Raw, bos: firstToken(byName, hfBOSNames), eos: firstToken(byName, hfEOSNames)}, nil
}

// Names of special tokens recognised as bos and eos, in order of preference.
var (
	hfBOSNames = []string{"<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>", "<|im_start|>"}
	hfEOSNames = []string{"<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>", "<|eot_id|>", "<|im_end|>"}
)

func firstToken(byName map[string]*hfToken, names []string) *hfToken {
	for _, n := range names {
		if t, ok := byName[n]; ok {
			return t
		}
	}
	return nil
}

// write writes tokenizer.json and tokenizer_config.json to dir.
func (t *hfTokenizer) write(dir string, seqLen int) error {
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), t.json, 0o644); err != nil {
		return err
	}
	cfg := map[string]any{
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"model_max_length":             seqLen,
		"clean_up_tokenization_spaces": false,
		"bos_token":                    tokenContent(t.bos),
		"eos_token":                    tokenContent(t.eos),
	}
	return writeJSONFile(filepath.Join(dir, "tokenizer_config.json"), cfg)
}

// byteLevelTokenizerJSON returns a tokenizer.json for the byte tokenizer
// (ByteTokenizer): a BPE model without merges whose vocab maps
// bytesToUnicode(b) to b, behind a ByteLevel pre-tokenizer without regex
// split or prefix space, so that every byte becomes the token of its value,
// and a ByteLevel decoder.
func byteLevelTokenizerJSON() []byte {
	var vocab bytes.Buffer
	vocab.WriteByte('{')
	for b := range 256 {
		r := tokenizer.ByteChar(byte(b))
		if b > 0 {
			vocab.WriteByte(',')
		}
		k, _ := json.Marshal(string(r))
		vocab.Write(k)
		vocab.WriteString(":" + strconv.Itoa(b))
	}
	vocab.WriteByte('}')
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
	model := map[string]any{
		"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
		"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false,
		"vocab": json.RawMessage(vocab.Bytes()), "merges": []string{},
	}
	tj := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": []any{},
		"normalizer": nil, "pre_tokenizer": byteLevel, "post_processor": nil,
		"decoder": byteLevel, "model": model,
	}
	b, err := json.MarshalIndent(tj, "", "  ")
	if err != nil {
		panic(err) // static content
	}
	return b
}
