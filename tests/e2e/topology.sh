#!/usr/bin/env bash
# --topology (compiler/topology.c; docs/pipeline.md, "Topology"): the bad-topology catalogue
# (tests/bad_topology/NAME.xml is rejected with exactly NAME.err on stderr, exit 1, nothing on
# stdout), a missing file, the link bandwidths derived from the samples (exact numbers by NCCL's
# rules), the placement on a box where rank r on GPU r is worse, the partition moving off a slow
# link, launch.sh's device list (and a job run under it: the one-stage bits), plan --json's
# rank links.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
topo=samples/topology
gpt=samples/gpt_char.json
case $pipec in */*) pipec=$(cd "$(dirname "$pipec")" && pwd)/$(basename "$pipec") ;; esac

# ---- The catalogue: run inside its directory, so the messages name NAME.xml.
for x in tests/bad_topology/*.xml; do
  n=$(basename "$x" .xml)
  (cd tests/bad_topology && "$pipec" plan "$root/$gpt" --stages 4 --topology "$n.xml" >"$tmp/out" 2>"$tmp/err")
  rc=$?
  if [ $rc -ne 1 ]; then
    bad "bad_topology/$n: exit $rc, want 1 ($(head -n 1 "$tmp/err"))"
  elif [ -s "$tmp/out" ]; then
    bad "bad_topology/$n: wrote to stdout"
  elif ! diff -u "tests/bad_topology/$n.err" "$tmp/err" >"$tmp/diff"; then
    bad "bad_topology/$n: stderr differs"
    sed 's/^/    /' "$tmp/diff"
  else
    ok
  fi
done
"$pipec" plan $gpt --stages 4 --topology "$tmp/none.xml" >/dev/null 2>"$tmp/err"
rc=$?
check "missing file: exit 1" test $rc -eq 1
check "missing file: message" grep -qx "$tmp/none.xml: error: cannot read the topology file: No such file or directory" "$tmp/err"
# --diagnostics-format=json: the error is a record of the document, nothing else on stderr.
"$pipec" plan $gpt --stages 4 --topology tests/bad_topology/gpu_no_sm.xml --diagnostics-format=json \
  >/dev/null 2>"$tmp/err"
check "json format: exit 1" test $? -eq 1
check "json format: one record" python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert [r['message'] for r in d] == [\"--topology tests/bad_topology/gpu_no_sm.xml:18: <gpu> has no attribute 'sm'\"], d
" "$tmp/err"
"$pipec" plan $gpt --stages 4 --topology "" >/dev/null 2>"$tmp/err"
check "empty name: usage error" test $? -eq 2

# ---- Hostile files: one 10 kB entity referenced 9,000 times (90 MB once expanded, quadratic in
# libxml2; the catalogue's entity_declared.xml is its small form) is refused at its <!DOCTYPE>,
# and a 2 MB attribute quoted in an error is cut: each a one-line error, at once.
python3 - "$tmp" <<'PY'
import sys
t = sys.argv[1]
ent = '<!DOCTYPE system [<!ENTITY e "%s">]>\n' % ("A" * 10000)
with open(t + "/quadratic.xml", "w") as f:
    f.write('<?xml version="1.0"?>\n' + ent + '<system version="1"><cpu numaid="0" arch="'
            + "&e;" * 9000 + '"/></system>\n')
with open(t + "/long_attr.xml", "w") as f:
    f.write('<?xml version="1.0"?>\n<system version="1">\n<cpu numaid="0" arch="' + "B" * 2000000
            + '"/></system>\n')
PY
timeout -k 2 10 "$pipec" plan $gpt --stages 4 --topology "$tmp/quadratic.xml" >/dev/null 2>"$tmp/err"
check "quadratic entity: exit 1 at once" test $? -eq 1
check "quadratic entity: the message" grep -qx "$tmp/quadratic.xml:2: error: a <!DOCTYPE> declaration: an NCCL topology file has none, and pipec expands no entities" "$tmp/err"
timeout -k 2 10 "$pipec" plan $gpt --stages 4 --topology "$tmp/long_attr.xml" >/dev/null 2>"$tmp/err"
check "long attribute: exit 1" test $? -eq 1
check "long attribute: one line of at most 600 bytes" test "$(wc -l <"$tmp/err")" -eq 1 -a "$(wc -c <"$tmp/err")" -le 600
check "long attribute: cut with '...'" grep -q '^.*/long_attr.xml:3: error: .*BBBB\.\.\.$' "$tmp/err"

# ---- Derived bandwidths. pcie_box: Gen4 x16 = 16 x 1.5 GB/s = 24 (GPU to switch, switch to CPU
# 0); CPU 1's switch on Gen3 x16 = 12; Intel model 0x6a: UPI 10; NIC 200 Gb/s = 25 GB/s.
"$pipec" plan $gpt --stages 4 --topology $topo/pcie_box.xml --stop-after=schedule >"$tmp/pcie" 2>&1 ||
  bad "pcie_box plan: $(head -n 3 "$tmp/pcie")"
want_lines() { # want_lines NAME FILE LINE...: every LINE is a whole line of FILE
  local name=$1 file=$2 l
  shift 2
  for l in "$@"; do
    if grep -qxF -- "$l" "$file"; then ok; else bad "$name: no line '$l'"; fi
  done
}
want_lines pcie_box "$tmp/pcie" \
  "topology $topo/pcie_box.xml: 4 GPUs, 2 CPUs, 1 NIC (GB/s by NCCL's rules)" \
  "    0  0000:18:00.0   80     0  24.00            -    24.00 PIX    10.00 SYS    10.00 SYS" \
  "    1  0000:19:00.0   80     0  24.00    24.00 PIX            -    10.00 SYS    10.00 SYS" \
  "    2  0000:98:00.0   80     1  10.00    10.00 SYS    10.00 SYS            -    24.00 PIX" \
  "    3  0000:99:00.0   80     1  10.00    10.00 SYS    10.00 SYS    24.00 PIX            -" \
  "placement: rank 0 on GPU 0, rank 1 on GPU 1, rank 2 on GPU 2, rank 3 on GPU 3" \
  "  slowest link between consecutive ranks: 10.00 GB/s (rank r on GPU r: 10.00 GB/s)" \
  "cost model: FLOPs at 50 GFLOP/s, transfers at the --topology links (per rank)"
# nvlink_box: H100 (sm 90) 18 links x 20.6 = 370.8 GB/s through the NVSwitch; Gen5 x16 = 48 to
# the 400 Gb/s (50 GB/s) NICs.
"$pipec" plan $gpt -D L=8 --stages 8 --topology $topo/nvlink_box.xml --stop-after=schedule >"$tmp/nvs" 2>&1 ||
  bad "nvlink_box plan: $(head -n 3 "$tmp/nvs")"
want_lines nvlink_box "$tmp/nvs" \
  "topology $topo/nvlink_box.xml: 8 GPUs, 2 CPUs, 2 NICs, an NVSwitch (GB/s by NCCL's rules)" \
  "    5  0000:c3:00.0   90     1  48.00   370.80 NVL   370.80 NVL   370.80 NVL   370.80 NVL   370.80 NVL            -   370.80 NVL   370.80 NVL" \
  "placement: rank 0 on GPU 0, rank 1 on GPU 1, rank 2 on GPU 2, rank 3 on GPU 3, rank 4 on GPU 4, rank 5 on GPU 5, rank 6 on GPU 6, rank 7 on GPU 7"
# nvlink_mesh (DGX-1's hybrid cube mesh, V100 sm 70: 20 GB/s a link): one or two links to four
# GPUs, NVB (through a GPU, the slower of its two hops at best) to the other three; Gen3 x16 = 12
# to the 100 Gb/s NICs. Rank r on GPU r crosses single links (0-1: 20 GB/s); the placement
# follows the two-link cycle 0-3-2-1-5-6-7-4 (40 GB/s everywhere).
"$pipec" plan $gpt -D L=8 --stages 8 --topology $topo/nvlink_mesh.xml --stop-after=schedule >"$tmp/mesh" 2>&1 ||
  bad "nvlink_mesh plan: $(head -n 3 "$tmp/mesh")"
want_lines nvlink_mesh "$tmp/mesh" \
  "    0  0000:06:00.0   70     0  12.00            -    20.00 NVL    20.00 NVL    40.00 NVL    40.00 NVL    20.00 NVB    20.00 NVB    40.00 NVB" \
  "    6  0000:89:00.0   70     1  12.00    20.00 NVB    40.00 NVB    20.00 NVL    20.00 NVB    20.00 NVL    40.00 NVL            -    40.00 NVL" \
  "placement: rank 0 on GPU 0, rank 1 on GPU 3, rank 2 on GPU 2, rank 3 on GPU 1, rank 4 on GPU 5, rank 5 on GPU 6, rank 6 on GPU 7, rank 7 on GPU 4" \
  "  slowest link between consecutive ranks: 40.00 GB/s (rank r on GPU r: 20.00 GB/s)"
# two_boxes: pcie_box twice, machines told apart by host_hash: across machines the slower of the
# two GPUs' NIC bandwidth (GPU 0: min(24 to the NIC, 25) = 24; GPU 2 reaches it over UPI: 10). The
# placement crosses the network once, between the NICs' GPUs, not three times at the same sum.
"$pipec" plan $gpt -D L=8 --stages 8 --topology $topo/two_boxes.xml --stop-after=schedule >"$tmp/two" 2>&1 ||
  bad "two_boxes plan: $(head -n 3 "$tmp/two")"
want_lines two_boxes "$tmp/two" \
  "topology $topo/two_boxes.xml: 8 GPUs, 4 CPUs, 2 NICs on 2 machines (GPU M/D: machine M's dev D) (GB/s by NCCL's rules)" \
  "  0/1  0000:19:00.0   80     0  24.00    24.00 PIX            -    10.00 SYS    10.00 SYS    24.00 NET    24.00 NET    10.00 NET    10.00 NET" \
  "placement: rank 0 on GPU 0/2, rank 1 on GPU 0/3, rank 2 on GPU 0/0, rank 3 on GPU 0/1, rank 4 on GPU 1/0, rank 5 on GPU 1/1, rank 6 on GPU 1/2, rank 7 on GPU 1/3"
"$pipec" compile $gpt -D L=8 --stages 8 --topology $topo/two_boxes.xml --no-build -o "$tmp/two.d" 2>/dev/null ||
  bad "compile two_boxes"
check "two machines: launch.sh leaves the devices to mpirun's hostfile" \
  bash -c "! grep -q CUDA_VISIBLE_DEVICES '$tmp/two.d/launch.sh'"
# Interleaved stages wrap around (the last rank sends to the first): the placement is a cycle.
"$pipec" plan $gpt -D L=16 --stages 8 --schedule interleaved --virtual 2 --microbatches 8 --batch 16 \
  --topology $topo/nvlink_mesh.xml --stop-after=schedule >"$tmp/cyc" 2>&1 || bad "interleaved plan: $(head -n 3 "$tmp/cyc")"
want_lines interleaved "$tmp/cyc" \
  "placement: rank 0 on GPU 0, rank 1 on GPU 3, rank 2 on GPU 2, rank 3 on GPU 1, rank 4 on GPU 5, rank 5 on GPU 6, rank 6 on GPU 7, rank 7 on GPU 4" \
  "  slowest link between consecutive ranks (and the last to the first): 40.00 GB/s (rank r on GPU r: 20.00 GB/s)"

# ---- The partition moves off the slow link. gpt_char with 8 blocks on pcie_box at 20 TFLOP/s
# (transfers matter): every link at 24 GB/s gives ranks 1 and 2 two blocks each; with the
# topology, rank 2 receives over the 10 GB/s UPI link and gets one block (h.5), rank 0 one more.
stage_nodes() { "$pipec" plan $gpt -D L=8 --stages 4 --flops-rate 20000 "$@" --stop-after=partition \
  --dump-after=partition 2>&1 | grep '^  nodes' | tr '\n' '|'; }
check "uniform 24 GB/s: two blocks a middle stage" test "$(stage_nodes --bandwidth 24)" = \
  "  nodes     transformer.wte, transformer.emb, transformer.h.0..1|  nodes     transformer.h.2..3|  nodes     transformer.h.4..5|  nodes     transformer.h.6..7, transformer.ln_f, logits, loss|"
check "topology: one block behind the slow link" test "$(stage_nodes --topology $topo/pcie_box.xml)" = \
  "  nodes     transformer.wte, transformer.emb, transformer.h.0..2|  nodes     transformer.h.3..4|  nodes     transformer.h.5|  nodes     transformer.h.6..7, transformer.ln_f, logits, loss|"

# ---- launch.sh names each rank's GPU; plan --json has the ranks' devices and links.
"$pipec" compile $gpt -D L=8 --stages 8 --topology $topo/nvlink_mesh.xml --no-build -o "$tmp/mesh.d" 2>/dev/null ||
  bad "compile with a topology"
want_lines launch.sh "$tmp/mesh.d/launch.sh" "#   rank 1 on GPU 3" "  CUDA_VISIBLE_DEVICES=0,3,2,1,5,6,7,4" \
  "  CUDA_DEVICE_ORDER=PCI_BUS_ID"
check "launch.sh is valid sh" sh -n "$tmp/mesh.d/launch.sh"
"$pipec" compile $gpt --stages 4 --no-build -o "$tmp/plain.d" 2>/dev/null || bad "compile without"
check "no topology: launch.sh leaves the devices alone" bash -c "! grep -q CUDA_VISIBLE_DEVICES '$tmp/plain.d/launch.sh'"
# The job runs under that launch.sh (CPU ranks: the device list is inert) and trains the bits of
# the one-stage program.
ref=$(pipe_ref $gpt 4)
if "$pipec" compile $gpt --stages 4 --microbatches 4 --topology $topo/pcie_box.xml -o "$tmp/run.d" \
  >/dev/null 2>"$tmp/run.cerr"; then
  if pipe_run "$tmp/run" "$tmp/run.d"; then same_bits "run with a topology" "$ref" "$tmp/run"; else
    bad "run with a topology: $(tail -n 3 "$tmp/run.out")"
  fi
else
  bad "compile with a topology: $(head -n 3 "$tmp/run.cerr")"
fi
"$pipec" plan $gpt --stages 4 --topology $topo/pcie_box.xml --json "$tmp/p.json" >/dev/null 2>&1 || bad "plan --json"
check "plan --json: rank devices and links" python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['rank_devices'] == [0, 1, 2, 3], d['rank_devices']
assert d['rank_bandwidth'][0] == [0, 24e9, 10e9, 10e9], d['rank_bandwidth'][0]
assert d['rank_bandwidth'][2][3] == 24e9
" "$tmp/p.json"
finish
