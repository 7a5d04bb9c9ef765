package main

import (
	"fmt"
	"strings"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/node/diloco"
)

// codecAveraging is run r's averaging without its judge or attack: codec
// fp32 is the plain float32 mean, int8 and int8-ef the nodes' ring
// all-reduce, robust the direct scatter (int8), and PATH-CODEC the ring
// (PATH ring) or the robust scatter (PATH robust) with a compressed codec
// (q4, q2, q1, topk), error feedback on, r's codec settings.
func codecAveraging(r sweepRun) (diloco.Averaging, error) {
	var a diloco.Averaging
	robust := collective.RobustConfig{MaxWeight: float32(r.H)}
	switch r.Codec {
	case "fp32":
		return a, nil
	case "int8": // as a node does
		a.Ring = &collective.AllReduceConfig{Shards: node.DefaultShards}
		return a, nil
	case "int8-ef":
		a.Ring = &collective.AllReduceConfig{Shards: node.DefaultShards, ErrorFeedback: true}
		return a, nil
	case "robust":
		a.Scatter = &collective.ScatterConfig{Shards: node.DefaultShards, Robust: robust}
		return a, nil
	}
	path, name, _ := strings.Cut(r.Codec, "-")
	c, ok := compressed[name]
	if !ok || (path != "ring" && path != "robust") {
		return a, fmt.Errorf("codec %q: want fp32, int8, int8-ef, robust, or ring-CODEC or robust-CODEC with CODEC q4, q2, q1 or topk", r.Codec)
	}
	beta := r.Beta
	if beta == 0 {
		beta = 1
	}
	if path == "ring" {
		a.Ring = &collective.AllReduceConfig{Shards: node.DefaultShards, Codec: c, ErrorFeedback: true,
			FeedbackDecay: beta, TopK: r.TopK, TopKBits: r.TopKBits}
		return a, a.Ring.Validate()
	}
	a.Scatter = &collective.ScatterConfig{Shards: node.DefaultShards, Codec: c, ErrorFeedback: true,
		FeedbackDecay: beta, TopK: r.TopK, TopKBits: r.TopKBits, Robust: robust, ResultFeedback: collective.Feedback(r.RFB)}
	return a, a.Scatter.Validate()
}

// compressed are the compressed codecs by name.
var compressed = map[string]collective.Codec{"q4": collective.CodecQ4, "q2": collective.CodecQ2, "q1": collective.CodecQ1, "topk": collective.CodecTopK}

// setCodecNumber sets one of the compressed codecs' numeric settings.
func (r *sweepRun) setCodecNumber(k string, f float64) {
	switch k {
	case "tk":
		r.TopK = int(f)
	case "tb":
		r.TopKBits = int(f)
	case "beta":
		r.Beta = float32(f)
	case "rfb":
		r.RFB = int(f)
	}
}
