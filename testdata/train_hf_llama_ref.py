#!/usr/bin/env python3
"""Independent reference for train/: a pure-Python (standard library only)
forward pass of Hugging Face's LlamaForCausalLM, written from transformers'
modeling_llama.py conventions (rotate_half RoPE, repeat_kv grouped heads,
nn.Linear weights stored (out, in), SiLU-gated MLP), reading the weights from
a safetensors file with its own parser.

usage: train_hf_llama_ref.py DIR
  DIR/model.safetensors  weights with HF names
  DIR/config.json        {"vocab", "dim", "layers", "heads", "kv_heads", "ffn", "rope_theta", "norm_eps"}
  DIR/tokens.json        {"inputs": [...], "targets": [...]}
prints JSON {"ce": mean cross-entropy, "logits": [[...] per position]}
"""
import json
import math
import struct
import sys


def load_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e
        b, en = e["data_offsets"]
        vals = struct.unpack("<%df" % ((en - b) // 4), data[b:en])
        shape = e["shape"]
        if len(shape) == 2:
            rows, cols = shape
            out[name] = [list(vals[r * cols:(r + 1) * cols]) for r in range(rows)]
        else:
            out[name] = list(vals)
    return out


def linear(x, w):  # x: [in], w: [out][in] -> [out]
    return [sum(a * b for a, b in zip(row, x)) for row in w]


def rms_norm(x, w, eps):
    var = sum(v * v for v in x) / len(x)
    r = 1.0 / math.sqrt(var + eps)
    return [v * r * g for v, g in zip(x, w)]


def rotate_half(x):
    h = len(x) // 2
    return [-v for v in x[h:]] + x[:h]


def apply_rope(x, pos, theta):
    d = len(x)
    inv_freq = [1.0 / (theta ** (i / d)) for i in range(0, d, 2)]
    freqs = [pos * f for f in inv_freq]
    emb = freqs + freqs
    cos = [math.cos(e) for e in emb]
    sin = [math.sin(e) for e in emb]
    rh = rotate_half(x)
    return [a * c + b * s for a, b, c, s in zip(x, rh, cos, sin)]


def silu(v):
    return v / (1.0 + math.exp(-v))


def main():
    d = sys.argv[1]
    W = load_safetensors(d + "/model.safetensors")
    cfg = json.load(open(d + "/config.json"))
    toks = json.load(open(d + "/tokens.json"))
    C, L, H, KVH = cfg["dim"], cfg["layers"], cfg["heads"], cfg["kv_heads"]
    hd, eps, theta = C // H, cfg["norm_eps"], cfg["rope_theta"]
    T = len(toks["inputs"])
    x = [list(W["model.embed_tokens.weight"][t]) for t in toks["inputs"]]
    for l in range(L):
        p = "model.layers.%d." % l
        h = [rms_norm(v, W[p + "input_layernorm.weight"], eps) for v in x]
        q = [linear(v, W[p + "self_attn.q_proj.weight"]) for v in h]
        k = [linear(v, W[p + "self_attn.k_proj.weight"]) for v in h]
        v_ = [linear(v, W[p + "self_attn.v_proj.weight"]) for v in h]
        att = []
        for t in range(T):
            row = []
            for head in range(H):
                kv = head // (H // KVH)  # repeat_kv
                qh = apply_rope(q[t][head * hd:(head + 1) * hd], t, theta)
                scores = []
                for s in range(t + 1):
                    kh = apply_rope(k[s][kv * hd:(kv + 1) * hd], s, theta)
                    scores.append(sum(a * b for a, b in zip(qh, kh)) / math.sqrt(hd))
                m = max(scores)
                e = [math.exp(sc - m) for sc in scores]
                z = sum(e)
                out = [0.0] * hd
                for s in range(t + 1):
                    vh = v_[s][kv * hd:(kv + 1) * hd]
                    for i in range(hd):
                        out[i] += e[s] / z * vh[i]
                row += out
            att.append(row)
        x = [[a + b for a, b in zip(xv, linear(av, W[p + "self_attn.o_proj.weight"]))] for xv, av in zip(x, att)]
        h = [rms_norm(v, W[p + "post_attention_layernorm.weight"], eps) for v in x]
        mlp = []
        for v in h:
            g = linear(v, W[p + "mlp.gate_proj.weight"])
            u = linear(v, W[p + "mlp.up_proj.weight"])
            mlp.append(linear([silu(a) * b for a, b in zip(g, u)], W[p + "mlp.down_proj.weight"]))
        x = [[a + b for a, b in zip(xv, mv)] for xv, mv in zip(x, mlp)]
    x = [rms_norm(v, W["model.norm.weight"], eps) for v in x]
    logits = [linear(v, W["lm_head.weight"]) for v in x]
    ce = 0.0
    for row, tgt in zip(logits, toks["targets"]):
        m = max(row)
        ce += m + math.log(sum(math.exp(v - m) for v in row)) - row[tgt]
    print(json.dumps({"ce": ce / T, "logits": logits}))


if __name__ == "__main__":
    main()
