package node

import (
	"errors"
	"testing"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

// TestCodecSettings: each codec resolves to the collective configuration
// and manifest record it names, and the record validates.
func TestCodecSettings(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want collective.AllReduceConfig
	}{
		{Config{Codec: CodecInt8}, collective.AllReduceConfig{Shards: DefaultShards, Codec: collective.CodecInt8}},
		{Config{FP32: true, Averaging: AveragingMean}, collective.AllReduceConfig{Shards: DefaultShards, Codec: collective.CodecFP32}},
		{Config{Codec: CodecQ2}, collective.AllReduceConfig{Shards: DefaultShards, Codec: collective.CodecQ2, ErrorFeedback: true, FeedbackDecay: DefaultFeedbackDecay}},
		{Config{Codec: CodecTopK, FeedbackDecay: 0.9, TopK: 32, TopKBits: 4}, collective.AllReduceConfig{Shards: DefaultShards,
			Codec: collective.CodecTopK, ErrorFeedback: true, FeedbackDecay: 0.9, TopK: 32, TopKBlock: collective.DefaultTopKBlock, TopKBits: 4}},
	} {
		c := tc.cfg
		c.Home = t.TempDir()
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v: %v", tc.cfg, err)
		}
		if got := c.allReduceConfig(); got != tc.want {
			t.Errorf("%s: all-reduce config %+v, want %+v", c.Codec, got, tc.want)
		}
		if err := c.compression().validate(c.Averaging); err != nil {
			t.Errorf("%s: its manifest record %+v does not validate: %v", c.Codec, c.compression(), err)
		}
		var back Config
		back.applyCompression(c.compression())
		if back.allReduceConfig() != tc.want {
			t.Errorf("%s: the manifest record gives %+v back", c.Codec, back.allReduceConfig())
		}
	}
}

// TestCodecRejects: settings that do not belong together are errors, in
// the config and in a manifest's record.
func TestCodecRejects(t *testing.T) {
	for _, c := range []Config{
		{Codec: "int4"},
		{Codec: CodecInt8, TopK: 8},
		{Codec: CodecQ4, TopK: 8},
		{Codec: CodecInt8, FeedbackDecay: 0.9},
		{Codec: CodecQ2, FeedbackDecay: 1.5},
		{Codec: CodecTopK, TopKBits: 3},
		{Codec: CodecTopK, TopK: 5000},
		{Codec: CodecQ4, FP32: true},
		{Codec: CodecFP32, Averaging: AveragingRobust},
	} {
		c.Home = t.TempDir()
		if err := c.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: Validate = %v, want ErrBadConfig", c, err)
		}
	}
	good := Compression{Codec: CodecTopK, ErrorFeedback: true, Shards: 4, FeedbackDecay: 0.95, TopK: 64, TopKBlock: 4096, TopKBits: 2}
	for name, change := range map[string]func(*Compression){
		"no feedback":        func(c *Compression) { c.ErrorFeedback = false },
		"no decay":           func(c *Compression) { c.FeedbackDecay = 0 },
		"no topk":            func(c *Compression) { c.TopK = 0 },
		"no block":           func(c *Compression) { c.TopKBlock = 0 },
		"int8 with topk":     func(c *Compression) { c.Codec = CodecInt8 },
		"q2 with topk":       func(c *Compression) { c.Codec = CodecQ2 },
		"unknown codec":      func(c *Compression) { c.Codec = "zip" },
		"decay above 1":      func(c *Compression) { c.FeedbackDecay = 2 },
		"int8 result feedbk": func(c *Compression) { *c = Compression{Codec: CodecInt8, Shards: 4, ResultFeedback: true} },
	} {
		c := good
		change(&c)
		if c.validate(AveragingRobust) == nil {
			t.Errorf("%s: %+v validates", name, c)
		}
	}
	if err := good.validate(AveragingRobust); err != nil {
		t.Fatal(err)
	}
}
