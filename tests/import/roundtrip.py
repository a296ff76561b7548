#!/usr/bin/env python3
"""The live round trip of pipec's .pt2 front end, where PyTorch 2.x is installed (not in CI's
requirements; bench/setup-torch2.sh makes such a venv):

  export a fresh module (scripts/export_model.py) -> pipec run MODEL.pt2 (20 AdamW steps on
  random batches, --save) -> load pipec's saved safetensors into the module with
  load_state_dict(strict=True) -> the module's logits on held-out batches equal pipec's
  --predict within 1e-5 (and the mean loss pipec prints equals the module's).

usage: roundtrip.py PIPEC [MODEL...]   (models: nanogpt llama3 hf_llama; default: all that import)
Exit 0 when every model passes, 1 otherwise; 77 (skipped) without torch 2.x.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    print("skip: needs torch 2.x and numpy (bench/setup-torch2.sh)")
    sys.exit(77)
if int(torch.__version__.split(".")[0]) < 2:
    print("skip: torch %s; the round trip needs torch.export (2.x)" % torch.__version__)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import export_model  # noqa: E402
import fixture_models as fm  # noqa: E402

B, T, V, STEPS, HELD = 4, 16, 65, 20, 8
LLAMA = {"vocab_size": V, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 176,
         "norm_eps": 1e-5, "rope_theta": 10000.0, "max_seq_len": T, "rope_pairing": "interleaved"}
MODELS = {  # name: (class, config, the module whose output is the logits)
    "nanogpt": (fm.NanoGPT, {"block_size": T, "vocab_size": V, "n_layer": 2, "n_head": 4,
                             "n_embd": 64, "dropout": 0.0, "bias": True}, "lm_head"),
    "llama3": (fm.Llama3, LLAMA, "output"),
    "hf_llama": (fm.HFLlama, {"vocab_size": V, "hidden_size": 64, "intermediate_size": 176,
                              "num_hidden_layers": 2, "num_attention_heads": 4,
                              "num_key_value_heads": 2, "max_position_embeddings": T,
                              "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                              "tie_word_embeddings": False, "attention_bias": False,
                              "mlp_bias": False}, "model.lm_head"),
}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=torch.float32).reshape(e["shape"])
    return out


def one(pipec, name, tmp):
    cls, cfg, head = MODELS[name]
    torch.manual_seed(0)
    try:
        model = cls(cfg)
    except ImportError as e:  # hf_llama without transformers
        print("skip %s: %s" % (name, e))
        return True
    g = torch.Generator().manual_seed(2)
    tok = torch.randint(0, V, (STEPS * B + HELD, T + 1), generator=g)
    x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    d = os.path.join(tmp, name)
    os.makedirs(d)
    ep, _ = export_model.export(model, (x[:B], y[:B]))
    pt2 = os.path.join(d, name + ".pt2")
    export_model.save(ep, pt2)
    for nm, arr in (("idx", x), ("targets", y)):
        np.save(os.path.join(d, nm + ".npy"), arr[:STEPS * B].numpy().astype(np.int32))
        np.save(os.path.join(d, "held_" + nm + ".npy"), arr[STEPS * B:].numpy().astype(np.int32))
    train = {"batch": B, "steps": STEPS, "log_every": 5,
             "optimizer": {"kind": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.1},
             "data": {"kind": "npy", "shuffle": False, "train_fraction": 1,
                      "files": {"idx": os.path.join(d, "idx.npy"),
                                "targets": os.path.join(d, "targets.npy")}}}
    json.dump(train, open(os.path.join(d, "train.json"), "w"))
    out = os.path.join(d, "out")
    ck = os.path.join(d, "trained.safetensors")
    r = subprocess.run([pipec, "run", pt2, "--training", os.path.join(d, "train.json"), "-o", out,
                        "--", "--save", ck], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL %s: pipec run: %s" % (name, r.stderr[-2000:]))
        return False
    pred = os.path.join(d, "pred.npy")
    r = subprocess.run([os.path.join(out, "bin", "train"), "--predict", os.path.join(d, "held_idx.npy"),
                        "--data-file", "targets=" + os.path.join(d, "held_targets.npy"),
                        "--init", ck, "--out", pred], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL %s: --predict: %s" % (name, r.stderr[-2000:]))
        return False
    pipec_loss = float(r.stdout.split("mean loss")[-1].split()[0])
    model.load_state_dict(read_safetensors(ck), strict=True)  # every FQN, nothing extra
    model.eval()
    logits = []
    hook = model.get_submodule(head).register_forward_hook(lambda m, i, o: logits.append(o))
    with torch.no_grad():
        loss = model(x[STEPS * B:], y[STEPS * B:]).item()
    hook.remove()
    ours = torch.from_numpy(np.load(pred)).reshape(logits[0].shape)
    diff = (ours - logits[0]).abs().max().item()
    scale = logits[0].abs().max().item()
    good = diff <= 1e-5 * max(1.0, scale) and abs(pipec_loss - loss) <= 1e-4 * abs(loss)
    print("%s %s: %d steps, load_state_dict(strict=True) ok, logits max |diff| %.2e (max |logit| "
          "%.2f), loss torch %.5f pipec %.5f" % ("ok  " if good else "FAIL", name, STEPS, diff, scale,
                                                 loss, pipec_loss))
    return good


def main():
    pipec = os.path.abspath(sys.argv[1])
    names = sys.argv[2:] or list(MODELS)
    with tempfile.TemporaryDirectory() as tmp:
        results = [one(pipec, n, tmp) for n in names]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
