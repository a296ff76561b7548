#!/usr/bin/env python3
"""Reads and crafts safetensors files for the e2e tests (json and struct only, no numpy).

  st_tool.py meta FILE KEY               print metadata KEY ('' when absent)
  st_tool.py setmeta FILE KEY VALUE      set metadata KEY (the rest of the file unchanged)
  st_tool.py poke FILE TENSOR INDEX X    set element INDEX of an F32 tensor to float(X) (nan, inf)
  st_tool.py drop FILE TENSOR            remove a tensor (the data section repacked)
  st_tool.py same-tensors A B            exit 0 when A and B hold the same tensors, byte for byte
                                         (names, dtypes, shapes, data; metadata ignored)
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
    else:
        raise SystemExit("unknown command " + cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
