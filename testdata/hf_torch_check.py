#!/usr/bin/python3
"""Independent check of `intellect-node export --hf OUT`: a plain PyTorch
forward pass of Hugging Face's LlamaForCausalLM, written from transformers'
modeling_llama.py conventions (LlamaRMSNorm, rotate_half RoPE with
inv_freq = 1/theta^(2i/d) and emb = cat(freqs, freqs), repeat_kv grouped
heads, causal softmax attention scaled by 1/sqrt(head_dim), SiLU-gated MLP,
nn.Linear weights stored (out, in), untied lm_head). It reads only
OUT/config.json (HF keys) and OUT/model.safetensors, parsed by hand
(struct + json + torch.frombuffer; F32 and BF16), and computes in float32
(bf16 weights are widened exactly, so only their rounding differs).

Runs on Debian's python3-torch 1.13 (/usr/bin/python3): no
scaled_dot_product_attention, no safetensors or transformers package.

usage: hf_torch_check.py OUT TOKENS [--ref LOGITS.json]
  TOKENS   comma-separated ids ("1,2,3") or a JSON file: a list of ids or {"tokens": [...]}
  --ref    JSON file {"logits": [[...] per position]} (or a bare list of rows)
prints JSON {"logits": [[...]]} or, with --ref,
  {"max_abs_diff": d, "max_abs_ref": m, "positions": T, "vocab": V}
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2)}


def load_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    meta = header.pop("__metadata__", {})
    assert meta.get("format") == "pt", "metadata %r: want format=pt" % meta
    out = {}
    for name, e in header.items():
        dtype, size = DTYPES[e["dtype"]]
        b, en = e["data_offsets"]
        count = math.prod(e["shape"])
        assert en - b == count * size, (name, e)
        t = torch.frombuffer(data, dtype=dtype, count=count, offset=b) if count else torch.zeros(0, dtype=dtype)
        out[name] = t.reshape(e["shape"]).float()
    return out


def rms_norm(x, w, eps):  # LlamaRMSNorm
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(T, hd, theta):  # LlamaRotaryEmbedding, default rope_type
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):  # (B, KVH, T, hd) -> (B, KVH*n_rep, T, hd)
    B, KVH, T, hd = x.shape
    return x[:, :, None, :, :].expand(B, KVH, n_rep, T, hd).reshape(B, KVH * n_rep, T, hd)


def attention(x, W, p, cfg, cos, sin):
    B, T, _ = x.shape
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // H
    lin = torch.nn.functional.linear
    q = lin(x, W[p + "self_attn.q_proj.weight"]).view(B, T, H, hd).transpose(1, 2)
    k = lin(x, W[p + "self_attn.k_proj.weight"]).view(B, T, KVH, hd).transpose(1, 2)
    v = lin(x, W[p + "self_attn.v_proj.weight"]).view(B, T, KVH, hd).transpose(1, 2)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    k, v = repeat_kv(k, H // KVH), repeat_kv(v, H // KVH)
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd)
    mask = torch.full((T, T), float("-inf")).triu(1)
    probs = torch.softmax(scores + mask, dim=-1, dtype=torch.float32)
    out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, H * hd)
    return lin(out, W[p + "self_attn.o_proj.weight"])


def check_config(cfg):
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama", cfg
    assert cfg["hidden_act"] == "silu" and cfg.get("rope_scaling") is None, cfg
    assert not cfg["attention_bias"] and not cfg["mlp_bias"] and not cfg["tie_word_embeddings"], cfg


def forward(cfg, W, tokens):
    check_config(cfg)
    eps, lin = cfg["rms_norm_eps"], torch.nn.functional.linear
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    ids = torch.tensor([tokens], dtype=torch.int64)
    cos, sin = rope(len(tokens), hd, float(cfg["rope_theta"]))
    x = torch.nn.functional.embedding(ids, W["model.embed_tokens.weight"])
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        x = x + attention(rms_norm(x, W[p + "input_layernorm.weight"], eps), W, p, cfg, cos, sin)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(lin(h, W[p + "mlp.gate_proj.weight"]))
        x = x + lin(g * lin(h, W[p + "mlp.up_proj.weight"]), W[p + "mlp.down_proj.weight"])
    x = rms_norm(x, W["model.norm.weight"], eps)
    return lin(x, W["lm_head.weight"])[0]


def read_tokens(arg):
    if arg.endswith(".json"):
        with open(arg) as f:
            v = json.load(f)
        return v["tokens"] if isinstance(v, dict) else v
    return [int(s) for s in arg.split(",") if s.strip()]


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--ref"):
        sys.exit(__doc__)
    out, tokens = argv[0], read_tokens(argv[1])
    with open(out + "/config.json") as f:
        cfg = json.load(f)
    W = load_safetensors(out + "/model.safetensors")
    with torch.no_grad():
        logits = forward(cfg, W, tokens)
    if len(argv) == 2:
        print(json.dumps({"logits": logits.tolist()}))
        return
    with open(argv[3]) as f:
        ref = json.load(f)
    ref = torch.tensor(ref["logits"] if isinstance(ref, dict) else ref, dtype=torch.float64)
    assert ref.shape == logits.shape, (tuple(ref.shape), tuple(logits.shape))
    d = (logits.double() - ref).abs().max().item()
    print(json.dumps({"max_abs_diff": d, "max_abs_ref": ref.abs().max().item(),
                      "positions": logits.shape[0], "vocab": logits.shape[1]}))


if __name__ == "__main__":
    main(sys.argv[1:])
