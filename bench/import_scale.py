#!/usr/bin/env python3
"""How the .pt2 front end scales with the graph: Llama 3 blocks (tests/import/fixture_models.py,
small widths) of L layers exported by scripts/export_model.py, then `pipec import` (open the ZIP,
parse model.json, lower, print the JSON) and `pipec check` (import + every pass to shape) timed,
best of 3. The per-node cost should stay flat as L grows (no quadratic pass).

usage: bench/.venv-torch2/bin/python bench/import_scale.py PIPEC [L ...]   (default 8 32 128 512)
Prints a Markdown table (docs/benchmarks.md, "Importing .pt2").
"""
import os
import subprocess
import sys
import tempfile
import time
import zipfile
import json

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "import"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import export_model  # noqa: E402
import fixture_models as fm  # noqa: E402


def best(cmd, n=3):
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    pipec = os.path.abspath(sys.argv[1])
    layers = [int(a) for a in sys.argv[2:]] or [8, 32, 128, 512]
    print("| layers | ATen nodes | model.json | pipec nodes | import | check | import per node |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for L in layers:
            cfg = {"vocab_size": 32, "dim": 16, "n_layers": L, "n_heads": 2, "n_kv_heads": 1,
                   "ffn_dim": 32, "norm_eps": 1e-5, "rope_theta": 10000.0, "max_seq_len": 8,
                   "rope_pairing": "interleaved"}
            torch.manual_seed(0)
            model = fm.Llama3(cfg)
            x = torch.randint(0, 32, (2, 8))
            ep, _ = export_model.export(model, (x, x))
            pt2 = os.path.join(tmp, "l%d.pt2" % L)
            export_model.save(ep, pt2)
            with zipfile.ZipFile(pt2) as z:
                name = next(n for n in z.namelist() if n.endswith("models/model.json"))
                raw = z.read(name)
            aten = len(json.loads(raw)["graph_module"]["graph"]["nodes"])
            out = os.path.join(tmp, "l%d.json" % L)
            ti = best([pipec, "import", pt2, "-o", out])
            tc = best([pipec, "check", pt2])
            nodes = len(json.load(open(out))["nodes"])
            print("| %d | %d | %.1f MB | %d | %.3f s | %.3f s | %.1f µs |"
                  % (L, aten, len(raw) / 1e6, nodes, ti, tc, ti / aten * 1e6))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
