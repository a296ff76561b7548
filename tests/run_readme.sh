#!/usr/bin/env bash
# README's shown outputs are what pipec prints: every ``` block of README.md whose lines start
# with `$ build/bin/pipec ...` is run (each command with the pipec under test, in the repository
# root, stdout and stderr together) and its output must equal the lines that follow the command
# in the block, exactly. Blocks without a `$ ` command line are not checked.
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
print(f"{ok} passed, {fail} failed")
sys.exit(1 if fail else 0)
PY
