#!/usr/bin/env python3
"""Reads and crafts safetensors files for the e2e tests (json and struct only, no numpy).

  st_tool.py meta FILE KEY               print metadata KEY ('' when absent)
  st_tool.py setmeta FILE KEY VALUE      set metadata KEY (the rest of the file unchanged)
  st_tool.py poke FILE TENSOR INDEX X    set element INDEX of an F32 tensor to float(X) (nan, inf)
  st_tool.py flip FILE TENSOR INDEX      flip the lowest bit of element INDEX of an F32 tensor in
                                         place (one byte of the file changes; the value stays finite)
  st_tool.py saveid FILE                 print the save id of the pair FILE, FILE.optim recomputed
                                         from their contents and FILE's step (runtime/checkpoint.c)
  st_tool.py drop FILE TENSOR            remove a tensor (the data section repacked)
  st_tool.py same-tensors A B            exit 0 when A and B hold the same tensors, byte for byte
                                         (names, dtypes, shapes, data; metadata ignored)
  st_tool.py diff A B                    print where A and B differ (metadata keys, tensors missing
                                         or of another dtype/shape, the first differing element of
                                         each tensor and the count); exit 1 when they differ
  st_tool.py maxrel A B                  print the largest difference of an F32 tensor of A and B
                                         relative to that tensor's largest magnitude in A,
                                         max over tensors of max|a - b| / max|a| (same tensors)
  st_tool.py median-step A B PART        print the median |b - a| over the elements that differ
                                         of the F32 tensors whose name contains PART, and their
                                         count
"""
import json
import struct
import sys


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write(path, header, data):
    hb = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + data)


def tensors(header, data):
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def diff(path_a, ha, da, path_b):
    hb, db = read(path_b)
    n = 0
    ma, mb = ha.get("__metadata__", {}), hb.get("__metadata__", {})
    for k in sorted(set(ma) | set(mb)):
        if ma.get(k) != mb.get(k):
            print("metadata %s: %r vs %r" % (k, ma.get(k), mb.get(k)))
            n += 1
    ta, tb = tensors(ha, da), tensors(hb, db)
    for k in sorted(set(ta) | set(tb)):
        if k not in ta or k not in tb:
            print("tensor %s: only in %s" % (k, path_a if k in ta else path_b))
        elif ta[k][:2] != tb[k][:2]:
            print("tensor %s: %s%s vs %s%s" % (k, ta[k][0], ta[k][1], tb[k][0], tb[k][1]))
        elif ta[k][2] != tb[k][2]:
            a, b = ta[k][2], tb[k][2]
            w = 4 if ta[k][0] in ("F32", "I32") else 1
            idx = [i for i in range(0, len(a), w) if a[i:i + w] != b[i:i + w]]
            i = idx[0]
            va, vb = (struct.unpack("<f", x[i:i + 4])[0] for x in (a, b)) if ta[k][0] == "F32" else (a[i:i + w], b[i:i + w])
            print("tensor %s: %d of %d elements differ, first [%d] %r vs %r" % (k, len(idx), len(a) // w, i // w, va, vb))
        else:
            continue
        n += 1
    if n == 0 and (ha, da) != (hb, db):
        print("same tensors and metadata, other bytes (header layout or order)")
        n = 1
    return 1 if n else 0


MASK = (1 << 64) - 1


def mix(h, w):
    h = ((h ^ w) * 0x9e3779b97f4a7c15) & MASK
    return h ^ (h >> 29)


def hash_file(path, h):
    """h continued over the file's tensors in data order: name (FNV-1a 64), element count, the
    values' bits as 8-byte words and a last 4-byte one (the save id's hash)."""
    header, data = read(path)
    for k, v in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                       key=lambda kv: kv[1]["data_offsets"]):
        fnv = 0xcbf29ce484222325
        for c in k.encode():
            fnv = ((fnv ^ c) * 0x100000001b3) & MASK
        b, e = v["data_offsets"]
        n = (e - b) // 4
        h = mix(mix(h, fnv), n)
        for w in struct.unpack_from("<%dQ" % (n // 2), data, b):
            h = mix(h, w)
        if n % 2:
            h = mix(h, struct.unpack_from("<I", data, e - 4)[0])
    return h


def main(argv):
    cmd, path = argv[1], argv[2]
    h, d = read(path)
    if cmd == "meta":
        print(h.get("__metadata__", {}).get(argv[3], ""))
    elif cmd == "setmeta":
        h.setdefault("__metadata__", {})[argv[3]] = argv[4]
        write(path, h, d)
    elif cmd == "poke":
        e, i = h[argv[3]], int(argv[4])
        assert e["dtype"] == "F32"
        at = e["data_offsets"][0] + 4 * i
        write(path, h, d[:at] + struct.pack("<f", float(argv[5])) + d[at + 4:])
    elif cmd == "flip":
        e, i = h[argv[3]], int(argv[4])
        assert e["dtype"] == "F32"
        at = 8 + struct.unpack("<Q", open(path, "rb").read(8))[0] + e["data_offsets"][0] + 4 * i
        with open(path, "r+b") as f:
            f.seek(at)
            b = f.read(1)[0]
            f.seek(at)
            f.write(bytes([b ^ 1]))
    elif cmd == "saveid":
        step = int(h["__metadata__"]["step"])
        x = hash_file(path, mix(0x70697065635f636b, step))
        print("%016x" % hash_file(path + ".optim", mix(x, 0x6f7074696d)))
    elif cmd == "drop":
        del h[argv[3]]
        out, data = {k: v for k, v in h.items() if k == "__metadata__"}, b""
        for k, v in sorted(((k, v) for k, v in h.items() if k != "__metadata__"),
                           key=lambda kv: kv[1]["data_offsets"]):
            b, e = v["data_offsets"]
            out[k] = dict(v, data_offsets=[len(data), len(data) + e - b])
            data += d[b:e]
        write(path, out, data)
    elif cmd == "same-tensors":
        h2, d2 = read(argv[3])
        return 0 if tensors(h, d) == tensors(h2, d2) else 1
    elif cmd == "diff":
        return diff(path, h, d, argv[3])
    elif cmd == "maxrel":
        ta, tb = tensors(h, d), tensors(*read(argv[3]))
        assert sorted(ta) == sorted(tb), "not the same tensors"
        worst = 0.0
        for k, (dt, shape, a) in ta.items():
            if dt != "F32":
                continue
            b = tb[k][2]
            va = struct.unpack("<%df" % (len(a) // 4), a)
            vb = struct.unpack("<%df" % (len(b) // 4), b)
            top = max(abs(x) for x in va) or 1.0
            worst = max(worst, max(abs(x - y) for x, y in zip(va, vb)) / top)
        print("%.3g" % worst)
    elif cmd == "median-step":
        ta, tb = tensors(h, d), tensors(*read(argv[3]))
        steps = []
        for k, (dt, shape, a) in ta.items():
            if dt != "F32" or argv[4] not in k:
                continue
            va = struct.unpack("<%df" % (len(a) // 4), a)
            vb = struct.unpack("<%df" % (len(a) // 4), tb[k][2])
            steps += [abs(y - x) for x, y in zip(va, vb) if y != x]
        steps.sort()
        print("%.9g %d" % (steps[len(steps) // 2] if steps else 0.0, len(steps)))
    else:
        raise SystemExit("unknown command " + cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
