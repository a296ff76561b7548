#!/usr/bin/env python3
"""The bad-archive catalogue of pipec's .pt2 front end: each case a hostile or unsupported
archive, made from a committed fixture with the standard library alone (zipfile, json), and the
exact stderr `pipec check NAME.pt2` must print (exit status 1), run from the output directory.

usage: make_bad.py FIXTURES_DIR OUT_DIR   writes OUT_DIR/NAME.pt2 and OUT_DIR/NAME.err per case
"""
import json
import os
import struct
import sys
import zipfile

MLP, LLAMA = "mlp_regression", "llama3_interleaved"


def entries(fx):
    with zipfile.ZipFile(fx) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def write(path, items, stem=None):
    """Writes items (name, bytes) stored, renaming the top folder to the output's stem."""
    stem = stem or os.path.basename(path)[:-4]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in items:
            if not name.startswith(("/", "x/")):
                name = stem + "/" + name.split("/", 1)[1]
            elif name.startswith("x/"):
                name = stem + name[1:]
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)


def edit_model(items, fn):
    out = []
    for name, data in items:
        if name.endswith("models/model.json"):
            m = json.loads(data)
            fn(m)
            data = json.dumps(m).encode()
        out.append((name, data))
    return out


def graph(m):
    return m["graph_module"]["graph"]


def node(m, name):
    return next(n for n in graph(m)["nodes"] if n["name"] == name)


def case_unsupported_op(m):  # two nodes with no row, both reported, at the user's Python lines
    node(m, "relu")["target"] = "torch.ops.aten.foo.default"
    node(m, "relu_1")["target"] = "torch.ops.aten.bar.Tensor"


def case_schema_major(m):
    m["schema_version"]["major"] = 9


def case_two_outputs(m):
    sig = m["graph_module"]["signature"]
    sig["output_specs"].append({"user_output": {"arg": {"as_tensor": {"name": "relu"}}}})


def case_input_no_source(m):  # a node reads a tensor no input or node makes
    node(m, "relu")["inputs"][0]["arg"]["as_tensor"]["name"] = "ghost"


def case_second_symbol(m):
    tv = graph(m)["tensor_values"]["relu"]
    tv["sizes"][1] = {"as_expr": {"expr_str": "Symbol('s99', positive=True, integer=True)",
                                  "hint": {"as_int": 64}}}


def case_static_batch(m):
    for t in graph(m)["tensor_values"].values():
        t["sizes"] = [{"as_int": 4} if "as_expr" in s else s for s in t["sizes"]]
    graph(m)["sym_int_values"] = {}


def case_gelu_mode(m):
    n = node(m, "relu")
    n["target"] = "torch.ops.aten.gelu.default"
    n["inputs"].append({"name": "approximate", "arg": {"as_string": "erf"}, "kind": 2})


def case_cycle(m):  # linear reads relu, which reads linear
    node(m, "linear")["inputs"][0]["arg"]["as_tensor"]["name"] = "relu"


def case_signature_kind(m):
    sig = m["graph_module"]["signature"]
    s = sig["input_specs"][-1]
    sig["input_specs"][-1] = {"custom_obj": s["user_input"]}


def case_buffer_shape(m):  # the graph declares the buffer bigger than the archive holds
    graph(m)["tensor_values"]["b_rope_cos"]["sizes"] = [{"as_int": 64}, {"as_int": 8}]


MODEL_CASES = {  # name: (fixture, edit, expected stderr)
    "unsupported_op": (MLP, case_unsupported_op,
                       "tests/import/fixture_models.py:227: error: aten.foo.default is not supported (node relu)\n"
                       "tests/import/fixture_models.py:227: error: aten.bar.Tensor is not supported (node relu_1)\n"),
    "schema_major": (MLP, case_schema_major,
                     "schema_major.pt2: error: entry 'schema_major/models/model.json': schema_version 9.20 is not supported (supported majors: 8)\n"),
    "two_outputs": (MLP, case_two_outputs,
                    "two_outputs.pt2: error: the module returns 2 outputs; pipec imports a module that returns its scalar loss (given inputs and targets)\n"),
    "input_no_source": (MLP, case_input_no_source,
                        "tests/import/fixture_models.py:227: error: relu.default: argument 'self' must be a tensor of the graph (got 'ghost', which is not) (node relu)\n"),
    "second_symbol": (MLP, case_second_symbol,
                      "second_symbol.pt2: error: tensor 'relu': size {\"as_expr\":{\"expr_str\":\"Symbol('s99', positive=True, integer=True)\",\"hint\":{\"as_int\":64}}} is not supported (sizes are integers or the batch dimension, k*batch)\n"),
    "static_batch": (MLP, case_static_batch,
                     "static_batch.pt2: error: the archive was exported with a static batch (no dynamic dimension): export with torch.export.Dim on the inputs' first dim (scripts/export_model.py, docs/import.md)\n"),
    "gelu_mode": (MLP, case_gelu_mode,
                  "tests/import/fixture_models.py:227: error: gelu.default: approximate='erf' is not supported (none, tanh) (node relu)\n"),
    "cycle": (MLP, case_cycle,
              "tests/import/fixture_models.py:225: error: linear.default: tensor 'relu' depends on itself (the graph has a cycle) (node linear)\n"),
    "buffer_shape": (LLAMA, case_buffer_shape,
                     "buffer_shape.pt2: error: buffer 'rope_cos' holds 128 values; its graph input (64,8) needs 512\n"),
    "signature_kind": (MLP, case_signature_kind,
                       "signature_kind.pt2: error: signature: input kind 'custom_obj' is not supported (parameter, buffer, user_input)\n"),
}


def rope_not_rope(items):  # a RoPE table that is no theta's: the rotation is refused by name
    out = []
    for name, data in items:
        if name.endswith("data/constants/tensor_0"):
            data = bytearray(data)
            data[4 * 9:4 * 10] = struct.pack("<f", 0.5)  # cos table, position 1, pair 1
        out.append((name, bytes(data)))
    return out


def replace(items, suffix, fn):
    return [(n, fn(d) if n.endswith(suffix) else d) for n, d in items]


def pickled(data):
    c = json.loads(data)
    c["config"]["layers.0.bias"]["use_pickle"] = True
    return json.dumps(c).encode()


def archive_cases(items):
    """Archives whose container or weights are wrong (written with their own entry names)."""
    yield "dotdot", items + [("x/../../evil", b"x")], \
        "dotdot.pt2: error: entry 'dotdot/../../evil': an absolute name or one with '..' is refused\n"
    yield "absolute", items + [("/etc/evil", b"x")], \
        "absolute.pt2: error: entry '/etc/evil': an absolute name or one with '..' is refused\n"
    yield "weight_bytes", replace(items, "weights/weight_5", lambda d: d[:3]), \
        "weight_bytes.pt2: error: weight 'layers.2.bias': entry 'weight_bytes/data/weights/weight_5' holds 3 bytes; f32 [1] needs 4\n"
    yield "pickled", replace(items, "model_weights_config.json", pickled), \
        "pickled.pt2: error: weight 'layers.0.bias' is pickled (use_pickle), which pipec never reads\n"
    yield "no_model", [(n, d) for n, d in items if not n.endswith("models/model.json")], \
        "no_model.pt2: error: no entry '<name>/models/model.json': not a torch.export archive\n"


def container_cases(fx_items, fx_bytes):
    yield "not_zip", b"this is not an archive\n", \
        "not_zip.pt2: error: not a ZIP archive (torch.export.save writes one)\n"
    yield "truncated", fx_bytes[:len(fx_bytes) // 2], \
        "truncated.pt2: error: truncated ZIP archive (no end of central directory record)\n"


def main():
    fixtures, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    cases = []
    for name, (fx, edit, err) in MODEL_CASES.items():
        write(os.path.join(out, name + ".pt2"),
              edit_model(entries(os.path.join(fixtures, fx + ".pt2")), edit))
        cases.append((name, err))
    write(os.path.join(out, "rope_table.pt2"),
          rope_not_rope(entries(os.path.join(fixtures, LLAMA + ".pt2"))))
    cases.append(("rope_table",
                  "tests/import/fixture_models.py:147: error: the RoPE tables (buffer rope_cos) are not cos and sin of positions 0..15 times 1/theta^(2i/16) for any theta (scaled RoPE variants are not supported) (node cat)\n"))
    for name, items, err in archive_cases(entries(os.path.join(fixtures, MLP + ".pt2"))):
        write(os.path.join(out, name + ".pt2"), items)
        cases.append((name, err))
    with open(os.path.join(fixtures, MLP + ".pt2"), "rb") as f:
        raw = f.read()
    for name, data, err in container_cases(None, raw):
        with open(os.path.join(out, name + ".pt2"), "wb") as f:
            f.write(data)
        cases.append((name, err))
    for name, err in cases:
        with open(os.path.join(out, name + ".err"), "w") as f:
            f.write(err)


if __name__ == "__main__":
    main()
