#!/usr/bin/env python3
"""Writes a nanoGPT-style GPT as a pipec model file (format v1, docs/model-format.md).

Parameter names and init follow nanoGPT's state_dict: normal(0, 0.02) for embeddings and linear
weights, 0.02/sqrt(2*layers) for the residual projections (attn.c_proj, mlp.c_proj), ones for
layernorm weights, zeros for biases. The defaults are the "baby" character GPT of
samples/gpt_char.json (4 layers, 4 heads, 128 embedding, vocab 65, context 64, no biases, tied
head); `gen_gpt.py | cmp - samples/gpt_char.json` holds.

The layers are one block instantiated by a repeat entry; --flat writes every layer out instead
(same tensor names; for benchmarking block expansion against a flat file). Output is
deterministic: same arguments, same bytes.
"""
import argparse
import json
import math
import sys

from modelgen import baby_recipe, expand, fmt, num


def build(a):
    C, L = a.embd, a.layers
    bias = a.bias
    std = 0.02
    std_proj = num(0.02 / math.sqrt(2 * L))
    hid = "C" if a.mlp_ratio == 1 else "%d*C" % a.mlp_ratio

    def normal(s):
        return {"kind": "normal", "std": s}

    def lin_params(prefix, out, inp, s):
        ps = [{"name": prefix + ".weight", "shape": [out, inp], "init": normal(s)}]
        if bias:
            ps.append({"name": prefix + ".bias", "shape": [out], "init": "zeros"})
        return ps

    def ln_params(prefix):
        ps = [{"name": prefix + ".weight", "shape": ["C"], "init": "ones"}]
        if bias:
            ps.append({"name": prefix + ".bias", "shape": ["C"], "init": "zeros"})
        return ps

    def wb(prefix):
        return [prefix + ".weight"] + ([prefix + ".bias"] if bias else [])

    h = "transformer.h.{i}"
    block = {
        "name": "layer",
        "inputs": ["x"],
        "outputs": [h + ".out"],
        "params": ln_params(h + ".ln_1")
        + lin_params(h + ".attn.c_attn", "3*C", "C", std)
        + lin_params(h + ".attn.c_proj", "C", "C", std_proj)
        + ln_params(h + ".ln_2")
        + lin_params(h + ".mlp.c_fc", hid, "C", std)
        + lin_params(h + ".mlp.c_proj", "C", hid, std_proj),
        "nodes": [
            {"name": h + ".ln_1", "op": "layernorm", "inputs": ["x"] + wb(h + ".ln_1")},
            {"name": h + ".attn.c_attn", "op": "linear", "inputs": [h + ".ln_1"] + wb(h + ".attn.c_attn")},
            {"name": h + ".attn", "op": "causal_self_attention", "inputs": [h + ".attn.c_attn"],
             "attrs": {"n_head": a.heads}},
            {"name": h + ".attn.c_proj", "op": "linear", "inputs": [h + ".attn"] + wb(h + ".attn.c_proj")},
            {"name": h + ".resid_1", "op": "add", "inputs": ["x", h + ".attn.c_proj"]},
            {"name": h + ".ln_2", "op": "layernorm", "inputs": [h + ".resid_1"] + wb(h + ".ln_2")},
            {"name": h + ".mlp.c_fc", "op": "linear", "inputs": [h + ".ln_2"] + wb(h + ".mlp.c_fc")},
            {"name": h + ".mlp.gelu", "op": "gelu", "inputs": [h + ".mlp.c_fc"],
             "attrs": {"approximate": a.gelu}},
            {"name": h + ".mlp.c_proj", "op": "linear", "inputs": [h + ".mlp.gelu"] + wb(h + ".mlp.c_proj")},
            {"name": h + ".out", "op": "add", "inputs": [h + ".resid_1", h + ".mlp.c_proj"]},
        ],
    }

    head = {"name": "lm_head.weight", "shape": ["V", "C"]}
    if a.tied:
        head["tied_to"] = "transformer.wte.weight"
    else:
        head["init"] = normal(std)
    pre_params = [
        {"name": "transformer.wte.weight", "shape": ["V", "C"], "init": normal(std)},
        {"name": "transformer.wpe.weight", "shape": ["T", "C"], "init": normal(std)},
    ]
    post_params = ln_params("transformer.ln_f") + [head]
    pre_nodes = [
        {"name": "transformer.wte", "op": "embedding", "inputs": ["idx", "transformer.wte.weight"]},
        {"name": "transformer.emb", "op": "add", "inputs": ["transformer.wte", "transformer.wpe.weight"]},
    ]

    def post_nodes(body_out):
        return [
            {"name": "transformer.ln_f", "op": "layernorm", "inputs": [body_out] + wb("transformer.ln_f")},
            {"name": "logits", "op": "linear", "inputs": ["transformer.ln_f", "lm_head.weight"]},
            {"name": "loss", "op": "cross_entropy", "inputs": ["logits", "targets"]},
        ]

    m = {"format": "pipec-model", "version": 1, "name": a.name,
         "dims": {"V": a.vocab, "T": a.context, "C": C}}
    if not a.flat:
        m["dims"]["L"] = L
    m["inputs"] = [
        {"name": "idx", "dtype": "i32", "shape": ["B", "T"]},
        {"name": "targets", "dtype": "i32", "shape": ["B", "T"], "target": True},
    ]
    if a.flat:
        bparams, bnodes, outs = expand(block, L, ["transformer.emb"])
        m["params"] = pre_params + bparams + post_params
        m["nodes"] = pre_nodes + bnodes + post_nodes(outs[0])
    else:
        rep = {"repeat": "layer", "count": "L", "inputs": ["transformer.emb"],
               "outputs": ["transformer.h.out"]}
        if a.split_before:
            rep["split_before"] = True
        m["params"] = pre_params + post_params
        m["blocks"] = [block]
        m["nodes"] = pre_nodes + [rep] + post_nodes("transformer.h.out")
    if a.training:
        m["training"] = baby_recipe()
    m["loss"] = "loss"
    m["outputs"] = ["logits"]
    return m


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--embd", type=int, default=128, help="embedding width C (default 128)")
    p.add_argument("--vocab", type=int, default=65, help="vocabulary size V (default 65)")
    p.add_argument("--context", type=int, default=64, help="context length T (default 64)")
    p.add_argument("--mlp-ratio", type=int, default=4, help="MLP hidden width / C (default 4)")
    p.add_argument("--bias", action="store_true", help="biases in linear and layernorm layers")
    p.add_argument("--gelu", choices=("none", "tanh"), default="none",
                   help="the MLP's GELU: none = exact erf, as nanoGPT's nn.GELU() (default), or tanh")
    p.add_argument("--tied", dest="tied", action="store_true", default=True,
                   help="lm_head.weight tied to transformer.wte.weight (default)")
    p.add_argument("--no-tied", dest="tied", action="store_false", help="separate lm_head.weight")
    p.add_argument("--flat", action="store_true", help="write every layer out, no blocks")
    p.add_argument("--no-split-before", dest="split_before", action="store_false",
                   help="omit split_before on the repeat (never written with --flat)")
    p.add_argument("--name", default="gpt_char", help="model name (default gpt_char)")
    p.add_argument("--no-training", dest="training", action="store_false",
                   help="omit the training section (nanoGPT's baby recipe on tinyshakespeare)")
    p.add_argument("-o", "--output", help="write here instead of stdout")
    a = p.parse_args()
    for k in ("layers", "heads", "embd", "vocab", "context", "mlp_ratio"):
        if getattr(a, k) < 1:
            p.error("--%s must be >= 1" % k.replace("_", "-"))
    if a.embd % a.heads:
        p.error("--embd %d is not divisible by --heads %d" % (a.embd, a.heads))
    if not a.flat and a.layers > 100000:
        p.error("--layers > 100000 needs --flat (repeat count limit)")
    text = fmt(build(a)) + "\n"
    if a.output:
        with open(a.output, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
