"""Shared by the sample generators: deterministic JSON layout, number rounding, block expansion."""
import json


def fmt(v, ind=0, col=0, width=100):
    """JSON text: a container that fits on its line (starting at column `col`) stays on one line,
    others get one item per line, indented by two."""
    one = json.dumps(v, separators=(", ", ": "))
    if not isinstance(v, (dict, list)) or not v or col + len(one) <= width:
        return one
    pad = " " * (ind + 2)
    if isinstance(v, dict):
        items = []
        for k, x in v.items():
            key = json.dumps(k) + ": "
            items.append(pad + key + fmt(x, ind + 2, ind + 2 + len(key), width))
        return "{\n" + ",\n".join(items) + "\n" + " " * ind + "}"
    items = [pad + fmt(x, ind + 2, ind + 2, width) for x in v]
    return "[\n" + ",\n".join(items) + "\n" + " " * ind + "]"


def num(x):
    """A float rounded to 10 significant digits, so files do not depend on libm's last bit."""
    return float("%.10g" % x)


def expand(block, count, actual):
    """The nodes and params of `count` instances of `block`, as a repeat entry would define them."""
    params, nodes = [], []
    cur = list(actual)
    for i in range(count):
        formal = dict(zip(block["inputs"], cur))
        sub = lambda s: s.replace("{i}", str(i))
        ref = lambda s: formal[s] if s in formal else sub(s)
        for p in block.get("params", []):
            params.append(dict(p, name=sub(p["name"])))
        for n in block["nodes"]:
            nodes.append(dict(n, name=sub(n["name"]), inputs=[ref(x) for x in n["inputs"]]))
        cur = [sub(o) for o in block["outputs"]]
    return params, nodes, cur


def baby_recipe():
    """nanoGPT's "baby" recipe on tinyshakespeare (shared/data, resolved from samples/), the
    training section of the character models gpt_char and llama_char."""
    return {
        "batch": 12, "microbatches": 1, "steps": 2000, "seed": 1337,
        "optimizer": {"kind": "adamw", "lr": 0.001, "betas": [0.9, 0.99], "eps": 1e-8,
                      "weight_decay": 0.1},
        "schedule": {"warmup": 100, "decay_steps": 2000, "min_lr": 0.0001},
        "grad_clip": 1.0, "eval_every": 500, "eval_batches": 50, "log_every": 100,
        "data": {"kind": "text", "path": "../../shared/data/tinyshakespeare.txt",
                 "train_fraction": 0.9, "input": "idx", "target": "targets"},
    }
