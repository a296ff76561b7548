#!/usr/bin/env python3
"""PyTorch reference for pipec parity tests.

Runs the same model in PyTorch eager mode: it reads the expanded IR that `pipec print` writes
(so blocks, dims and names are resolved by pipec and this script stays small), maps every op to
its PyTorch function (RMSNorm, RoPE and grouped-query attention, which torch 1.13 lacks, written
from their formulas), initialises the parameters from torch's RNG and writes them to a
safetensors file for the pipec program (--init), then trains with torch.optim.AdamW on the very
batches the pipec program draws (splitmix64 formulas of runtime/data.c, reimplemented here) and
prints one loss per step, like the program's --loss-log.

usage: torch_ref.py IR.txt MODEL.json INIT.safetensors STEPS > losses.txt
"""
import gzip
import json
import math
import re
import struct
import sys

import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1


def splitmix(s):
    s = (s + 0x9E3779B97F4A7C15) & M64
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return s, z ^ (z >> 31)


def draw(seed, split, step, mb, row):
    s = (seed ^ (split * 0xD1B54A32D192ED03) ^ (step * 0xAEF17502108EF2D9) ^ (mb * 0xDB4F0B9175AE2165)
         ^ (row * 0x8CB92BA72F3D8DD7)) & M64
    return splitmix(s)[1]


# ---- the IR printed by pipec

def parse_shape(text, batch):
    inner = text[text.index("(") + 1:text.rindex(")")]
    dims = []
    for d in filter(None, inner.split(",")):
        if d == "B":
            dims.append(batch)
        elif d.startswith("B*"):
            dims.append(batch * int(d[2:]))
        else:
            dims.append(int(d))
    return dims


def unquote(name):
    return json.loads(name) if name.startswith('"') else name


NAME = r'("(?:[^"\\]|\\.)*"|[^\s,()=:]+(?::[0-9A-Za-z]+)?)'


def parse_ir(path, batch):
    inputs, params, nodes, loss = {}, [], [], None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("input "):
            m = re.match(r"input " + NAME + r": (\w+)(\(.*?\))( target)?", line)
            inputs[unquote(m.group(1))] = (m.group(2), parse_shape(m.group(3), batch), bool(m.group(4)))
        elif line.startswith("param "):
            m = re.match(r"param " + NAME + r": (\w+)(\(.*?\)) (.*)", line)
            params.append((unquote(m.group(1)), parse_shape(m.group(3), batch), m.group(4)))
        elif line.startswith("node "):
            body = line[5:].split("  ;")[0]
            lhs, rhs = body.split(" = ", 1)
            outs = [unquote(o) for o in re.findall(NAME, lhs)]
            op = rhs[:rhs.index("(")]
            depth, i = 0, rhs.index("(")
            for j in range(i, len(rhs)):
                depth += rhs[j] == "("
                depth -= rhs[j] == ")"
                if depth == 0:
                    break
            args = [unquote(a) for a in re.findall(NAME, rhs[i + 1:j])]
            attrs = {}
            for k, v in re.findall(r" (\w+)=(\[[^\]]*\]|[^\s:]+)", rhs[j + 1:].split(": ")[0] + " "):
                attrs[k] = v
            nodes.append((outs, op, args, attrs))
        elif line.startswith("loss "):
            loss = unquote(line[5:])
    return inputs, params, nodes, loss


def ints(v, batch):
    return [batch if x == "B" else int(x) for x in v.strip("[]").split(",") if x]


def sdpa(q, k, v, nh, nkv, causal):
    """Grouped-query scaled-dot-product attention from its formula: q (B,T,nh*d), k and v
    (B,T,nkv*d); query head h reads kv head h // (nh // nkv) (repeat_interleave on the head dim)."""
    B, T, C = q.shape
    d = C // nh
    q = q.view(B, T, nh, d).transpose(1, 2)
    k = k.reshape(B, T, nkv, d).transpose(1, 2).repeat_interleave(nh // nkv, dim=1)
    v = v.reshape(B, T, nkv, d).transpose(1, 2).repeat_interleave(nh // nkv, dim=1)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    if causal:
        att = att.masked_fill(torch.tril(torch.ones(T, T, dtype=torch.bool)) == 0, float("-inf"))
    y = F.softmax(att, dim=-1) @ v
    return y.transpose(1, 2).contiguous().view(B, T, C)


def attention(qkv, nh, nkv, causal):
    """The packed form: q, k, v along the last dim, (nh + 2*nkv) head dims."""
    d = qkv.shape[-1] // (nh + 2 * nkv)
    q, k, v = qkv.split([nh * d, nkv * d, nkv * d], dim=2)
    return sdpa(q, k, v, nh, nkv, causal)


def rms_norm(x, w, eps):
    """Llama's RMSNorm: x * rsqrt(mean(x^2) + eps) * w over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta, pairing, seq_axis):
    """Rotary embedding from its formula. The angles in PyTorch's f32 recipe (Meta's and Hugging
    Face's precompute): inv_freq = 1 / theta^(arange(0, D, 2) / D), freqs = outer(t, inv_freq).
    Pair i is (2i, 2i+1) interleaved (Meta's complex form), (i, i + D/2) half (rotate_half)."""
    T, D = x.shape[seq_axis], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2).float() / D))
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    c, s = torch.cos(freqs), torch.sin(freqs)        # (T, D/2)
    if seq_axis == 1:                                   # (B, T, H, D): broadcast over H
        c, s = c[:, None, :], s[:, None, :]
    if pairing == "interleaved":
        xp, xq = x.reshape(*x.shape[:-1], D // 2, 2).unbind(-1)
        return torch.stack((xp * c - xq * s, xq * c + xp * s), dim=-1).flatten(-2)
    xp, xq = x[..., :D // 2], x[..., D // 2:]
    return torch.cat((xp * c - xq * s, xq * c + xp * s), dim=-1)


def slice_of(x, axis, start, end):
    idx = [slice(None)] * x.dim()
    idx[axis] = slice(start, end)
    return x[tuple(idx)]


def run_node(op, xs, a, batch):
    b = lambda k, d="false": a.get(k, d) == "true"
    if op == "matmul":
        x, y = xs
        return [torch.matmul(x.mT if b("transpose_a") else x, y.mT if b("transpose_b") else y)]
    if op == "linear":
        return [F.linear(*xs)]
    if op in ("add", "sub", "mul"):
        return [{"add": torch.add, "sub": torch.sub, "mul": torch.mul}[op](*xs)]
    if op == "scale":
        return [xs[0] * float(a["factor"])]
    if op == "relu":
        return [F.relu(xs[0])]
    if op == "gelu":
        return [F.gelu(xs[0], approximate=a.get("approximate", "tanh"))]
    if op == "tanh":
        return [torch.tanh(xs[0])]
    if op == "sigmoid":
        return [torch.sigmoid(xs[0])]
    if op == "softmax":
        return [F.softmax(xs[0], dim=int(a.get("axis", -1)))]
    if op == "layernorm":
        x, w = xs[0], xs[1]
        return [F.layer_norm(x, (x.shape[-1],), w, xs[2] if len(xs) > 2 else None, float(a.get("eps", 1e-5))),
                None, None]
    if op == "embedding":
        return [F.embedding(xs[0].long(), xs[1])]
    if op == "reshape":
        return [xs[0].reshape(ints(a["shape"], batch))]
    if op == "transpose":
        return [xs[0].transpose(int(a["dim0"]), int(a["dim1"]))]
    if op == "permute":
        return [xs[0].permute(ints(a["perm"], batch))]
    if op == "split":
        return list(torch.split(xs[0], ints(a["sizes"], batch), dim=int(a.get("axis", -1))))
    if op == "concat":
        return [torch.cat(xs, dim=int(a.get("axis", -1)))]
    if op == "silu":
        return [F.silu(xs[0])]
    if op == "neg":
        return [torch.neg(xs[0])]
    if op == "exp":
        return [torch.exp(xs[0])]
    if op == "rsqrt":
        return [torch.rsqrt(xs[0])]
    if op == "pow":
        return [torch.pow(xs[0], float(a["exponent"]))]
    if op == "div":
        return [torch.div(*xs)]
    if op == "mean":
        return [xs[0].mean(dim=int(a["axis"]), keepdim=b("keepdim"))]
    if op == "slice":
        return [slice_of(xs[0], int(a["axis"]), int(a.get("start", 0)), int(a.get("end", 2**63 - 1)))]
    if op == "rms_norm":
        return [rms_norm(xs[0], xs[1], float(a.get("eps", 1e-6))), None]
    if op == "rope":
        return [rope(xs[0], float(a.get("theta", 10000)), a.get("pairing", "half"), int(a.get("seq_axis", 1)))]
    if op in ("causal_self_attention", "attention"):
        nh = int(a["n_head"])
        nkv, causal = int(a.get("n_kv_head", nh)), b("causal", "true")
        if op == "attention":
            return [sdpa(*xs, nh, nkv, causal), None]
        return [attention(xs[0], nh, nkv, causal), None]
    if op == "cross_entropy":
        lg, t = xs
        return [F.cross_entropy(lg.reshape(-1, lg.shape[-1]), t.reshape(-1).long())]
    if op == "mse_loss":
        return [F.mse_loss(*xs)]
    raise SystemExit("torch_ref.py: no PyTorch mapping for op " + op)


# ---- data, as runtime/data.c draws it

def text_data(path, frac):
    raw = open(path, "rb").read()
    vocab = sorted(set(raw))
    lut = {c: i for i, c in enumerate(vocab)}
    toks = torch.tensor([lut[c] for c in raw], dtype=torch.int32)
    return toks, int(len(raw) * frac)


def token_batch(toks, n_train, seed, step, mb, B, T):
    xs, ys = [], []
    for r in range(B):
        off = draw(seed, 0, step, mb, r) % (n_train - T)
        xs.append(toks[off:off + T])
        ys.append(toks[off + 1:off + T + 1])
    return torch.stack(xs), torch.stack(ys)


def table_data(path, frac, seed, scale):
    rows = []
    with gzip.open(path, "rt") if open(path, "rb").read(2) == b"\x1f\x8b" else open(path) as f:
        for line in f:
            if line.strip():
                rows.append([float(v) for v in line.strip().split(",")])
    perm = list(range(len(rows)))
    s = seed ^ 0x2545F4914F6CDD1D
    for i in range(len(rows) - 1, 0, -1):
        s, v = splitmix(s)
        j = v % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    x = torch.tensor([[v * scale for v in rows[p][:-1]] for p in perm], dtype=torch.float64).float()
    y = torch.tensor([int(rows[p][-1]) for p in perm], dtype=torch.int32)
    return x, y, int(len(rows) * frac)


# ---- init and safetensors

def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        data = t.detach().contiguous().float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def init_param(shape, spec, gen):
    t = torch.empty(shape)
    m = re.match(r"init=(\w+)(?:\((.*)\))?", spec)
    kind, args = m.group(1), dict(kv.split("=") for kv in (m.group(2) or "").split(",") if kv)
    if kind == "zeros":
        return t.zero_()
    if kind == "ones":
        return t.fill_(1)
    if kind == "normal":
        return t.normal_(float(args["mean"]), float(args["std"]), generator=gen)
    if kind == "uniform":
        return t.uniform_(float(args["a"]), float(args["b"]), generator=gen)
    if kind == "xavier":
        bound = float(args["gain"]) * math.sqrt(6.0 / (shape[-1] + shape[0]))
        return t.uniform_(-bound, bound, generator=gen)
    raise SystemExit("torch_ref.py: unknown init " + spec)


def lr_at(tr, step):
    lr, warm = tr["optimizer"]["lr"], tr.get("schedule", {}).get("warmup", 0)
    decay, min_lr = tr.get("schedule", {}).get("decay_steps", 0), tr.get("schedule", {}).get("min_lr", 0)
    if step < warm:
        return lr * (step + 1) / (warm + 1)
    if decay == 0:
        return lr
    if step > decay or decay <= warm:
        return min_lr
    ratio = (step - warm) / (decay - warm)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def main():
    ir_path, model_path, init_path, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    torch.set_num_threads(1)
    model = json.load(open(model_path))
    tr = model["training"]
    batch, M = tr["batch"], tr.get("microbatches", 1)
    mb = batch // M
    seed = tr.get("seed", 1337)
    inputs, params, nodes, loss_name = parse_ir(ir_path, mb)
    gen = torch.Generator().manual_seed(0)
    values, owners, save = {}, [], []
    for name, shape, spec in params:
        if spec.startswith("tied_to="):
            values[name] = values[spec[len("tied_to="):]]
            continue
        p = torch.nn.Parameter(init_param(shape, spec, gen))
        values[name] = p
        owners.append((name, p))
        save.append((name, p))
    save_safetensors(init_path, save)
    opt = tr["optimizer"]
    betas = tuple(opt.get("betas", [opt.get("beta1", 0.9), opt.get("beta2", 0.999)]))
    decay = [p for n, p in owners if p.dim() >= 2]
    nodecay = [p for n, p in owners if p.dim() < 2]
    optim = torch.optim.AdamW([{"params": decay, "weight_decay": opt.get("weight_decay", 0.0)},
                               {"params": nodecay, "weight_decay": 0.0}], lr=opt["lr"], betas=betas,
                              eps=opt.get("eps", 1e-8), foreach=False)
    data = tr["data"]
    dpath = data["path"]
    if not dpath.startswith("/") and "/" in model_path:
        dpath = model_path.rsplit("/", 1)[0] + "/" + dpath
    xin = data.get("input") or next(n for n, v in inputs.items() if not v[2])
    yin = data.get("target") or next(n for n, v in inputs.items() if v[2])
    if data["kind"] == "text":
        toks, n_train = text_data(dpath, data.get("train_fraction", 0.9))
        T = inputs[xin][1][1]
        batch_of = lambda step, m: token_batch(toks, n_train, seed, step, m, mb, T)
    else:
        X, Y, n_train = table_data(dpath, data.get("train_fraction", 0.9), seed, data.get("scale", 1.0))

        def batch_of(step, m):
            rows = [draw(seed, 0, step, m, r) % n_train for r in range(mb)]
            return X[rows], Y[rows]
    clip = tr.get("grad_clip", 0)
    for step in range(steps):
        optim.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(M):
            x, y = batch_of(step, m)
            env = dict(values)
            env[xin], env[yin] = x, y
            for outs, op, args, attrs in nodes:
                res = run_node(op, [env[a] for a in args], attrs, mb)
                for o, r in zip(outs, res):
                    env[o] = r
            loss = env[loss_name]
            (loss / M).backward()
            total += loss.item()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_([p for _, p in owners], clip)
        for g in optim.param_groups:
            g["lr"] = lr_at(tr, step)
        optim.step()
        print(step, "%.9g" % (total / M))


if __name__ == "__main__":
    main()
