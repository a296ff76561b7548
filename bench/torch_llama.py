#!/usr/bin/env python3
"""llama_char in plain PyTorch, written as torchtitan writes its Llama (torchtitan/models/llama3):
the PyTorch peer's model of samples/llama_char.json, imported by bench/torch_gpt_char.py (the
training step), bench/torch_train_gpt.py (time to loss) and bench/torch_pipeline.py (S = 2).

The block is samples/gen_llama.py's: RMSNorm (eps 1e-5, a weight, no bias) before attention and
before the MLP; q, k, v projections without biases (wq, wk, wv); rotary embedding of q and k as
torchtitan's complex form (precompute_freqs_cis: freqs = 1 / theta^(arange(0, D, 2) / D), polar of
outer(t, freqs); apply_rotary_emb: view_as_complex of (..., D/2, 2) pairs, times freqs_cis,
view_as_real, flatten: the interleaved pairing), theta 10000; grouped-query causal attention with
k and v repeated to the query heads by torchtitan's repeat_kv (query head h reads kv head
h // (NH / NKV), pipec's mapping), F.scaled_dot_product_attention(is_causal=True) where the torch
has it (2.x), the explicit masked softmax otherwise (1.13); the SwiGLU MLP w2(silu(w1 x) * w3 x);
an untied output head. Parameter names are torchtitan's state-dict names (tok_embeddings.weight,
layers.0.attention.wq.weight, layers.0.feed_forward.w1.weight, norm.weight, output.weight), which
are pipec's, so --init reads what `train --save` wrote.

Initialisation: samples/llama_char.json's, not torchtitan's own (which draws tok_embeddings with
std 1, the output head with std C^-1/2 and its projections truncated, the depth-scaled way): with
torch.manual_seed(S) done by the caller, every weight normal(0, 0.02) in module order, wo and w2
normal(0, 0.02 / sqrt(2 L)), the norms ones; the same distributions as pipec's (other numbers:
pipec draws per parameter name with splitmix64).

RMSNorm is F.rms_norm where the torch has it (2.4+, nn.RMSNorm's function, what torchtitan uses),
else Meta's x * rsqrt(mean(x^2) + eps) * weight (1.13).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# samples/llama_char.json's dims (tests/e2e/torch_peer.sh checks them against the file); F is
# Llama's SwiGLU width, 8C/3 rounded up to a multiple of 32.
LLAMA = {"V": 65, "T": 64, "C": 128, "L": 4, "NH": 4, "NKV": 2, "F": 352, "theta": 10000.0, "eps": 1e-5}


def precompute_freqs_cis(dim, end, theta):
    """torchtitan's: complex (end, dim / 2), position t times 1 / theta^(2i / dim)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, freqs_cis):
    """torchtitan's: xq (B, T, NH, D), xk (B, T, NKV, D), freqs_cis (T, D / 2)."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis[: xq.shape[1]].view(1, xq.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    """torchtitan's: (B, T, NKV, D) -> (B, T, NKV * n_rep, D), each kv head n_rep times in a row."""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, C, NH, NKV, T):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = NH, NKV, C // NH
        self.wq = nn.Linear(C, NH * self.head_dim, bias=False)
        self.wk = nn.Linear(C, NKV * self.head_dim, bias=False)
        self.wv = nn.Linear(C, NKV * self.head_dim, bias=False)
        self.wo = nn.Linear(NH * self.head_dim, C, bias=False)
        self.sdpa = hasattr(F, "scaled_dot_product_attention")
        if not self.sdpa:
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        n_rep = self.n_heads // self.n_kv_heads
        xq = xq.transpose(1, 2)
        xk = repeat_kv(xk, n_rep).transpose(1, 2)
        xv = repeat_kv(xv, n_rep).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)
        else:
            att = (xq @ xk.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            att = F.softmax(att.masked_fill(~self.mask[:seqlen, :seqlen], float("-inf")), dim=-1)
            y = att @ xv
        return self.wo(y.transpose(1, 2).contiguous().view(bs, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, C, hidden):
        super().__init__()
        self.w1 = nn.Linear(C, hidden, bias=False)
        self.w2 = nn.Linear(hidden, C, bias=False)
        self.w3 = nn.Linear(C, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, C, NH, NKV, F, T, eps):
        super().__init__()
        self.attention = Attention(C, NH, NKV, T)
        self.feed_forward = FeedForward(C, F)
        self.attention_norm = RMSNorm(C, eps)
        self.ffn_norm = RMSNorm(C, eps)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


def init_weights(modules, L):
    """samples/llama_char.json's stds, in module order: 0.02, wo and w2 0.02 / sqrt(2 L)."""
    for mod in modules:
        for name, p in mod.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)


class Transformer(nn.Module):
    """The whole model: forward(idx, targets) -> the mean token cross-entropy."""

    def __init__(self, V, T, C, L, NH, NKV, F, theta, eps):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, C)
        self.layers = nn.ModuleList([TransformerBlock(C, NH, NKV, F, T, eps) for _ in range(L)])
        self.norm = RMSNorm(C, eps)
        self.output = nn.Linear(C, V, bias=False)
        self.register_buffer("freqs_cis", precompute_freqs_cis(C // NH, T, theta), persistent=False)
        init_weights([self], L)

    def forward(self, idx, targets):
        h = self.tok_embeddings(idx)
        for layer in self.layers:
            h = layer(h, self.freqs_cis)
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
