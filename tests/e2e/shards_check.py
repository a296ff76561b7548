"""Checks of a sharded checkpoint directory for tests/e2e/shards.sh.

  shards_check.py same DIR FILE      DIR's tensors (through its index) equal the one-file
                                     checkpoint FILE's, name for name, byte for byte; DIR/optimizer
                                     likewise equals FILE.optim; every shard carries the index's
                                     save id and step
  shards_check.py package DIR        the same tensors read with the safetensors package's own
                                     reader (exit 77 when it is not importable)
"""
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        d = f.read()
    meta = h.pop("__metadata__", {})
    return meta, {k: d[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items()}


def sharded(dirname, half):
    ix = json.load(open(os.path.join(dirname, half + ".safetensors.index.json")))
    md, out = ix["metadata"], {}
    for f in sorted(set(ix["weight_map"].values())):
        meta, t = read(os.path.join(dirname, f))
        if meta.get("save_id") != md["save_id"] or meta.get("step") != md["step"]:
            sys.exit("%s: save id %s step %s, index %s step %s" % (f, meta.get("save_id"), meta.get("step"), md["save_id"], md["step"]))
        for k, v in t.items():
            if ix["weight_map"].get(k) != f:
                sys.exit("%s: tensor %s is not mapped to it" % (f, k))
            out[k] = v
    if set(out) != set(ix["weight_map"]):
        sys.exit("%s index: names without a tensor: %s" % (half, sorted(set(ix["weight_map"]) - set(out))[:3]))
    return out


def same(a, b, what):
    if set(a) != set(b):
        sys.exit("%s: names differ: only sharded %s, only one-file %s" % (what, sorted(set(a) - set(b))[:3], sorted(set(b) - set(a))[:3]))
    for k in a:
        if a[k] != b[k]:
            sys.exit("%s: tensor %s differs" % (what, k))


def main(argv):
    if argv[1] == "same":
        same(sharded(argv[2], "model"), read(argv[3])[1], "parameters")
        same(sharded(argv[2], "optimizer"), read(argv[3] + ".optim")[1], "optimizer state")
        return 0
    try:
        from safetensors import safe_open
    except ImportError:
        print("the safetensors package is not importable here")
        return 77
    for half in ("model", "optimizer"):
        ref = sharded(argv[2], half)
        ix = json.load(open(os.path.join(argv[2], half + ".safetensors.index.json")))
        got = {}
        for f in sorted(set(ix["weight_map"].values())):
            with safe_open(os.path.join(argv[2], f), framework="numpy") as st:
                if st.metadata().get("save_id") != ix["metadata"]["save_id"]:
                    sys.exit("%s: the package reads another save id" % f)
                for k in st.keys():
                    got[k] = st.get_tensor(k).astype("<f4").tobytes()
        same(got, ref, half + " (safetensors package)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
