package node

import (
	"fmt"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

// The codecs of the pseudo-gradient, as Config.Codec and the run manifest
// name them (docs/allreduce.md has their formats and costs).
const (
	// CodecInt8: one byte per value and a 256-entry table per chunk,
	// re-quantized hop by hop on the ring, once by each owner on the
	// robust scatter; error feedback optional (--error-feedback).
	CodecInt8 = "int8"
	// CodecFP32: float32 values, the plain ring mean only (comparisons).
	CodecFP32 = "fp32"
	// CodecQ4 and CodecQ2: dense 4- and 2-bit values with a table of bucket
	// means per chunk, error feedback always on.
	CodecQ4 = "q4"
	CodecQ2 = "q2"
	// CodecTopK: per 4096-value block the TopK entries of largest
	// magnitude of the error-feedback buffer, TopKBits bits each plus a
	// 12-bit index (SparseLoCo's recipe).
	CodecTopK = "topk"
)

// codecs maps the codec names to collective's codecs.
var codecs = map[string]collective.Codec{
	CodecInt8: collective.CodecInt8, CodecFP32: collective.CodecFP32,
	CodecQ4: collective.CodecQ4, CodecQ2: collective.CodecQ2, CodecTopK: collective.CodecTopK,
}

// Point is a codec's operating point: the DiLoCo settings a run with that
// codec takes where its creator gives none (docs/traffic.md "The shipped
// default"). Config's zero fields take them; the run manifest records the
// values, so joiners train as the creator does.
type Point struct {
	InnerSteps     int     // H
	OuterLR        float32 // outer Nesterov rate
	OuterMomentum  float32 // outer Nesterov μ
	WorkerMomentum float32 // each member's own momentum (Config.WorkerMomentum)
	LRDecay        float64 // fraction of the schedule the inner rate decays over; 0: the preset's
}

// Q2Point is the default codec's point: 2-bit values every 26 inner steps,
// 415× less than fp32 data-parallel training; the outer Nesterov step
// (0.7, 0.6) with the momentum kept by each member, so that robust owners
// compare momenta; the inner rate decayed over the schedule's second half.
// At M = 4 it ends +2.54 % of one node with a 4× batch on Go source (mean
// of 4 seeds) and below it on the embedded corpus.
var Q2Point = Point{InnerSteps: 26, OuterLR: 0.7, OuterMomentum: 0, WorkerMomentum: 0.6, LRDecay: 0.5}

// Int8Point is every other codec's point: plain averaging every 5 inner
// steps (20× less than data-parallel with int8), the defaults before q2;
// `--codec int8` trains the same bits as then (TestInt8PointHashes).
var Int8Point = Point{InnerSteps: 5, OuterLR: 1, OuterMomentum: 0, WorkerMomentum: 0, LRDecay: 0}

// CodecPoint returns the operating point of codec.
func CodecPoint(codec string) Point {
	if codec == CodecQ2 {
		return Q2Point
	}
	return Int8Point
}

// compressedCodec reports whether codec is one of the compressed codecs,
// which always carry the member's error-feedback buffer.
func compressedCodec(codec string) bool {
	return codec == CodecQ4 || codec == CodecQ2 || codec == CodecTopK
}

// resolveCodec fills the codec settings' defaults: --fp32 is codec fp32;
// a compressed codec turns error feedback on and takes DefaultFeedbackDecay;
// top-k settings belong to codec topk only.
func (c *Config) resolveCodec() error {
	if c.FP32 {
		if c.Codec != "" && c.Codec != CodecFP32 {
			return fmt.Errorf("%w: --fp32 with --codec %s", ErrBadConfig, c.Codec)
		}
		c.Codec = CodecFP32
	}
	defString(&c.Codec, DefaultCodec)
	if _, ok := codecs[c.Codec]; !ok {
		return fmt.Errorf("%w: --codec %q: want int8, q4, q2, topk or fp32", ErrBadConfig, c.Codec)
	}
	c.FP32 = c.Codec == CodecFP32
	if !compressedCodec(c.Codec) {
		if c.FeedbackDecay != 0 || c.TopK != 0 || c.TopKBits != 0 {
			return fmt.Errorf("%w: --feedback-decay, --topk and --topk-bits belong to the codecs q4, q2 and topk, not %s", ErrBadConfig, c.Codec)
		}
		return nil
	}
	c.ErrorFeedback = true
	if c.FeedbackDecay == 0 {
		c.FeedbackDecay = DefaultFeedbackDecay
	}
	if c.Codec != CodecTopK && (c.TopK != 0 || c.TopKBits != 0) {
		return fmt.Errorf("%w: --topk and --topk-bits belong to codec topk, not %s", ErrBadConfig, c.Codec)
	}
	if c.Codec == CodecTopK {
		defInt(&c.TopK, DefaultTopK)
		defInt(&c.TopKBits, collective.DefaultTopKBits)
	}
	ar := c.allReduceConfig()
	if err := ar.Validate(); err != nil {
		return fmt.Errorf("%w: --codec %s with --shards %d: %v", ErrBadConfig, c.Codec, c.Shards, err)
	}
	return nil
}

// allReduceConfig is the ring all-reduce's configuration of a node with c.
func (c Config) allReduceConfig() collective.AllReduceConfig {
	codec := codecs[c.Codec]
	if c.FP32 {
		codec = collective.CodecFP32
	}
	ar := collective.AllReduceConfig{Shards: c.Shards, Codec: codec, ErrorFeedback: c.ErrorFeedback,
		FeedbackDecay: c.FeedbackDecay, TopK: c.TopK, TopKBits: c.TopKBits}
	if ar.Codec == collective.CodecTopK {
		ar.TopKBlock = collective.DefaultTopKBlock
	}
	return ar
}

// scatterConfig is the robust direct scatter's configuration of a node
// with c: the owners' rule caps weights at H, and they keep what an audit
// needs.
func (c Config) scatterConfig() collective.ScatterConfig {
	ar := c.allReduceConfig()
	sc := collective.ScatterConfig{Shards: ar.Shards, Codec: ar.Codec, ErrorFeedback: ar.ErrorFeedback,
		FeedbackDecay: ar.FeedbackDecay, TopK: ar.TopK, TopKBlock: ar.TopKBlock, TopKBits: ar.TopKBits, Audit: true,
		Robust: collective.RobustConfig{MaxWeight: float32(c.InnerSteps)}}
	if compressedCodec(c.Codec) {
		sc.ResultFeedback = collective.FeedbackOff
		if c.ResultFeedback {
			sc.ResultFeedback = collective.FeedbackOn
		}
	}
	return sc
}

// compression is the run manifest's record of c's codec.
func (c Config) compression() Compression {
	cm := Compression{Codec: c.Codec, ErrorFeedback: c.ErrorFeedback, Shards: c.Shards}
	if compressedCodec(c.Codec) {
		cm.FeedbackDecay, cm.ResultFeedback = c.FeedbackDecay, c.ResultFeedback
	}
	if c.Codec == CodecTopK {
		cm.TopK, cm.TopKBlock, cm.TopKBits = c.TopK, collective.DefaultTopKBlock, c.TopKBits
	}
	return cm
}

// applyCompression makes a manifest's codec c's.
func (c *Config) applyCompression(cm Compression) {
	c.Shards, c.Codec, c.ErrorFeedback = cm.Shards, cm.Codec, cm.ErrorFeedback
	c.FP32 = cm.Codec == CodecFP32
	c.FeedbackDecay, c.ResultFeedback, c.TopK, c.TopKBits = cm.FeedbackDecay, cm.ResultFeedback, cm.TopK, cm.TopKBits
}

// validate rejects a codec record this version cannot run or that does not
// say every setting of its arithmetic.
func (cm Compression) validate(averaging string) error {
	if _, ok := codecs[cm.Codec]; !ok {
		return fmt.Errorf("codec %q: want int8, q4, q2, topk or fp32", cm.Codec)
	}
	if averaging == AveragingRobust && cm.Codec == CodecFP32 {
		return fmt.Errorf("robust averaging does not send %s", cm.Codec)
	}
	if !compressedCodec(cm.Codec) {
		if cm.FeedbackDecay != 0 || cm.ResultFeedback || cm.TopK != 0 || cm.TopKBlock != 0 || cm.TopKBits != 0 {
			return fmt.Errorf("codec %s takes no feedback decay, result feedback or top-k settings", cm.Codec)
		}
		return nil
	}
	if !cm.ErrorFeedback || !(cm.FeedbackDecay > 0 && cm.FeedbackDecay <= 1) {
		return fmt.Errorf("codec %s needs error feedback and a decay in (0, 1], not %v / %v", cm.Codec, cm.ErrorFeedback, cm.FeedbackDecay)
	}
	if cm.Codec != CodecTopK && (cm.TopK != 0 || cm.TopKBlock != 0 || cm.TopKBits != 0) {
		return fmt.Errorf("codec %s takes no top-k settings", cm.Codec)
	}
	if cm.Codec == CodecTopK && (cm.TopK == 0 || cm.TopKBlock == 0 || cm.TopKBits == 0) {
		return fmt.Errorf("codec topk needs topk, topk_block and topk_bits")
	}
	ar := collective.AllReduceConfig{Shards: cm.Shards, Codec: codecs[cm.Codec], ErrorFeedback: true,
		FeedbackDecay: cm.FeedbackDecay, TopK: cm.TopK, TopKBlock: cm.TopKBlock, TopKBits: cm.TopKBits}
	return ar.Validate()
}
