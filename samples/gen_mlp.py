#!/usr/bin/env python3
"""Writes a deep ReLU MLP as a pipec model file (format v1, docs/model-format.md).

x (B,IN) -> fc_in (W) -> relu -> LAYERS x [h.{i}: linear W->W, relu] -> logits (K) -> cross_entropy
with y (B) i32. Linear layers have biases; init as PyTorch's nn.Linear default: U(-k, k) with
k = 1/sqrt(fan_in) for weight and bias. The hidden layers are one block instantiated by a repeat
entry (count L); --flat writes every layer out instead (same tensor names; for benchmarking block
expansion against a flat file). Output is deterministic: same arguments, same bytes.
"""
import argparse
import json
import math
import sys

from modelgen import expand, fmt, num


def build(a):
    def uni(fan_in):
        k = num(1 / math.sqrt(fan_in))
        return {"kind": "uniform", "a": -k, "b": k}

    def linear(prefix, out, inp, fan_in):
        return [{"name": prefix + ".weight", "shape": [out, inp], "init": uni(fan_in)},
                {"name": prefix + ".bias", "shape": [out], "init": uni(fan_in)}]

    block = {
        "name": "layer",
        "inputs": ["a"],
        "outputs": ["h.{i}.out"],
        "params": linear("h.{i}", "W", "W", a.width),
        "nodes": [
            {"name": "h.{i}", "op": "linear", "inputs": ["a", "h.{i}.weight", "h.{i}.bias"]},
            {"name": "h.{i}.out", "op": "relu", "inputs": ["h.{i}"]},
        ],
    }
    pre_nodes = [
        {"name": "fc_in", "op": "linear", "inputs": ["x", "fc_in.weight", "fc_in.bias"]},
        {"name": "fc_in.out", "op": "relu", "inputs": ["fc_in"]},
    ]

    def post_nodes(body_out):
        return [
            {"name": "logits", "op": "linear", "inputs": [body_out, "head.weight", "head.bias"]},
            {"name": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]},
        ]

    m = {"format": "pipec-model", "version": 1, "name": a.name or "mlp_%dx%d" % (a.layers, a.width),
         "dims": {"IN": a.inputs, "W": a.width, "K": a.classes}}
    if not a.flat:
        m["dims"]["L"] = a.layers
    m["inputs"] = [
        {"name": "x", "dtype": "f32", "shape": ["B", "IN"]},
        {"name": "y", "dtype": "i32", "shape": ["B"], "target": True},
    ]
    pre_params = linear("fc_in", "W", "IN", a.inputs)
    post_params = linear("head", "K", "W", a.width)
    if a.flat:
        bparams, bnodes, outs = expand(block, a.layers, ["fc_in.out"])
        m["params"] = pre_params + bparams + post_params
        m["nodes"] = pre_nodes + bnodes + post_nodes(outs[0])
    else:
        rep = {"repeat": "layer", "count": "L", "inputs": ["fc_in.out"], "outputs": ["h.out"]}
        if a.split_before:
            rep["split_before"] = True
        m["params"] = pre_params + post_params
        m["blocks"] = [block]
        m["nodes"] = pre_nodes + [rep] + post_nodes("h.out")
    m["loss"] = "loss"
    m["outputs"] = ["logits"]
    return m


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4, help="hidden W->W layers, the repeat count (default 4)")
    p.add_argument("--width", type=int, default=128, help="hidden width W (default 128)")
    p.add_argument("--inputs", type=int, default=64, help="input features IN (default 64)")
    p.add_argument("--classes", type=int, default=10, help="classes K (default 10)")
    p.add_argument("--flat", action="store_true", help="write every layer out, no blocks")
    p.add_argument("--split-before", action="store_true",
                   help="split_before on the repeat (never written with --flat)")
    p.add_argument("--name", help="model name (default mlp_LAYERSxWIDTH)")
    p.add_argument("-o", "--output", help="write here instead of stdout")
    a = p.parse_args()
    for k in ("layers", "width", "inputs", "classes"):
        if getattr(a, k) < 1:
            p.error("--%s must be >= 1" % k)
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
