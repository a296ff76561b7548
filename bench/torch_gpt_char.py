#!/usr/bin/env python3
"""PyTorch eager training loop of gpt_char (nanoGPT's baby config), the peer of bench/train_step.sh.

Same model as samples/gpt_char.json (4 layers, 4 heads, C 128, T 64, V 65, no biases, layernorm
without bias, exact (erf) GELU, tied head), same step (forward, backward, clip 1.0, AdamW with weight
decay on >= 2-D params), same batch (12 x 64 tokens of tinyshakespeare). Prints the median
milliseconds per step over the timed steps after warm-up on stdout, and one line on stderr naming
the torch, its BLAS and (where it is OpenBLAS) the kernel set OpenBLAS chose:
    torch 1.13.0a0 | BLAS OpenBLAS 0.3.21 ... | kernel Prescott | threads 2

usage: torch_gpt_char.py DATA THREADS WARMUP STEPS

THREADS goes to torch.set_num_threads; the caller must also set OMP_NUM_THREADS=THREADS before
Python starts (bench/train_step.sh does): Debian's torch 1.13 links the pthread OpenBLAS, whose
own pool otherwise takes every core whatever set_num_threads says.
"""
import ctypes
import ctypes.util
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, C, NH, L = 12, 64, 128, 4, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.Parameter(torch.ones(C))
        self.c_attn = nn.Linear(C, 3 * C, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)
        self.ln_2 = nn.Parameter(torch.ones(C))
        self.c_fc = nn.Linear(C, 4 * C, bias=False)
        self.mlp_proj = nn.Linear(4 * C, C, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        q, k, v = self.c_attn(F.layer_norm(x, (C,), self.ln_1)).split(C, dim=2)
        q = q.view(B, T, NH, C // NH).transpose(1, 2)
        k = k.view(B, T, NH, C // NH).transpose(1, 2)
        v = v.view(B, T, NH, C // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
        att = F.softmax(att.masked_fill(~self.mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(F.layer_norm(x, (C,), self.ln_2)), approximate="none"))


class GPT(nn.Module):
    def __init__(self, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Parameter(torch.randn(T, C) * 0.02)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.Parameter(torch.ones(C))

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe
        for blk in self.h:
            x = blk(x)
        logits = F.linear(F.layer_norm(x, (C,), self.ln_f), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def blas_info():
    """The BLAS this torch runs: MKL for PyPI's builds, else whatever libblas.so.3 is (Debian's
    torch 1.13 links it; on Debian it is OpenBLAS through the alternatives system)."""
    config = torch.__config__.show()
    if "BLAS_INFO=mkl" in config or "Intel(R) oneAPI Math Kernel Library" in config or "Intel(R) Math Kernel Library" in config:
        return "BLAS MKL | kernel (MKL dispatch)"
    for name in ("libblas.so.3", "libopenblas.so.0"):
        try:
            lib = ctypes.CDLL(name)  # already loaded by torch: the same handle
            lib.openblas_get_config.restype = lib.openblas_get_corename.restype = ctypes.c_char_p
            return "BLAS %s | kernel %s" % (lib.openblas_get_config().decode(), lib.openblas_get_corename().decode())
        except (OSError, AttributeError):
            continue
    return "BLAS unknown | kernel unknown"


def main():
    path, threads, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    sys.stderr.write("torch %s | %s | threads %d\n" % (torch.__version__, blas_info(), torch.get_num_threads()))
    torch.manual_seed(0)
    raw = open(path, "rb").read()
    vocab = sorted(set(raw))
    lut = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([lut[c] for c in raw[: len(raw) * 9 // 10]], dtype=torch.long)
    model = GPT(len(vocab))
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    times = []
    for it in range(warmup + steps):
        ix = torch.randint(len(data) - T - 1, (B,))
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if it >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    print("%.2f" % (1000 * times[len(times) // 2]))


if __name__ == "__main__":
    main()
