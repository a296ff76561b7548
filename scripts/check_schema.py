#!/usr/bin/env python3
"""Validates pipec model files against docs/model.schema.json (JSON Schema draft 2020-12).

Usage: scripts/check_schema.py [--schema PATH] MODEL.json|DIR...
A directory stands for every *.json file in it (tests/gradcheck/: one model per op of the registry).
Exit status: 0 all files valid, 1 some file invalid or unreadable, 2 usage error,
77 (the automake/CTest "skipped" code) when the jsonschema module is unavailable.

jsonschema is Debian's python3-jsonschema. When the running interpreter lacks it (e.g. a pyenv or
venv python3 first on PATH), the script re-runs itself once with /usr/bin/python3.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM_PYTHON = "/usr/bin/python3"

try:
    import jsonschema
except ImportError:
    if (os.environ.get("PIPEC_CHECK_SCHEMA_REEXEC") != "1" and os.path.exists(SYSTEM_PYTHON)
            and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)):
        os.environ["PIPEC_CHECK_SCHEMA_REEXEC"] = "1"
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    print("skip: jsonschema not available")
    sys.exit(77)


def where(err):
    path = "".join("[%d]" % p if isinstance(p, int) else "." + str(p) for p in err.absolute_path)
    return path or "(top level)"


def main():
    p = argparse.ArgumentParser(description="Validate pipec model files against the v1 JSON Schema.")
    p.add_argument("--schema", default=os.path.join(ROOT, "docs", "model.schema.json"))
    p.add_argument("files", nargs="+", metavar="MODEL.json|DIR")
    a = p.parse_args()
    files = []
    for path in a.files:
        if os.path.isdir(path):
            files += sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".json"))
        else:
            files.append(path)
    with open(a.schema, encoding="utf-8") as f:
        schema = json.load(f)
    cls = jsonschema.Draft202012Validator
    cls.check_schema(schema)
    validator = cls(schema)
    bad = 0
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print("%s: %s" % (path, e))
            bad += 1
            continue
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for e in errors:
            # For oneOf failures, show the branch that got furthest.
            best = jsonschema.exceptions.best_match([e])
            print("%s: %s: %s" % (path, where(best), best.message))
        if errors:
            bad += 1
        else:
            print("%s: ok" % path)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
