"""skip_net on a synthetic table: writes MODEL-OUT (samples/skip_net.json with a training section)
and TABLE-OUT (300 rows of 32 features in [-2, 2] and a label 0..9 from the first five features).

Usage: skip_net_table.py samples/skip_net.json MODEL-OUT TABLE-OUT
Shared by the parity test and the hashes test, so that both train the same model on the same rows.
"""
import json
import random
import sys

rng = random.Random(7)
with open(sys.argv[3], "w") as f:
    for _ in range(300):
        x = [rng.uniform(-2, 2) for _ in range(32)]
        f.write(",".join("%.4f" % v for v in x) + ",%d\n" % (int(abs(sum(x[:5])) * 3) % 10))
m = json.load(open(sys.argv[1]))
m["training"] = {"batch": 16, "microbatches": 2, "steps": 20, "seed": 5,
                 "optimizer": {"kind": "adamw", "lr": 0.003, "weight_decay": 0.01}, "grad_clip": 0.5,
                 "data": {"kind": "csv", "path": sys.argv[3], "train_fraction": 0.8}}
json.dump(m, open(sys.argv[2], "w"), indent=1)
