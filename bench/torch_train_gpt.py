#!/usr/bin/env python3
"""PyTorch training run of gpt_char or llama_char with pipec's recipe: the peer of bench/time_to_loss.sh.

--model llama_char (default gpt_char) trains samples/llama_char.json's model instead, written as
torchtitan writes its Llama (bench/torch_llama.py: RMSNorm, interleaved RoPE, grouped-query
attention, SwiGLU, untied head; torchtitan's parameter names, pipec's) with the file's
initialisation; the recipe, the batches, the validation and the output below are the same (the
two files have the same training section). What follows describes gpt_char.

The model is samples/gpt_char.json's, written as nanoGPT writes it (model.py, with bias=False and
dropout 0): 4 layers, 4 heads, C 128, context T 64, vocabulary 65 (the sorted distinct bytes of
the text), no biases, layernorm with a weight and no bias (eps 1e-5), exact (erf) GELU, the head
tied to the token embedding. Parameter names are pipec's, which are nanoGPT's state-dict names
(transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...), so --init reads a file that
`train --save` wrote. Attention is F.scaled_dot_product_attention(is_causal=True) where the torch
has it (2.x; nanoGPT's "flash" path), the explicit masked softmax otherwise (1.13).

Initialisation (without --init): nanoGPT's, torch.manual_seed(SEED) then every weight normal(0,
0.02) in module order, the two residual projections (attn.c_proj, mlp.c_proj) normal(0,
0.02/sqrt(2*L)), the layernorm weights ones. pipec draws its own values (splitmix64 per
parameter name): the same distributions, other numbers.

The recipe is the generated program's `train` with gpt_char's training section: batch 12 x 64
tokens, 2000 steps; AdamW (torch.optim.AdamW, single-tensor) lr 1e-3, betas (0.9, 0.99), eps
1e-8, weight decay 0.1 on the parameters of rank >= 2 (the embeddings and linears; the tied head
counts once) and 0 on the layernorm weights; learning rate per step `it` (from 0) as
runtime/optim.c pr_lr_at (nanoGPT's current get_lr): linear warmup lr*(it+1)/(warmup+1) for 100
steps, cosine to min lr 1e-4 at step 2000 (the decay ends at 2000 whatever --steps says, as in
pipec, where the schedule is compiled in); the gradient's global norm clipped to 1.0
(clip_grad_norm_); zero_grad(set_to_none=True) each step. Data: tinyshakespeare, the first
floor(n * 0.9) tokens train, the rest validate (runtime/data.c).

Training batches (--sampling):
  nanogpt (default): nanoGPT's get_batch, torch.randint(n_train - T, (12,)) window starts from
      torch's generator (seeded by --seed before the init, so the stream follows the init's draws);
      x = tokens[i : i+T], y = tokens[i+1 : i+1+T]. Not pipec's batches.
  pipec: pipec's own batches, runtime/data.c's splitmix64 draw(seed, split 0, step, microbatch 0,
      row) % (n_train - T), so that with --init the run is pipec's run step for step (the test
      tests/e2e/torch_peer.sh uses it).
Validation batches are exactly pipec's (runtime/data.c, codegen/emit_c.c emit_eval):
  --eval-batches N > 0: batch k = 0..N-1 has row r = 0..11 at n_train + draw(0x5eed, split 1,
      step k, microbatch 0, r) % (n_val - T), each batch's mean token loss weighing 1 (the same
      batches at every evaluation and for every seed);
  --eval-batches 0: the whole validation split in W = (n_val - 1) // T consecutive non-overlapping
      windows from the split's start, 12 per batch, the mean over all W*T predicted tokens.
Evaluation runs under model.eval() and torch.no_grad() every --eval-every steps and after the last
step (--steps 0: once, on the initial parameters), as pipec's `train` does.

Output, one line per evaluation, flushed:
    step S | val loss X | elapsed_s Y
with Y the wall seconds since the first training step began (evaluations included; Python's and
torch's start-up and the data loading before it are not); at the end `median step time X ms over N
steps` (batch, forward, backward, clip, AdamW; evaluations excluded). On stderr first: the torch, its BLAS
and the thread count.

usage: torch_train_gpt.py [--model gpt_char|llama_char] [--data PATH] [--seed N] [--threads N]
           [--steps N] [--eval-every N] [--eval-batches N] [--init F.safetensors] [--sampling nanogpt|pipec]
           [--warmup N] [--decay-steps N] [--lr X] [--min-lr X] [--loss-log F]

--threads goes to torch.set_num_threads; the caller must also set OMP_NUM_THREADS before Python
starts (bench/time_to_loss.sh does): Debian's torch 1.13 links the pthread OpenBLAS, whose own
pool otherwise takes every core.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_char import blas_info  # noqa: E402  (the BLAS line, as the step benchmark prints it)
import torch_llama  # noqa: E402  (llama_char's model)
import torch.nn.functional as F

# samples/gpt_char.json (tests/e2e/torch_peer.sh checks these against the file)
MODEL = {"V": 65, "T": 64, "C": 128, "L": 4, "n_head": 4}
RECIPE = {"batch": 12, "steps": 2000, "seed": 1337, "lr": 1e-3, "betas": (0.9, 0.99), "eps": 1e-8,
          "weight_decay": 0.1, "warmup": 100, "decay_steps": 2000, "min_lr": 1e-4, "grad_clip": 1.0,
          "eval_every": 500, "eval_batches": 50, "train_fraction": 0.9}
EVAL_SEED = 0x5EED  # codegen/emit_c.c: the validation batches' fixed seed
M64 = (1 << 64) - 1


# ---- runtime/data.c's batch draws

def splitmix64(s):
    s = (s + 0x9E3779B97F4A7C15) & M64
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def draw(seed, split, step, mb, row):
    return splitmix64((seed ^ (split * 0xD1B54A32D192ED03) ^ (step * 0xAEF17502108EF2D9)
                       ^ (mb * 0xDB4F0B9175AE2165) ^ (row * 0x8CB92BA72F3D8DD7)) & M64)


def lr_at(it, lr, min_lr, warmup, decay):  # runtime/optim.c pr_lr_at
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if decay == 0:
        return lr
    if it > decay or decay <= warmup:
        return min_lr
    ratio = (it - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


# ---- the model (nanoGPT's model.py with bias=False, dropout 0)

class LayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class Attention(nn.Module):
    def __init__(self, C, T, nh):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)
        self.nh = nh
        self.flash = hasattr(F, "scaled_dot_product_attention")
        if not self.flash:
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.nh))
            att = F.softmax(att.masked_fill(~self.mask[:T, :T], float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C, bias=False)
        self.c_proj = nn.Linear(4 * C, C, bias=False)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # exact (erf) GELU, nn.GELU()'s default


class Block(nn.Module):
    def __init__(self, C, T, nh):
        super().__init__()
        self.ln_1 = LayerNorm(C)
        self.attn = Attention(C, T, nh)
        self.ln_2 = LayerNorm(C)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, V, T, C, L, n_head):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
            h=nn.ModuleList([Block(C, T, n_head) for _ in range(L)]), ln_f=LayerNorm(C)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * L))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, dtype=torch.long))
        for blk in self.transformer.h:
            x = blk(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def make_model(name):
    """The model called `name` (the caller seeds torch first: the initialisation draws)."""
    if name == "llama_char":
        return torch_llama.Transformer(**torch_llama.LLAMA)
    return GPT(**MODEL)


def model_dims(name):
    return torch_llama.LLAMA if name == "llama_char" else MODEL


# ---- safetensors (no package needed: an 8-byte header length, a JSON header, the raw data)

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def load_safetensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = bytearray(blob[8 + n + a:8 + n + b])
        out[name] = torch.frombuffer(raw, dtype=DTYPES[t["dtype"]]).reshape(t["shape"]).float()
    return out


def init_from(model, path):
    tensors = load_safetensors(path)
    params = dict(model.named_parameters())  # gpt_char's tied weight once, as transformer.wte.weight
    for name, p in params.items():
        if name not in tensors:
            sys.exit("%s: tensor '%s' is missing" % (path, name))
        if tuple(tensors[name].shape) != tuple(p.shape):
            sys.exit("%s: tensor '%s' has shape %s, the model %s" % (path, name, list(tensors[name].shape),
                                                                    list(p.shape)))
        with torch.no_grad():
            p.copy_(tensors[name])
    extra = set(tensors) - set(params) - {"lm_head.weight"}
    if extra:
        sys.exit("%s: tensors the model does not have: %s" % (path, ", ".join(sorted(extra))))
    if "lm_head.weight" in tensors and not torch.equal(tensors["lm_head.weight"], tensors["transformer.wte.weight"]):
        sys.exit("%s: lm_head.weight differs from transformer.wte.weight (tied)" % path)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    R = RECIPE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("gpt_char", "llama_char"), default="gpt_char")
    ap.add_argument("--data", default=os.path.join(root, "..", "shared", "data", "tinyshakespeare.txt"))
    ap.add_argument("--seed", type=int, default=R["seed"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=R["steps"])
    ap.add_argument("--eval-every", type=int, default=R["eval_every"])
    ap.add_argument("--eval-batches", type=int, default=R["eval_batches"])
    ap.add_argument("--init", help="initial parameters (safetensors, e.g. from train --save)")
    ap.add_argument("--sampling", choices=("nanogpt", "pipec"), default="nanogpt")
    ap.add_argument("--warmup", type=int, default=R["warmup"])
    ap.add_argument("--decay-steps", type=int, default=R["decay_steps"])
    ap.add_argument("--lr", type=float, default=R["lr"])
    ap.add_argument("--min-lr", type=float, default=R["min_lr"])
    ap.add_argument("--loss-log", help="write `step loss` per training step (steps from 0), as train --loss-log")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    sys.stderr.write("torch %s | %s | threads %d\n" % (torch.__version__, blas_info(), torch.get_num_threads()))
    raw = open(a.data, "rb").read()
    vocab = sorted(set(raw))
    lut = bytes(bytearray(vocab.index(c) if c in vocab else 0 for c in range(256)))
    tokens = torch.frombuffer(bytearray(raw.translate(lut)), dtype=torch.uint8).long()
    n = len(tokens)
    n_train = int(math.floor(n * R["train_fraction"]))
    n_val = n - n_train
    dims = model_dims(a.model)
    B, T = R["batch"], dims["T"]
    assert len(vocab) == dims["V"], "the data has %d distinct bytes, the model %d" % (len(vocab), dims["V"])

    def windows(starts):
        ix = torch.tensor(starts, dtype=torch.long).unsqueeze(1) + torch.arange(T + 1).unsqueeze(0)
        w = tokens[ix]
        return w[:, :-1], w[:, 1:]

    # The validation batches, built once: (x, y, weight)
    val = []
    if a.eval_batches > 0:
        for k in range(a.eval_batches):
            x, y = windows([n_train + draw(EVAL_SEED, 1, k, 0, r) % (n_val - T) for r in range(B)])
            val.append((x, y, 1.0))
    else:
        W = (n_val - 1) // T
        for k in range(0, W, B):
            x, y = windows([n_train + w * T for w in range(k, min(k + B, W))])
            val.append((x, y, float(x.size(0))))

    torch.manual_seed(a.seed)
    model = make_model(a.model)
    if a.init:
        init_from(model, a.init)
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": R["weight_decay"]},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=a.lr, betas=R["betas"], eps=R["eps"], foreach=False)

    def evaluate(step, t0):
        model.eval()
        loss = weight = 0.0
        with torch.no_grad():
            for x, y, w in val:
                loss += model(x, y).item() * w
                weight += w
        model.train()
        print("step %d | val loss %.4f | elapsed_s %.3f" % (step, loss / weight, time.perf_counter() - t0), flush=True)

    loss_log = open(a.loss_log, "w") if a.loss_log else None
    t0 = time.perf_counter()
    if a.steps == 0:
        evaluate(0, t0)
    step_s = []
    for it in range(a.steps):
        ts = time.perf_counter()
        if a.sampling == "pipec":
            x, y = windows([draw(a.seed, 0, it, 0, r) % (n_train - T) for r in range(B)])
        else:
            x, y = windows(torch.randint(n_train - T, (B,)).tolist())
        lr = lr_at(it, a.lr, a.min_lr, a.warmup, a.decay_steps)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, R["grad_clip"])
        opt.step()
        step_s.append(time.perf_counter() - ts)
        if loss_log:
            loss_log.write("%d %.9g\n" % (it, loss.item()))
        if (a.eval_every and (it + 1) % a.eval_every == 0) or it + 1 == a.steps:
            evaluate(it + 1, t0)
    if loss_log:
        loss_log.close()
    if step_s:
        step_s.sort()
        print("median step time %.2f ms over %d steps" % (1e3 * step_s[len(step_s) // 2], len(step_s)), flush=True)


if __name__ == "__main__":
    main()
