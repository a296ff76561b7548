#!/usr/bin/env python3
"""Writes a Llama-3-style decoder as a pipec model file (format v1, docs/model-format.md).

The block is Meta's and torchtitan's Llama: RMSNorm before attention and before the MLP (eps 1e-5,
llama3's norm_eps), separate q, k, v projections without biases, rotary position embedding of q
and k (theta 10000, the interleaved pairing of torchtitan's complex form; --pairing half for
Hugging Face's rotate_half), grouped-query causal attention, a SwiGLU MLP w2(silu(w1 x) * w3 x)
whose hidden width is Llama's rounding of 8C/3 up to a multiple of 32, no biases anywhere, and an
untied output head. Parameter names are torchtitan's state_dict names. Init: normal(0, 0.02) for
embeddings and projections, 0.02/sqrt(2*layers) for the two residual projections (attention.wo,
feed_forward.w2), ones for the norms. The defaults are samples/llama_char.json (4 layers, C 128, 4
heads, 2 kv heads, vocab 65, context 64) with nanoGPT's baby recipe as samples/gpt_char.json has
it; `gen_llama.py | cmp - samples/llama_char.json` holds. Same arguments, same bytes.
"""
import argparse
import math
import sys

from modelgen import baby_recipe, expand, fmt, num


def ffn_hidden(C, multiple_of):
    """Llama's SwiGLU width: 2/3 of 4C, rounded up to a multiple of `multiple_of`."""
    h = int(2 * (4 * C) / 3)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def build(a):
    std = 0.02
    std_proj = num(0.02 / math.sqrt(2 * a.layers))

    def w(name, shape, s):
        return {"name": name + ".weight", "shape": shape, "init": {"kind": "normal", "std": s}}

    def norm(name):
        return {"name": name + ".weight", "shape": ["C"], "init": "ones"}

    def node(name, op, inputs, **attrs):
        n = {"name": name, "op": op, "inputs": inputs}
        if attrs:
            n["attrs"] = attrs
        return n

    h = "layers.{i}"
    at, ff = h + ".attention", h + ".feed_forward"
    rope = {"theta": a.theta, "pairing": a.pairing}
    block = {
        "name": "layer",
        "inputs": ["x"],
        "outputs": [h + ".out"],
        "params": [
            norm(h + ".attention_norm"),
            w(at + ".wq", ["NH*HD", "C"], std),
            w(at + ".wk", ["NKV*HD", "C"], std),
            w(at + ".wv", ["NKV*HD", "C"], std),
            w(at + ".wo", ["C", "NH*HD"], std_proj),
            norm(h + ".ffn_norm"),
            w(ff + ".w1", ["F", "C"], std),
            w(ff + ".w3", ["F", "C"], std),
            w(ff + ".w2", ["C", "F"], std_proj),
        ],
        "nodes": [
            node(h + ".attention_norm", "rms_norm", ["x", h + ".attention_norm.weight"], eps=a.eps),
            node(at + ".wq", "linear", [h + ".attention_norm", at + ".wq.weight"]),
            node(at + ".wk", "linear", [h + ".attention_norm", at + ".wk.weight"]),
            node(at + ".wv", "linear", [h + ".attention_norm", at + ".wv.weight"]),
            node(at + ".q_heads", "reshape", [at + ".wq"], shape=["B", "T", "NH", "HD"]),
            node(at + ".k_heads", "reshape", [at + ".wk"], shape=["B", "T", "NKV", "HD"]),
            node(at + ".q_rope", "rope", [at + ".q_heads"], **rope),
            node(at + ".k_rope", "rope", [at + ".k_heads"], **rope),
            node(at + ".q", "reshape", [at + ".q_rope"], shape=["B", "T", "NH*HD"]),
            node(at + ".k", "reshape", [at + ".k_rope"], shape=["B", "T", "NKV*HD"]),
            node(at + ".sdpa", "attention", [at + ".q", at + ".k", at + ".wv"],
                 n_head=a.heads, n_kv_head=a.kv_heads),
            node(at + ".wo", "linear", [at + ".sdpa", at + ".wo.weight"]),
            node(h + ".resid", "add", ["x", at + ".wo"]),
            node(h + ".ffn_norm", "rms_norm", [h + ".resid", h + ".ffn_norm.weight"], eps=a.eps),
            node(ff + ".w1", "linear", [h + ".ffn_norm", ff + ".w1.weight"]),
            node(ff + ".w3", "linear", [h + ".ffn_norm", ff + ".w3.weight"]),
            node(ff + ".silu", "silu", [ff + ".w1"]),
            node(ff + ".gate", "mul", [ff + ".silu", ff + ".w3"]),
            node(ff + ".w2", "linear", [ff + ".gate", ff + ".w2.weight"]),
            node(h + ".out", "add", [h + ".resid", ff + ".w2"]),
        ],
    }
    pre_params = [w("tok_embeddings", ["V", "C"], std)]
    post_params = [norm("norm"), w("output", ["V", "C"], std)]
    pre_nodes = [node("tok_embeddings", "embedding", ["idx", "tok_embeddings.weight"])]

    def post_nodes(body_out):
        return [
            node("norm", "rms_norm", [body_out, "norm.weight"], eps=a.eps),
            node("logits", "linear", ["norm", "output.weight"]),
            node("loss", "cross_entropy", ["logits", "targets"]),
        ]

    m = {"format": "pipec-model", "version": 1, "name": a.name,
         "dims": {"V": a.vocab, "T": a.context, "C": a.embd, "NH": a.heads, "NKV": a.kv_heads,
                  "HD": a.embd // a.heads, "F": ffn_hidden(a.embd, a.multiple_of)}}
    if not a.flat:
        m["dims"]["L"] = a.layers
    m["inputs"] = [
        {"name": "idx", "dtype": "i32", "shape": ["B", "T"]},
        {"name": "targets", "dtype": "i32", "shape": ["B", "T"], "target": True},
    ]
    if a.flat:
        bparams, bnodes, outs = expand(block, a.layers, ["tok_embeddings"])
        m["params"] = pre_params + bparams + post_params
        m["nodes"] = pre_nodes + bnodes + post_nodes(outs[0])
    else:
        rep = {"repeat": "layer", "count": "L", "inputs": ["tok_embeddings"],
               "outputs": ["layers.out"], "split_before": True}
        m["params"] = pre_params + post_params
        m["blocks"] = [block]
        m["nodes"] = pre_nodes + [rep] + post_nodes("layers.out")
    if a.training:
        m["training"] = baby_recipe()
    m["loss"] = "loss"
    m["outputs"] = ["logits"]
    return m


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    p.add_argument("--heads", type=int, default=4, help="query heads (default 4)")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads (default 2)")
    p.add_argument("--embd", type=int, default=128, help="embedding width C (default 128)")
    p.add_argument("--vocab", type=int, default=65, help="vocabulary size V (default 65)")
    p.add_argument("--context", type=int, default=64, help="context length T (default 64)")
    p.add_argument("--multiple-of", type=int, default=32,
                   help="the SwiGLU width is 8C/3 rounded up to a multiple of this (default 32)")
    p.add_argument("--theta", type=float, default=10000.0, help="RoPE theta (default 10000)")
    p.add_argument("--pairing", choices=("interleaved", "half"), default="interleaved",
                   help="RoPE pairing: interleaved, (2i, 2i+1) as Meta and torchtitan (default), "
                        "or half, (i, i + D/2) as Hugging Face's rotate_half")
    p.add_argument("--eps", type=float, default=1e-5, help="RMSNorm eps (default 1e-5)")
    p.add_argument("--flat", action="store_true", help="write every layer out, no blocks")
    p.add_argument("--name", default="llama_char", help="model name (default llama_char)")
    p.add_argument("--no-training", dest="training", action="store_false",
                   help="omit the training section (nanoGPT's baby recipe on tinyshakespeare)")
    p.add_argument("-o", "--output", help="write here instead of stdout")
    a = p.parse_args()
    for k in ("layers", "heads", "kv_heads", "embd", "vocab", "context", "multiple_of"):
        if getattr(a, k) < 1:
            p.error("--%s must be >= 1" % k.replace("_", "-"))
    if a.embd % a.heads or (a.embd // a.heads) % 2:
        p.error("--embd %d must be --heads %d times an even head dim" % (a.embd, a.heads))
    if a.heads % a.kv_heads:
        p.error("--kv-heads %d does not divide --heads %d" % (a.kv_heads, a.heads))
    text = fmt(build(a)) + "\n"
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
