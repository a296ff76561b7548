#!/usr/bin/env bash
# README's shown outputs are what pipec prints: every ``` block of README.md whose lines start
# with `$ build/bin/pipec ...` is run (each command with the pipec under test, in the repository
# root, stdout and stderr together) and its output must equal the lines that follow the command
# in the block, exactly. Blocks without a `$ ` command line are not checked.
#
# README's speed figures are docs/benchmarks.md's: every ratio (`1.38x`) and time (`34.4 ms`) a
# paragraph of README.md quotes outside code blocks must appear in a table row of a
# docs/benchmarks.md section that the same paragraph links to (`docs/benchmarks.md#ANCHOR`), so a
# figure left behind when a benchmark's table is replaced fails here.
#
# usage: tests/run_readme.sh PIPEC ROOT
set -u
pipec=$1
root=$2
cd "$root" || exit 1
python3 - "$pipec" README.md <<'PY'
import difflib, re, shlex, subprocess, sys

pipec, readme = sys.argv[1], sys.argv[2]
lines = open(readme, encoding="utf-8").read().split("\n")
cases, cur, in_block = [], None, False  # cases: (line number, command, expected lines)
for no, line in enumerate(lines, 1):
    if line.startswith("```"):
        in_block, cur = not in_block, None
    elif in_block and line.startswith("$ "):
        cur = (no, line[2:], [])
        cases.append(cur)
    elif in_block and cur:
        cur[2].append(line)
ok = fail = 0
for no, cmd, want in cases:
    argv = shlex.split(cmd)
    if argv[0] != "build/bin/pipec":
        print(f"FAIL README.md:{no}: '{cmd}' is not a build/bin/pipec command")
        fail += 1
        continue
    r = subprocess.run([pipec] + argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    got = r.stdout.decode("utf-8", "replace").rstrip("\n").split("\n")
    if got == want:
        ok += 1
    else:
        fail += 1
        print(f"FAIL README.md:{no}: $ {cmd}")
        sys.stdout.writelines("  " + d + "\n" for d in difflib.unified_diff(want, got, "README.md", "pipec", lineterm=""))
if not cases:
    print("FAIL README.md has no '$ build/bin/pipec' block")
    fail += 1

# The speed figures: each paragraph's figures against the tables of the sections it links to.
def slug(heading):
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")

tables, cur = {}, None  # anchor -> the table rows of that section (its subsections included)
bench_fence = False
for line in open("docs/benchmarks.md", encoding="utf-8"):
    if line.startswith("```"):
        bench_fence = not bench_fence
    if bench_fence:
        continue
    m = re.match(r"(#+) (.*)", line)
    if m:
        if len(m.group(1)) <= 2 or cur is None:
            cur = slug(m.group(2).strip())
            tables.setdefault(cur, [])
    elif cur is not None and line.startswith("|"):
        tables[cur].append(line)
figure_re = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?x|\d+(?:\.\d+)? ms)\b")
paragraphs, para, start, in_block = [], [], 0, False
for no, line in enumerate(lines, 1):
    if line.startswith("```"):
        in_block = not in_block
        continue
    if in_block or not line.strip():
        if para:
            paragraphs.append((start, " ".join(para)))
        para = []
        continue
    if not para:
        start = no
    para.append(line)
if para:
    paragraphs.append((start, " ".join(para)))
for no, text in paragraphs:
    figures = figure_re.findall(text)
    if not figures:
        continue
    anchors = re.findall(r"\(docs/benchmarks\.md#([^)\s]+)\)", text)
    if not anchors:
        print(f"FAIL README.md:{no}: quotes {', '.join(figures)} but links no docs/benchmarks.md#section")
        fail += 1
        continue
    for a in anchors:
        if a not in tables:
            print(f"FAIL README.md:{no}: docs/benchmarks.md has no section #{a}")
            fail += 1
    rows = [r for a in anchors for r in tables.get(a, [])]
    for f in figures:
        num = f.split()[0].rstrip("x")
        pat = re.compile(r"(?<![\w.])" + re.escape(num) + (r"x" if f.endswith("x") else r"\b"))
        if any(pat.search(r) for r in rows):
            ok += 1
        else:
            print(f"FAIL README.md:{no}: '{f}' is in no table of docs/benchmarks.md#{' #'.join(anchors)}")
            fail += 1
print(f"{ok} passed, {fail} failed")
sys.exit(1 if fail else 0)
PY
