#!/usr/bin/env bash
# Every link between the docs resolves: each relative link in README.md and docs/**/*.md names a
# file that exists and, with a #fragment into a markdown file, a heading of that file (GitHub's
# anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-', -1, -2 for repeats).
# Links to http(s), mailto and the source tree's folders are not checked beyond existence.
#
# usage: tests/run_docs.sh ROOT
set -u
cd "${1:-.}" || exit 1
python3 - <<'PY'
import glob, os, re, sys

def anchors(path):
    seen, out, fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence or not re.match(r"#{1,6} ", line):
            continue
        text = re.sub(r"^#+ ", "", line.strip())
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out

files = ["README.md"] + sorted(glob.glob("docs/**/*.md", recursive=True))
cache, bad, count = {}, 0, 0
for f in files:
    fence = False
    for no, line in enumerate(open(f, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            count += 1
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not os.path.exists(dest):
                print(f"FAIL {f}:{no}: link '{target}': no file {dest}")
                bad += 1
            elif frag and dest.endswith(".md"):
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if frag not in cache[dest]:
                    print(f"FAIL {f}:{no}: link '{target}': no heading #{frag} in {dest}")
                    bad += 1
print(f"{count} links, {bad} broken")
sys.exit(1 if bad else 0)
PY
