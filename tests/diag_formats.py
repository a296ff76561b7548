#!/usr/bin/env python3
"""--diagnostics-format=text|json|sarif (docs/diagnostics.md): the same diagnostics in every format.

Usage: tests/diag_formats.py PIPEC ROOT [--schema]

1. The bad-model catalogues (tests/bad with `pipec check`, tests/bad_training with `pipec plan`,
   tests/bad_schedule's CSV schedules with `pipec check`: their records name the CSV file),
   each model in every format, from inside its directory as tests/run_bad.sh runs them: text (also
   given as --diagnostics-format=text) is exactly NAME.err; the json array and the SARIF log parse,
   and hold one record / result per message of the text, in order, with the same kind, file, line,
   column (SARIF: in characters, the byte column in its properties) and message. Each record's
   JSON path is the message's leading path where that path names a value of the model file (the
   file parsed here by Python, independently of pipec; "model" is the document), null elsewhere;
   its hint is the message's closing "(did you mean ...?)".
2. The other commands and sources of diagnostics: command-line model errors (-D), the partition
   with its note (--virtual), memplan (--mem-cap), warnings, a successful compile (an empty
   document and nothing else on stderr), a failed build (the C compiler's output on stdout), run
   (the document, then the program's output), a column after a multi-byte character and invalid
   UTF-8 in the model (valid JSON with U+FFFD).
3. With --schema (the SARIF log of each catalogue case alone: part 1 is the run without it): every
   SARIF log of the catalogues validates against the SARIF 2.1.0 JSON Schema
   (tests/sarif/sarif-schema-2.1.0.json) with Debian's python3-jsonschema; exit 77 (skipped)
   where it is not installed.

Prints one FAIL line per failure and `N passed, M failed`; exit 1 if anything failed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SYSTEM_PYTHON = "/usr/bin/python3"

if len(sys.argv) < 3:
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    sys.exit(2)
pipec, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
schema_mode = "--schema" in sys.argv[3:]
validator = None
if schema_mode:
    try:
        import jsonschema
    except ImportError:  # a pyenv or venv python3 first on PATH: Debian's has the module
        if (os.environ.get("PIPEC_DIAG_REEXEC") != "1" and os.path.exists(SYSTEM_PYTHON)
                and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)):
            os.environ["PIPEC_DIAG_REEXEC"] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
        print("skip: jsonschema not available (apt-get install python3-jsonschema)")
        sys.exit(77)
    schema = json.load(open(os.path.join(root, "tests/sarif/sarif-schema-2.1.0.json")))
    validator = jsonschema.Draft4Validator(schema)

passed = failed = 0


def ok():
    global passed
    passed += 1


def bad(msg):
    global failed
    failed += 1
    print("FAIL " + msg)


def expect(cond, msg):
    if cond:
        ok()
    else:
        bad(msg)


def run(args, cwd=root, env=None):
    r = subprocess.run([pipec] + args, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    return r.returncode, r.stdout, r.stderr


HEAD = re.compile(r"^(?P<file>.+?)(?::(?P<line>\d+):(?P<col>\d+))?: (?P<kind>error|warning): (?P<msg>.*)$")


def text_records(err, files):
    """The messages of the text format about one of files: (kind, file, line, col, message),
    excerpt lines skipped (a note's file: None)."""
    recs = []
    for line in err.decode("utf-8", "replace").split("\n"):
        if line.startswith("pipec: note: "):
            recs.append(("note", None, None, None, line[len("pipec: note: "):]))
            continue
        m = HEAD.match(line)
        if m and m["file"] in files:
            recs.append((m["kind"], m["file"], int(m["line"]) if m["line"] else None,
                         int(m["col"]) if m["col"] else None, m["msg"]))
        elif not m and line and recs and recs[-1][2] is None and recs[-1][0] != "note":
            # a message of several lines (the verifier's grid): no excerpt follows one without
            # a position, so the lines after it are its own
            recs[-1] = recs[-1][:4] + (recs[-1][4] + "\n" + line,)
    return recs


def resolve(doc, path):
    """Whether path ("nodes[2].attrs.n", "model") names a value of the parsed document."""
    if path == "model":
        return True
    cur = doc
    for key, idx in re.findall(r"(?:^|\.)([A-Za-z0-9_-]+)|\[(\d+)\]", path):
        if key:
            if not isinstance(cur, dict) or key not in cur:
                return False
            cur = cur[key]
        else:
            if not isinstance(cur, list) or int(idx) >= len(cur):
                return False
            cur = cur[int(idx)]
    # The whole path was consumed by the pattern.
    return re.fullmatch(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+|\[\d+\])*", path) is not None


def expected_path(doc, msg):
    """The message's leading JSON path if it names a value of the model, else None."""
    m = re.match(r'(.*?)(?:: | "| \()', msg)
    if not m or doc is None:
        return None
    return m[1] if resolve(doc, m[1]) else None


def expected_hint(msg):
    m = re.match(r".* \((did you mean '.*'\?)\)$", msg)  # the last one, closing the message
    return m[1] if m else None


def char_column(model_bytes, line, col):
    if line is None:
        return None
    text = model_bytes.split(b"\n")[line - 1]
    return len(text[:col - 1].decode("utf-8", "replace")) + 1


def load_model(path):
    try:
        return json.loads(open(path, "rb").read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON (or nested too deeply)
        return None


def compare(name, recs, js, sarif, sources, doc, file):
    """recs (the text's) against the json records and the SARIF results."""
    if not isinstance(js, list) or len(js) != len(recs):
        bad(f"{name}: json has {len(js) if isinstance(js, list) else js!r} records, text {len(recs)}")
        return
    results = sarif["runs"][0]["results"]
    if len(results) != len(recs):
        bad(f"{name}: sarif has {len(results)} results, text {len(recs)}")
        return
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    for i, ((kind, rfile, line, col, msg), j, s) in enumerate(zip(recs, js, results)):
        rfile = rfile or file # a note: the model's
        model_bytes = sources[rfile]
        want = {"kind": kind, "file": rfile, "line": line, "column": col, "message": msg,
                "path": expected_path(doc, msg) if kind != "note" and rfile == file else None,
                "hint": expected_hint(msg)}
        got = {k: j.get(k, "<missing>") for k in want}
        if got != want:
            bad(f"{name}[{i}]: json {got} != {want}")
            continue
        if not isinstance(j.get("pass"), str):
            bad(f"{name}[{i}]: json pass {j.get('pass')!r}")
            continue
        sg = {"level": s.get("level"), "text": s["message"]["text"], "rule": s.get("ruleId")}
        sw = {"level": kind, "text": msg, "rule": j["pass"]}
        if kind != "note":
            loc = s["locations"][0]
            phys = loc["physicalLocation"]
            reg = phys.get("region", {})
            props = s.get("properties", {})
            sg.update(uri=phys["artifactLocation"]["uri"], line=reg.get("startLine"),
                      col=reg.get("startColumn"), bytecol=props.get("byteColumn"),
                      path=props.get("jsonPath"),
                      logical=[l["fullyQualifiedName"] for l in loc.get("logicalLocations", [])],
                      hint=props.get("hint"))
            sw.update(uri=rfile, line=line, col=char_column(model_bytes, line, col), bytecol=col,
                      path=want["path"], logical=[want["path"]] if want["path"] else [],
                      hint=want["hint"])
        if sg != sw:
            bad(f"{name}[{i}]: sarif {sg} != {sw}")
        elif rules[s["ruleIndex"]]["id"] != s["ruleId"]:
            bad(f"{name}[{i}]: sarif ruleIndex {s['ruleIndex']} is not rule {s['ruleId']}")
        else:
            ok()


def validate(name, sarif):
    errs = sorted(validator.iter_errors(sarif), key=lambda e: list(e.path))
    if errs:
        bad(f"{name}: SARIF log invalid: {errs[0].message} at {list(errs[0].path)}")
    else:
        ok()


def parse(name, fmt, err):
    try:
        return json.loads(err.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        bad(f"{name}: {fmt} stderr is not one JSON document ({e}): {err[:200]!r}")
        return None


# ---- 1. The catalogues
def catalogue_case(name, d, args, want_err, model, sources):
    """One case of a catalogue run from its directory d: args (the command first) in the three
    formats; the text exactly want_err, the records as the text's; sources: the bytes of each
    file the records may be about (the model's first)."""
    # (--schema: the SARIF log alone; the run without --schema compares the three formats)
    if not schema_mode:
        rc_t, out_t, err_t = run(args[:1] + ["--diagnostics-format=text"] + args[1:], cwd=d)
        if (rc_t, out_t, err_t) != (1, b"", want_err):
            bad(f"{name}: --diagnostics-format=text: exit {rc_t}, stderr differs from the .err: {err_t[:300]!r}")
            return
    docs = {}
    for fmt in ("sarif",) if schema_mode else ("json", "sarif"):
        rc, out, err = run(args[:1] + ["--diagnostics-format", fmt] + args[1:], cwd=d)
        if rc != 1 or out:
            bad(f"{name}: {fmt}: exit {rc}, stdout {out[:100]!r}")
            return
        docs[fmt] = parse(name, fmt, err)
    if None in docs.values():
        return
    if schema_mode:
        validate(name, docs["sarif"])
        return
    compare(name, text_records(err_t, list(sources)), docs["json"], docs["sarif"], sources,
            load_model(os.path.join(d, model)), model)


def read(path):
    return open(path, "rb").read()


for sub, cmd in (("tests/bad", "check"), ("tests/bad_training", "plan")):
    d = os.path.join(root, sub)
    for model in sorted(f for f in os.listdir(d) if f.endswith(".json")):
        catalogue_case(f"{sub}/{model}", d, [cmd, model], read(os.path.join(d, model[:-5] + ".err")),
                       model, {model: read(os.path.join(d, model))})

# The bad-schedule catalogue (tests/run_bad_schedule.sh's runs): records about the CSV name it,
# the verifier's (a deadlock) the model, and the note after them no file.
d = os.path.join(root, "tests/bad_schedule")
mlp = "../../samples/mlp_digits.json"
for csv in sorted(f for f in os.listdir(d) if f.endswith(".csv")):
    extra = os.path.join(d, csv[:-4] + ".args")
    extra = open(extra).read().split() if os.path.exists(extra) else []
    catalogue_case(f"tests/bad_schedule/{csv}", d,
                   ["check", mlp, "--microbatches", "4", "--schedule", csv] + extra,
                   read(os.path.join(d, csv[:-4] + ".err")), mlp,
                   {mlp: read(os.path.join(d, mlp)), csv: read(os.path.join(d, csv))})

if schema_mode:
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)

# ---- 2. Other commands and sources
tmp = tempfile.mkdtemp()
try:
    def formats(name, args, want_rc, cwd=root, env=None, file=None, model=None):
        """Runs args in every format: the text's messages against the json's and the sarif's.
        Returns the json records (or None)."""
        rc_t, _, err_t = run(args, cwd=cwd, env=env)
        docs = {}
        for fmt in ("json", "sarif"):
            rc, out, err = run(args + ["--diagnostics-format=" + fmt], cwd=cwd, env=env)
            if rc != want_rc or rc_t != want_rc:
                bad(f"{name}: {fmt}: exit {rc} (text {rc_t}), want {want_rc}")
                return None
            docs[fmt] = parse(name, fmt, err)
            if docs[fmt] is None:
                return None
        file = file or args[-1]
        path = model or os.path.join(cwd, file)
        compare(name, text_records(err_t, [file]), docs["json"], docs["sarif"],
                {file: open(path, "rb").read()}, load_model(path), file)
        return docs["json"]

    mlp, skip = "samples/mlp_digits.json", "samples/skip_net.json"
    js = formats("define", ["check", "-D", "Q=3", mlp], 1)
    if js is not None:
        want = {"kind": "error", "line": None, "column": None, "path": None, "pass": "expand"}
        got = {k: js[0].get(k) for k in want}
        expect(got == want, f"define: {got} != {want}")
    js = formats("partition-note", ["plan", "--stages", "8", "--virtual", "2", "--schedule", "interleaved", mlp], 1)
    if js is not None:
        kinds = [(r["kind"], r["pass"]) for r in js]
        want = [("error", "partition"), ("note", "partition")]
        expect(kinds == want, f"partition-note: {kinds} != {want}")
    js = formats("mem-cap", ["plan", "--stages", "2", "--mem-cap", "1000", skip], 1)
    if js is not None:
        expect(js and js[-1]["pass"] in ("partition", "memplan"), f"mem-cap: {js}")
    # A warning (an unused parameter): exit 0, the record in every format.
    m = json.load(open(os.path.join(root, mlp)))
    m["params"].append({"name": "unused", "shape": [4]})
    open(os.path.join(tmp, "warn.json"), "w").write(json.dumps(m, indent=1))
    js = formats("warning", ["check", "warn.json"], 0, cwd=tmp)
    if js is not None:
        kinds = [r["kind"] for r in js]
        expect(kinds == ["warning"], f"warning: kinds {kinds}")

    # compile: nothing but the document on stderr, the same program as in the text format.
    for fmt, want in (("json", b"[]\n"), ("sarif", None)):
        rc, out, err = run(["compile", mlp, "-o", os.path.join(tmp, "c-" + fmt), "--diagnostics-format=" + fmt])
        doc = parse("compile " + fmt, fmt, err) if rc == 0 else None
        if rc != 0 or out or (want and err != want) or (doc is not None and fmt == "sarif" and doc["runs"][0]["results"] != []):
            bad(f"compile {fmt}: exit {rc}, stdout {out[:100]!r}, stderr {err[:300]!r}")
        else:
            ok()
    rc, _, err = run(["compile", mlp, "-o", os.path.join(tmp, "c-text")])
    same = rc == 0 and os.path.exists(os.path.join(tmp, "c-json/rank0.c")) and open(os.path.join(tmp, "c-text/rank0.c"), "rb").read() == \
        open(os.path.join(tmp, "c-json/rank0.c"), "rb").read().replace(b" --diagnostics-format=json", b"").replace(b"c-json", b"c-text")
    expect(same, "compile: the json format's program differs from the text format's")
    # A failed build: the compiler's messages on stdout, the error in the document.
    env = dict(os.environ, CC=os.path.join(tmp, "failcc"))
    open(env["CC"], "w").write("#!/bin/sh\necho cc-output >&2\nexit 3\n")
    os.chmod(env["CC"], 0o755)
    rc, out, err = run(["compile", mlp, "-o", os.path.join(tmp, "fail"), "--diagnostics-format=json"], env=env)
    js = parse("failed build", "json", err) if rc == 1 else None
    if rc != 1 or out != b"cc-output\n" or not js or "building the generated program failed" not in js[-1]["message"]:
        bad(f"failed build: exit {rc}, stdout {out!r}, stderr {err[:300]!r}")
    else:
        ok()
    # run: the document, then the program's own output.
    rc, out, err = run(["run", mlp, "-o", os.path.join(tmp, "run"), "--diagnostics-format=json", "--", "--help"])
    expect(rc == 0 and err == b"[]\n" and b"--steps" in out,
           f"run: exit {rc}, stderr {err[:200]!r}, stdout {out[:100]!r}")

    # A column after a multi-byte character, and invalid UTF-8 in a message and its line.
    src = open(os.path.join(root, "tests/bad/unknown_op.json"), "rb").read()
    open(os.path.join(tmp, "utf8.json"), "wb").write(src.replace(b'{"name": "a", "op": "rellu"', b'{"name": "\xc3\xa9", "op": "rellu"'))
    js = formats("utf8-column", ["check", "utf8.json"], 1, cwd=tmp)
    # Invalid UTF-8 (refused by the parser) in the model's line and in its file name.
    bad_name = os.fsdecode(b"bad\xff.json")
    open(os.path.join(tmp, bad_name), "wb").write(src.replace(b'"rellu"', b'"rel\xfflu"'))
    rc, out, err = run(["check", bad_name, "--diagnostics-format=json"], cwd=tmp)
    doc = parse("invalid utf-8 json", "json", err)
    if doc is not None:
        expect(rc == 1 and len(doc) == 1 and doc[0]["file"] == "bad\ufffd.json"
               and doc[0]["message"].startswith("invalid UTF-8 (byte 0xff)"), f"invalid utf-8 json: exit {rc}, {doc}")
    rc, out, err = run(["check", bad_name, "--diagnostics-format=sarif"], cwd=tmp)
    doc = parse("invalid utf-8 sarif", "sarif", err)
    if doc is not None:
        phys = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
        expect(rc == 1 and phys["artifactLocation"]["uri"] == "bad%FF.json"
               and phys["region"]["snippet"]["text"] == '    {"name": "a", "op": "rel\ufffdlu", "inputs": ["h"]},',
               f"invalid utf-8 sarif: exit {rc}, {phys}")
    # A file name that is not a plain URI: percent-encoded in SARIF, as given in json.
    shutil.copy(os.path.join(root, "tests/bad/unknown_op.json"), os.path.join(tmp, "a b#%.json"))
    rc, _, err = run(["check", "a b#%.json", "--diagnostics-format=sarif"], cwd=tmp)
    doc = parse("uri", "sarif", err)
    if doc is not None:
        uri = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        expect(uri == "a%20b%23%25.json", f"uri: {uri!r}")
    rc, _, err = run(["check", os.path.join(tmp, "a b#%.json"), "--diagnostics-format=sarif"])
    doc = parse("uri-abs", "sarif", err)
    if doc is not None:
        art = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
        want = "file://" + tmp.replace(" ", "%20") + "/a%20b%23%25.json"
        expect(art == {"uri": want}, f"uri-abs: {art!r} != {want!r}")
finally:
    shutil.rmtree(tmp)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
