#!/usr/bin/env python3
"""PyTorch eager training loop of gpt_char (nanoGPT's baby config), the peer of bench/train_step.sh.

--model llama_char runs samples/llama_char.json's model instead (bench/torch_llama.py, written as
torchtitan writes its Llama, with the file's initialisation; its shape is the file's, --batch and
--context apply, the other shape options are gpt_char's only); the step, the batch and the output
are the same. --compile wraps the model in torch.compile (PyTorch 2.x; inductor's C++ code on the
CPU), compiled during the warm-up steps, which must then be at least 1. What follows describes
gpt_char.

Same model as samples/gpt_char.json (4 layers, 4 heads, C 128, T 64, V 65, no biases, layernorm
without bias, exact (erf) GELU, tied head) and its initialisation (nanoGPT's: normal 0.02, the
residual projections 0.02 / sqrt(2 L)), same step (forward, backward, clip 1.0, AdamW with weight
decay on >= 2-D params), same batch (12 x 64 tokens of tinyshakespeare). Other shapes of the same
model (bench/train_step.sh's gpt_wide, samples/gen_gpt.py's options) come from the options below;
V is the data's (65 characters for tinyshakespeare). Prints the median milliseconds per step over
the timed steps after warm-up on stdout, and on stderr one line naming the torch, its BLAS and
(where it is OpenBLAS) the kernel set OpenBLAS chose, and one with the first step's loss (about
ln V at this initialisation):
    torch 1.13.0a0 | BLAS OpenBLAS 0.3.21 ... | kernel Prescott | threads 2
    loss at step 1 4.2361

usage: torch_gpt_char.py DATA THREADS WARMUP STEPS [--batch B] [--context T] [--embd C]
                         [--heads NH] [--layers L]        (defaults gpt_char's: 12 64 128 4 4)
                         [--model gpt_char|llama_char] [--compile]

THREADS goes to torch.set_num_threads; the caller must also set OMP_NUM_THREADS=THREADS before
Python starts (bench/train_step.sh does): Debian's torch 1.13 links the pthread OpenBLAS, whose
own pool otherwise takes every core whatever set_num_threads says.
"""
import argparse
import ctypes
import ctypes.util
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llama  # noqa: E402  (llama_char's model)

# The shape: gpt_char's, or main()'s options (module globals, as bench/torch_pipeline.py imports them).
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
        B, T, C = x.shape  # noqa: N806  (bench/torch_pipeline.py runs it on microbatches of its own)
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
        nn.init.normal_(self.wte.weight, std=0.02)  # nanoGPT's init, as samples/gen_gpt.py writes it
        for blk in self.h:
            for lin, std in ((blk.c_attn, 0.02), (blk.c_proj, 0.02 / math.sqrt(2 * L)),
                             (blk.c_fc, 0.02), (blk.mlp_proj, 0.02 / math.sqrt(2 * L))):
                nn.init.normal_(lin.weight, std=std)

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
    global B, T, C, NH, L
    ap = argparse.ArgumentParser(description="PyTorch eager training step of gpt_char (or another shape of it)")
    ap.add_argument("data")
    ap.add_argument("threads", type=int)
    ap.add_argument("warmup", type=int)
    ap.add_argument("steps", type=int)
    ap.add_argument("--batch", type=int, default=B, help="rows per step (default %d)" % B)
    ap.add_argument("--context", type=int, default=T, help="tokens per row T (default %d)" % T)
    ap.add_argument("--embd", type=int, default=C, help="embedding width C (default %d)" % C)
    ap.add_argument("--heads", type=int, default=NH, help="attention heads (default %d)" % NH)
    ap.add_argument("--layers", type=int, default=L, help="transformer blocks (default %d)" % L)
    ap.add_argument("--model", choices=("gpt_char", "llama_char"), default="gpt_char")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    a = ap.parse_args()
    if min(a.batch, a.context, a.embd, a.heads, a.layers, a.threads) < 1 or a.steps < 1 or a.warmup < 0:
        ap.error("sizes, threads and steps must be >= 1, warmup >= 0")
    if a.embd % a.heads:
        ap.error("--embd %d is not divisible by --heads %d" % (a.embd, a.heads))
    if a.compile and (a.warmup < 1 or not hasattr(torch, "compile")):
        ap.error("--compile needs torch.compile (PyTorch 2.x) and a warm-up of at least 1 step")
    B, T, C, NH, L = a.batch, a.context, a.embd, a.heads, a.layers
    path, threads, warmup, steps = a.data, a.threads, a.warmup, a.steps
    torch.set_num_threads(threads)
    sys.stderr.write("torch %s | %s | threads %d | %s%s\n" % (torch.__version__, blas_info(), torch.get_num_threads(),
                                                          a.model, " | torch.compile" if a.compile else ""))
    torch.manual_seed(0)
    raw = open(path, "rb").read()
    vocab = sorted(set(raw))
    lut = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([lut[c] for c in raw[: len(raw) * 9 // 10]], dtype=torch.long)
    if a.model == "llama_char":
        model = torch_llama.Transformer(**dict(torch_llama.LLAMA, V=len(vocab), T=T))
    else:
        model = GPT(len(vocab))
    params = list(model.parameters())
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    times = []
    for it in range(warmup + steps):
        ix = torch.randint(len(data) - T - 1, (B,))
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
        t0 = time.perf_counter()
        loss = step_model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if it >= warmup:
            times.append(time.perf_counter() - t0)
        if it == 0:
            sys.stderr.write("loss at step 1 %.4f\n" % loss.item())
    times.sort()
    print("%.2f" % (1000 * times[len(times) // 2]))


if __name__ == "__main__":
    main()
