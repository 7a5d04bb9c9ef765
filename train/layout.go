package train

import "fmt"

// TensorInfo names one tensor inside the flat parameter vector.
type TensorInfo struct {
	Name   string `json:"name"`   // Hugging Face Llama name, e.g. model.layers.0.self_attn.q_proj.weight
	Shape  []int  `json:"shape"`  // row-major; matrices are (out, in) as in PyTorch nn.Linear
	Offset int    `json:"offset"` // first element in the flat vector
}

// Size returns the number of elements of the tensor.
func (t TensorInfo) Size() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Layout returns the tensors of the flat parameter vector in order. Within a
// layer q_proj, k_proj and v_proj are adjacent (so together they form the fused
// qkv matrix), and so are gate_proj and up_proj. q and k use the HF rotate_half
// RoPE convention, so LlamaForCausalLM loads these weights unchanged.
func (c Config) Layout() []TensorInfo {
	C, F, hd := c.Dim, c.FFN, c.HeadDim()
	q, kv := c.Heads*hd, c.KVHeads*hd
	var ts []TensorInfo
	off := 0
	add := func(name string, shape ...int) {
		t := TensorInfo{Name: name, Shape: shape, Offset: off}
		off += t.Size()
		ts = append(ts, t)
	}
	add("model.embed_tokens.weight", c.Vocab, C)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", C)
		add(p+"self_attn.q_proj.weight", q, C)
		add(p+"self_attn.k_proj.weight", kv, C)
		add(p+"self_attn.v_proj.weight", kv, C)
		add(p+"self_attn.o_proj.weight", C, q)
		add(p+"post_attention_layernorm.weight", C)
		add(p+"mlp.gate_proj.weight", F, C)
		add(p+"mlp.up_proj.weight", F, C)
		add(p+"mlp.down_proj.weight", C, F)
	}
	add("model.norm.weight", C)
	add("lm_head.weight", c.Vocab, C)
	return ts
}

// isNorm reports whether a tensor is a norm gain (no weight decay, init 1).
func (t TensorInfo) isNorm() bool { return len(t.Shape) == 1 }
