#!/usr/bin/env python3
"""Export a PyTorch module to a torch.export `.pt2` archive in the form pipec's importer reads.

The module's forward takes the inputs and the targets and returns the scalar loss (nanoGPT's
forward(idx, targets) -> loss). torch.export traces it (the batch dimension dynamic where the
model allows), then run_decompositions lowers it to core ATen with torch's default table less
the ops pipec has whole, which stay single nodes: linear, layer_norm, rms_norm,
scaled_dot_product_attention, cross_entropy_loss, gelu, silu, embedding (gelu and embedding are
core ATen already; the others are popped from the table). The archive's stack_trace strings name
the exporting script and torch's files by absolute path: relativize() rewrites them relative to
the repository (torch's and other packages' to `torch/...`, `transformers/...`) before saving,
so no machine's path goes into a committed archive. Needs PyTorch 2.x (tests/import/FORMAT.md
describes the archive; tests/import/make_fixtures.py is the user).

usage: export_model.py MODULE.py:FACTORY OUT.pt2
    FACTORY() returns (model, example_args); the first dimension of every example argument is
    the batch and is exported dynamic.
"""
import importlib.util
import os
import re
import shutil
import sys
import tempfile

import torch

A = torch.ops.aten
KEPT = [A.linear.default, A.layer_norm.default, A.rms_norm.default,
        A.scaled_dot_product_attention.default, A.cross_entropy_loss.default,
        A.gelu.default, A.silu.default, A.embedding.default]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def decomp_table():
    """torch's default core-ATen table without the ops pipec keeps whole."""
    table = torch.export.default_decompositions()
    for op in KEPT:
        table.pop(op, None)
    return table


def export(model, args, dynamic_batch=True):
    """torch.export with the batch dim dynamic (falls back to static if export refuses it),
    then the decomposition. Returns (ExportedProgram, whether the batch is dynamic)."""
    model.eval()
    if dynamic_batch:
        batch = torch.export.Dim("batch", min=1, max=1024)
        shapes = tuple({0: batch} for _ in args)
        try:
            ep = torch.export.export(model, args, dynamic_shapes=shapes)
            return ep.run_decompositions(decomp_table()), True
        except Exception as e:  # noqa: BLE001  (any export refusal: report and go static)
            print("export_model: dynamic batch refused (%s); exporting static" % str(e).splitlines()[0],
                  file=sys.stderr)
    ep = torch.export.export(model, args)
    return ep.run_decompositions(decomp_table()), False


_SITE = re.compile(r'[^"\s,]*?(?:site|dist)-packages/')


def relative_path(text):
    """One stack trace with machine paths made relative: the repository's to the repository,
    installed packages' to the package (torch/..., transformers/...)."""
    return _SITE.sub("", text).replace(REPO + "/", "")


def relativize(ep):
    """Rewrites every node's stack_trace in place (the graph module's and its submodules') and
    drops from_node, the passes' provenance (it holds Python object ids, so every export differs)."""
    for gm in ep.graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            for node in gm.graph.nodes:
                if node.meta.get("stack_trace"):
                    node.meta["stack_trace"] = relative_path(node.meta["stack_trace"])
                node.meta.pop("from_node", None)  # pass provenance with object ids: noise
    return ep


def save(ep, path):
    """Writes the archive atomically: saved in a temporary folder beside it under the same name
    (the archive's top folder is named after the file), then renamed into place."""
    tmpdir = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(path)))
    try:
        tmp = os.path.join(tmpdir, os.path.basename(path))
        torch.export.save(relativize(ep), tmp)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def main(argv):
    if len(argv) != 3 or ":" not in argv[1]:
        sys.exit("usage: " + __doc__.split("usage: ")[1].rstrip())
    file, factory = argv[1].rsplit(":", 1)
    spec = importlib.util.spec_from_file_location("exported_module", file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model, args = getattr(mod, factory)()
    ep, dynamic = export(model, args)
    save(ep, argv[2])
    print("%s: %d nodes, batch %s" % (argv[2], len(ep.graph.nodes), "dynamic" if dynamic else "static"))


if __name__ == "__main__":
    main(sys.argv)
