#!/usr/bin/env python3
"""Writes the committed torch.export fixtures of pipec's .pt2 importer, with torch's reference.

Run with PyTorch 2.x (not in CI; bench/setup-torch2.sh makes such a venv), from anywhere:
    bench/.venv-torch2/bin/python tests/import/make_fixtures.py [NAME...]
For each model of tests/import/fixture_models.py it writes tests/import/fixtures/NAME.pt2
(scripts/export_model.py's export: batch dimension dynamic, pipec's whole ops kept, stack traces
made relative) and NAME.json, torch's reference:
  - "batches": the fixed batches, stored whole ("inputs", "targets" per batch; batch 0 is the
    evaluation batch, batches 1..10 the training steps'), drawn by torch.Generator seeded with
    "data_seed" (tokens: randint(0, V, (B, T + 1)), inputs [:, :-1], targets [:, 1:]; regression:
    x randn(B, in), y = sin(x) @ ones(in, out) / in);
  - "loss": the loss at the archive's weights on batch 0, computed by the eager module (and
    checked against the exported program's own forward);
  - "adamw": torch.optim.AdamW's hyperparameters (weight decay on parameters of 2 or more
    dimensions only, no clipping, nanoGPT's grouping) and "losses", the loss of each of the 10
    steps (step k's forward on batch k, before its update), then "loss_after" on batch 0;
  - "ops": the distinct ATen targets of the archive's graph, the importer's worklist.
The module's weights are drawn with torch.manual_seed("seed") and one thread; the archive holds
exactly those weights. The script fails if any text entry of an archive names a machine path.
"""
import json
import os
import sys
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import export_model  # noqa: E402
import fixture_models as fm  # noqa: E402

B, STEPS = 4, 10
ADAMW = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
         "decay": "parameters with dim >= 2 only", "clip": None}
LLAMA = {"vocab_size": 65, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 176,
         "norm_eps": 1e-5, "rope_theta": 500000.0, "max_seq_len": 16}
FIXTURES = {
    "nanogpt": (fm.NanoGPT, {"block_size": 16, "vocab_size": 65, "n_layer": 2, "n_head": 4,
                             "n_embd": 64, "dropout": 0.0, "bias": True}, "tokens", 16),
    "llama3_interleaved": (fm.Llama3, dict(LLAMA, rope_pairing="interleaved"), "tokens", 16),
    "llama3_halves": (fm.Llama3, dict(LLAMA, rope_pairing="halves"), "tokens", 16),
    "llama3_complex": (fm.Llama3, dict(LLAMA, rope_pairing="complex"), "tokens", 16),
    "hf_llama": (fm.HFLlama, {"vocab_size": 65, "hidden_size": 64, "intermediate_size": 176,
                              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                              "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                              "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
                 "tokens", 16),
    "mlp_regression": (fm.MLPRegression, {"in": 16, "hidden": [64, 64], "out": 1}, "regression", None),
}
MACHINE_PATHS = ("/work/", "/usr/", "/home/", "/root/", "/tmp/", "-packages/", ".venv")


def batches(kind, cfg, T, seed):
    """STEPS + 1 fixed batches (see the docstring's recipe)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS + 1):
        if kind == "tokens":
            V = cfg.get("vocab_size")
            tok = torch.randint(0, V, (B, T + 1), generator=g)
            out.append((tok[:, :-1].contiguous(), tok[:, 1:].contiguous()))
        else:
            x = torch.randn(B, cfg["in"], generator=g)
            out.append((x, torch.sin(x) @ torch.ones(cfg["in"], cfg["out"]) / cfg["in"]))
    return out


def adamw_losses(model, data):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=ADAMW["lr"], betas=tuple(ADAMW["betas"]), eps=ADAMW["eps"])
    model.train()
    losses = []
    for x, y in data[1:]:
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        return losses, model(*data[0]).item()


def ops_of(path):
    """The distinct node targets of the archive's graph, as model.json names them."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/models/model.json"))
        nodes = json.loads(z.read(name))["graph_module"]["graph"]["nodes"]
    return sorted({n["target"] for n in nodes})


def check_paths(path):
    """Fails if any entry of the archive holds a machine path (binary weights are skipped)."""
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if "/data/weights/" in info.filename or "/data/constants/" in info.filename:
                continue
            text = z.read(info).decode("utf-8", "replace")
            for p in MACHINE_PATHS:
                if p in text:
                    i = text.index(p)
                    sys.exit("%s: %s holds a machine path: ...%s..." % (path, info.filename, text[max(0, i - 60):i + 60]))


def tensor_json(t):
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "data": t.flatten().tolist()}


def make(name, out_dir):
    cls, cfg, kind, T = FIXTURES[name]
    torch.manual_seed(0)
    model = cls(cfg)
    data = batches(kind, cfg, T, seed=1)
    model.eval()
    with torch.no_grad():
        loss = model(*data[0]).item()
    ep, dynamic = export_model.export(model, data[0])
    with torch.no_grad():
        exported_loss = ep.module()(*data[0]).item()
    assert abs(exported_loss - loss) <= 1e-5 * max(1.0, abs(loss)), (name, loss, exported_loss)
    pt2 = os.path.join(out_dir, name + ".pt2")
    export_model.save(ep, pt2)
    check_paths(pt2)
    losses, after = adamw_losses(model, data)  # after the save: the archive holds the initial weights
    ref = {"fixture": name + ".pt2", "torch": torch.__version__.split("+")[0], "model": cls.__name__,
           "config": cfg, "seed": 0, "data_seed": 1, "batch_dynamic": dynamic, "loss": loss,
           "adamw": dict(ADAMW, steps=STEPS, losses=losses, loss_after=after), "ops": ops_of(pt2),
           "batches": [{"inputs": tensor_json(x), "targets": tensor_json(y)} for x, y in data]}
    tmp = os.path.join(out_dir, name + ".json.tmp")
    with open(tmp, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, name + ".json"))
    print("%s: %d bytes, loss %.6f, batch %s, %d ops" % (pt2, os.path.getsize(pt2), loss,
                                                        "dynamic" if dynamic else "static", len(ref["ops"])))


def main(names):
    torch.set_num_threads(1)
    out_dir = os.path.join(HERE, "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    for name in names or FIXTURES:
        if name == "hf_llama":
            try:
                import transformers  # noqa: F401
            except ImportError:
                print("hf_llama: transformers is not installed; skipped", file=sys.stderr)
                continue
        make(name, out_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
