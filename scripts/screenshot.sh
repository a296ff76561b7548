#!/usr/bin/env bash
# Renders a page (an SVG or an HTML file) as a person sees it: a headless Chromium screenshot.
#
# Usage: scripts/screenshot.sh PAGE OUT.png WIDTH HEIGHT
#   PAGE: a file (.svg, .html); OUT.png: the picture, WIDTH x HEIGHT pixels of the window.
# Needs chromium (scripts/install-deps.sh --with-chromium); exits 77 without it. Runs with
# --no-sandbox as root (Chromium refuses to start otherwise) and without a GPU.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 PAGE OUT.png WIDTH HEIGHT" >&2 && exit 2; }
page=$1 out=$2 w=$3 h=$4
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "$0: no chromium (scripts/install-deps.sh --with-chromium installs it)" >&2
  exit 77
fi
[ -f "$page" ] || { echo "$0: no such file: $page" >&2 && exit 1; }
url="file://$(cd "$(dirname "$page")" && pwd -P)/$(basename "$page")"
flags=(--headless --disable-gpu --hide-scrollbars --no-first-run "--window-size=$w,$h")
[ "$(id -u)" -eq 0 ] && flags+=(--no-sandbox)
# Chromium writes to a profile directory: a fresh one, removed after.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
abs_out="$(cd "$(dirname "$out")" && pwd -P)/$(basename "$out")"
if ! timeout 120 "$browser" "${flags[@]}" "--user-data-dir=$profile" "--screenshot=$abs_out" "$url" \
  >"$profile/log" 2>&1 || [ ! -s "$abs_out" ]; then
  echo "$0: chromium failed:" >&2
  tail -n 5 "$profile/log" >&2
  exit 1
fi
