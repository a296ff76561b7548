"""The models tests/import/make_fixtures.py exports: each forward(inputs, targets) -> scalar loss.

nanoGPT: Karpathy's nanoGPT model.py architecture (LayerNorm with optional bias, fused c_attn,
F.scaled_dot_product_attention(is_causal=True), exact GELU MLP, learned positions wpe, dropout
modules (p = 0 here), lm_head tied to wte, init normal 0.02 with c_proj 0.02 / sqrt(2 L)).
Llama3: Meta's Llama 3 block (RMSNorm, no biases, grouped-query attention with repeat_kv,
rotary embedding, SwiGLU w2(silu(w1 x) * w3 x), untied output) with the rotary pairing chosen:
"interleaved" (Meta's: dims (2i, 2i+1) rotate together; written with real tensors, not Meta's
view_as_complex, so the graph holds no complex dtype) or "halves" (Hugging Face's rotate_half:
dims (i, i + D/2)). HFLlama wraps transformers' LlamaForCausalLM (random weights from a config).
MLP: a 3-layer ReLU regression with the mean squared error.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- nanoGPT (model.py, trimmed of generation/from_pretrained/optimizer helpers) ----------------

class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_attn = nn.Linear(cfg["n_embd"], 3 * cfg["n_embd"], bias=cfg["bias"])
        self.c_proj = nn.Linear(cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])
        self.attn_dropout = nn.Dropout(cfg["dropout"])
        self.resid_dropout = nn.Dropout(cfg["dropout"])
        self.n_head, self.n_embd, self.dropout = cfg["n_head"], cfg["n_embd"], cfg["dropout"]

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg["n_embd"], 4 * cfg["n_embd"], bias=cfg["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])
        self.dropout = nn.Dropout(cfg["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg["n_embd"], bias=cfg["bias"])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg["n_embd"], bias=cfg["bias"])
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg["vocab_size"], cfg["n_embd"]),
            wpe=nn.Embedding(cfg["block_size"], cfg["n_embd"]),
            drop=nn.Dropout(cfg["dropout"]),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])]),
            ln_f=LayerNorm(cfg["n_embd"], bias=cfg["bias"]),
        ))
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg["n_layer"]))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


# ---- Llama 3 -------------------------------------------------------------------------------------

def rope_tables(head_dim, T, theta):
    """cos, sin (T, D / 2) of position t times theta^(-2i / D)."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    ang = torch.outer(torch.arange(T).float(), freqs)
    return ang.cos(), ang.sin()


def rope(x, cos, sin, pairing):
    """x (B, T, H, D) rotated; cos, sin (T, D / 2); "complex": Meta's apply_rotary_emb, cos is
    the complex freqs_cis (T, D / 2) and sin unused."""
    T = x.size(1)
    if pairing == "complex":
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * cos[:T].view(1, T, 1, -1)).flatten(3).type_as(x)
    c, s = cos[:T].view(1, T, 1, -1), sin[:T].view(1, T, 1, -1)
    if pairing == "interleaved":
        xr = x.unflatten(-1, (-1, 2))
        a, b = xr[..., 0], xr[..., 1]
        return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    half = x.size(-1) // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * c - b * s, b * c + a * s), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, C, NH, NKV, pairing):
        super().__init__()
        self.nh, self.nkv, self.hd, self.pairing = NH, NKV, C // NH, pairing
        self.wq = nn.Linear(C, NH * self.hd, bias=False)
        self.wk = nn.Linear(C, NKV * self.hd, bias=False)
        self.wv = nn.Linear(C, NKV * self.hd, bias=False)
        self.wo = nn.Linear(NH * self.hd, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = rope(self.wq(x).view(B, T, self.nh, self.hd), cos, sin, self.pairing)
        k = rope(self.wk(x).view(B, T, self.nkv, self.hd), cos, sin, self.pairing)
        v = self.wv(x).view(B, T, self.nkv, self.hd)
        rep = self.nh // self.nkv  # repeat_kv: query head h reads kv head h // rep
        k = k[:, :, :, None, :].expand(B, T, self.nkv, rep, self.hd).reshape(B, T, self.nh, self.hd)
        v = v[:, :, :, None, :].expand(B, T, self.nkv, rep, self.hd).reshape(B, T, self.nh, self.hd)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, NKV, FF, eps, pairing):
        super().__init__()
        self.attention_norm = nn.RMSNorm(C, eps=eps)
        self.attention = LlamaAttention(C, NH, NKV, pairing)
        self.ffn_norm = nn.RMSNorm(C, eps=eps)
        self.w1 = nn.Linear(C, FF, bias=False)
        self.w2 = nn.Linear(FF, C, bias=False)
        self.w3 = nn.Linear(C, FF, bias=False)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        g = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(g)) * self.w3(g))


class Llama3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, L = cfg["dim"], cfg["n_layers"]
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], C)
        self.layers = nn.ModuleList([LlamaBlock(C, cfg["n_heads"], cfg["n_kv_heads"], cfg["ffn_dim"],
                                                cfg["norm_eps"], cfg["rope_pairing"]) for _ in range(L)])
        self.norm = nn.RMSNorm(C, eps=cfg["norm_eps"])
        self.output = nn.Linear(C, cfg["vocab_size"], bias=False)
        cos, sin = rope_tables(C // cfg["n_heads"], cfg["max_seq_len"], cfg["rope_theta"])
        if cfg["rope_pairing"] == "complex":  # Meta's freqs_cis = polar(1, outer(t, freqs))
            hd, T = C // cfg["n_heads"], cfg["max_seq_len"]
            freqs = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.outer(torch.arange(T).float(), freqs)
            cos, sin = torch.polar(torch.ones_like(ang), ang), torch.zeros(1)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets):
        h = self.tok_embeddings(idx)
        for layer in self.layers:
            h = layer(h, self.rope_cos, self.rope_sin)
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


# ---- Hugging Face LlamaForCausalLM --------------------------------------------------------------

class HFLlama(nn.Module):
    """LlamaForCausalLM's logits, the mean token cross-entropy against unshifted targets (as the
    others: the caller's targets are the inputs shifted by one already)."""

    def __init__(self, cfg):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        self.model = LlamaForCausalLM(LlamaConfig(**cfg, attn_implementation="sdpa"))

    def forward(self, idx, targets):
        logits = self.model(input_ids=idx, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


# ---- MLP regression ----------------------------------------------------------------------------

class MLPRegression(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dims = [cfg["in"]] + cfg["hidden"] + [cfg["out"]]
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:])])

    def forward(self, x, y):
        for i, lin in enumerate(self.layers):
            x = lin(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return F.mse_loss(x, y)
