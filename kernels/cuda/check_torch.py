#!/usr/bin/env python3
"""check_torch.py — compare intellect-node's model with transformers' LlamaForCausalLM.

Usage (on a machine with PyTorch + transformers + safetensors; see docs/cuda.md):

    INTELLECT_TORCH_DIR=/tmp/torchcheck kernels/cuda/build.sh test -run TestExportForTorch ./train/gpu
    python3 kernels/cuda/check_torch.py /tmp/torchcheck

For every preset folder written by TestExportForTorch (config.json,
model.safetensors, logits.safetensors, check.json) it loads the weights into
LlamaForCausalLM unchanged (HF tensor names, rotate_half RoPE), runs the same
tokens in float32, and compares:
  * our CPU trainer's mean cross-entropy (fp32) with PyTorch's: must agree to 1e-4 relative;
  * our GPU engine's cross-entropy (bf16 compute) with PyTorch's: 1e-2 relative;
  * our GPU logits with PyTorch's logits: relative L2 error below 2e-2.
Exits 1 if any check fails.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM


def check_dir(d):
    with open(os.path.join(d, "check.json")) as f:
        chk = json.load(f)
    B, T = chk["batch"], chk["seq"]
    rows = torch.tensor(chk["rows"], dtype=torch.long).view(B, T + 1)
    cfg = LlamaConfig.from_pretrained(d)
    model = LlamaForCausalLM(cfg)
    state = load_file(os.path.join(d, "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if "rotary_emb" not in m]
    if missing or unexpected:
        raise SystemExit(f"{d}: state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.config._attn_implementation = "eager"
    model = model.float().eval()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(dev)
    with torch.no_grad():
        logits = model(rows[:, :T].to(dev)).logits.float().cpu()
    ce = F.cross_entropy(logits.reshape(B * T, -1), rows[:, 1:].reshape(-1)).item()
    ours = load_file(os.path.join(d, "logits.safetensors"))["logits"].float()
    lrel = ((ours - logits).norm() / logits.norm()).item()
    res = {
        "torch_ce": ce,
        "cpu_ce": chk["cpu_ce"],
        "gpu_ce": chk["gpu_ce"],
        "cpu_vs_torch_rel": abs(chk["cpu_ce"] - ce) / abs(ce),
        "gpu_vs_torch_rel": abs(chk["gpu_ce"] - ce) / abs(ce),
        "gpu_logits_rel_l2": lrel,
        "gpu_logits_max_abs": (ours - logits).abs().max().item(),
    }
    ok = res["cpu_vs_torch_rel"] < 1e-4 and res["gpu_vs_torch_rel"] < 1e-2 and lrel < 2e-2
    return ok, res


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("INTELLECT_TORCH_DIR", "")
    if not root:
        raise SystemExit("usage: check_torch.py DIR (the INTELLECT_TORCH_DIR of TestExportForTorch)")
    dirs = sorted(os.path.join(root, e) for e in os.listdir(root) if os.path.isfile(os.path.join(root, e, "check.json")))
    if not dirs:
        raise SystemExit(f"no check.json under {root}")
    failed = 0
    for d in dirs:
        ok, res = check_dir(d)
        failed += not ok
        print(("PASS" if ok else "FAIL"), os.path.basename(d), json.dumps(res))
    print(f"{len(dirs) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
