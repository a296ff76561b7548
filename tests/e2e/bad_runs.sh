#!/usr/bin/env bash
# Bad input to a generated program (flags, data, checkpoints) gets one clear error line with its
# location and a non-zero exit, never a crash or a silently wrong run; peak RSS stays within the
# stated bound of the memory plan.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
"$pipec" compile samples/gpt_char.json -o "$tmp/gpt" 2>/dev/null || { bad "compile gpt"; finish; exit 1; }
"$pipec" compile samples/mlp_digits.json -o "$tmp/mlp" 2>/dev/null || { bad "compile mlp"; finish; exit 1; }
gpt="$tmp/gpt/bin/train"
mlp="$tmp/mlp/bin/train"


expect steps-not-a-number 2 "^train: --steps: expected a non-negative integer, got 'abc'$" "$gpt" --steps abc
expect unknown-flag 2 "^train: --frob: unknown option" "$gpt" --frob
expect lr-negative 2 "^train: --lr: " "$gpt" --lr -1
expect gemm-unknown 1 "rank 0: error: PIPEC_GEMM=mkl: no such GEMM$" env PIPEC_GEMM=mkl "$gpt" --steps 1
expect missing-data 1 "rank 0: error: cannot open '$tmp/none.txt'" "$gpt" --steps 1 --data "$tmp/none.txt"
head -c 3000 /bin/sh >"$tmp/binary.txt"
expect vocab-too-large 1 "rank 0: error: $tmp/binary.txt: byte offset [0-9]+: (character '.'|byte 0x[0-9a-f]{2}) has id [0-9]+ \(the file has [0-9]+ distinct characters\) but the model's vocabulary holds 65$" \
  "$gpt" --steps 1 --data "$tmp/binary.txt"
printf '%s,0\n%s,1\n' "$(seq -s, 1 64)" "4,x,$(seq -s, 3 64)" >"$tmp/bad.csv" # 64 features, a label
expect csv-not-a-number 1 "rank 0: error: $tmp/bad.csv:2:3: " "$mlp" --steps 1 --data "$tmp/bad.csv"
expect init-missing 1 "rank 0: error: .*$tmp/none.safetensors" "$gpt" --steps 1 --init "$tmp/none.safetensors"
printf 'not a safetensors file at all' >"$tmp/junk.safetensors"
expect init-junk 1 "rank 0: error: .*$tmp/junk.safetensors" "$gpt" --steps 1 --init "$tmp/junk.safetensors"
"$mlp" --steps 1 --quiet --save "$tmp/mlp.safetensors" >/dev/null 2>&1 || bad "mlp save"
expect init-other-model 1 "rank 0: error: .*$tmp/mlp.safetensors" "$gpt" --steps 1 --init "$tmp/mlp.safetensors"
head -c 200 "$tmp/mlp.safetensors" >"$tmp/trunc.safetensors"
expect init-truncated 1 "rank 0: error: .*$tmp/trunc.safetensors" "$mlp" --steps 1 --init "$tmp/trunc.safetensors"
cp "$tmp/mlp.safetensors" "$tmp/noopt.safetensors"
expect resume-without-optimizer-state 1 "rank 0: error: .*noopt.safetensors.optim" "$mlp" --steps 2 --resume "$tmp/noopt.safetensors"
expect save-missing-dir 1 "rank 0: error: .*$tmp/no/such/dir" "$mlp" --steps 1 --quiet --save "$tmp/no/such/dir/x.safetensors"
check "failed save leaves no file" test ! -e "$tmp/no/such/dir/x.safetensors"

# ---- Issue 6, data and flags: bad data, bad paths and bad flags fail at start, before training
# (never after minutes of it, never with a hang or a silently wrong run).
data=$(cd "$root/../shared/data" && pwd -P)
# expect_early NAME RC STDERR-REGEX CMD...: expect, and no progress line was printed (the program
# stopped before its first training step).
expect_early() {
  expect "$@"
  check "$1: stopped before training" bash -c "! grep -q '^step ' '$tmp/out'"
}
/usr/bin/python3 - "$tmp" "$data" <<'PY' || bad "setup"
import gzip, json, struct, sys
tmp, data = sys.argv[1], sys.argv[2]
# A tiny gpt_char (T=8, C=16, one layer) whose head has K rows, untied from the embedding.
m = json.load(open("samples/gpt_char.json"))
m["dims"] = {"V": 65, "T": 8, "C": 16, "L": 1, "K": 65}
for p in m["params"]:
    if p["name"] == "lm_head.weight":
        del p["tied_to"]
        p["shape"] = ["K", "C"]
        p["init"] = {"kind": "normal", "std": 0.02}
m["training"].update(batch=4, steps=5, eval_every=0, eval_batches=2, log_every=1)
m["training"]["data"]["path"] = data + "/tinyshakespeare.txt"
json.dump(m, open(tmp + "/tiny.json", "w"))
m["dims"]["K"] = 60  # cross_entropy has 60 classes, the embedding 65 rows
json.dump(m, open(tmp + "/tiny60.json", "w"))
m["training"]["data"].update(kind="tokens_u16", path=tmp + "/tok.u16")
json.dump(m, open(tmp + "/tiny60u16.json", "w"))
ids = [i % 60 for i in range(5000)]
ids[3000] = 62
open(tmp + "/tok.u16", "wb").write(struct.pack("<%dH" % len(ids), *ids))
text = open(data + "/tinyshakespeare.txt").read()
open(tmp + "/short80.txt", "w").write(text[:80])  # validation split: 8 tokens < T+1
open(tmp + "/short9.txt", "w").write(text[:9])    # training split: 8 tokens
open(tmp + "/win90.txt", "w").write(text[:90])    # validation split: exactly one window (9)

def npy(name, descr, shape, fmt, values):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d += " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n"
    body = struct.pack("<%d%s" % (len(values), fmt), *values)
    open(tmp + "/" + name, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + body)

rows = [list(map(float, l.split(","))) for l in gzip.open(data + "/digits.csv.gz", "rt") if l.strip()]
n = len(rows)
x = [v for r in rows for v in r[:-1]]
y = [int(r[-1]) for r in rows]
npy("x.npy", "<f4", "(%d, 64)" % n, "f", x)
npy("y.npy", "<i8", "(%d,)" % n, "q", y)
npy("y_rot.npy", "<i8", "(%d,)" % n, "q", [(v + 1) % 10 for v in y])
npy("y_short.npy", "<i8", "(%d,)" % (n - 1), "q", y[:-1])
npy("y_float.npy", "<f8", "(%d,)" % n, "d", [float(v) for v in y])
xb = list(x)
xb[7 * 64 + 3] = 1e300  # finite as a double, not as a float32
npy("x_big.npy", "<f8", "(%d, 64)" % n, "d", xb)
m = json.load(open("samples/mlp_digits.json"))
m["training"].update(steps=3)
m["training"]["data"] = {"kind": "npy", "path": "x.npy", "labels": "sub/../y.npy",
                         "train_fraction": 0.8, "scale": 0.0625}
json.dump(m, open(tmp + "/npy.json", "w"))
lines = gzip.open(data + "/digits.csv.gz", "rt").read().splitlines()
f = lines[4].split(",")
f[3] = "1e300"
open(tmp + "/big.csv", "w").write("\n".join(lines[:4] + [",".join(f)] + lines[5:]) + "\n")
f[3] = "1e37"
open(tmp + "/big37.csv", "w").write("\n".join(lines[:4] + [",".join(f)] + lines[5:]) + "\n")
f[3] = "nan"
open(tmp + "/nan.csv", "w").write("\n".join(lines[:4] + [",".join(f)] + lines[5:]) + "\n")
open(tmp + "/nan1.csv", "w").write("nan," + "\n".join(lines)[2:] + "\n")
# Issue 27: data the model cannot take, each error at its line or row.
npy("x63.npy", "<f4", "(%d, 63)" % n, "f", [v for r in rows for v in r[:-2]])
npy("y10.npy", "<i8", "(%d,)" % n, "q", y[:5] + [10] + y[6:])
npy("yneg.npy", "<i8", "(%d,)" % n, "q", y[:5] + [-1] + y[6:])
raw = open(tmp + "/x.npy", "rb").read()
open(tmp + "/x_short.npy", "wb").write(raw[:-100])  # row 1796 (256 bytes) cut short
lab = lines[:6] + [lines[6].rsplit(",", 1)[0] + ",10"] + lines[7:]
open(tmp + "/label10.csv", "w").write("\n".join(lab) + "\n")
open(tmp + "/hdr3.csv", "w").write("a,b,c,label\n\n1,2,3,0\n4,5,6,1\n")
wide = "".join(chr(c) for c in range(33, 103))  # 70 distinct characters; 'b' is the 66th
open(tmp + "/wide.txt", "w").write("ab" + wide * 3)
PY
mkdir -p "$tmp/sub"
for mdl in tiny tiny60 tiny60u16 npy; do
  "$pipec" compile "$tmp/$mdl.json" -o "$tmp/$mdl" >/dev/null 2>"$tmp/err" || bad "compile $mdl: $(tail -2 "$tmp/err")"
done
"$pipec" compile samples/mlp_digits.json --set data.scale=100 -o "$tmp/mlp100" >/dev/null 2>&1 || bad "compile mlp100"
tiny="$tmp/tiny/bin/train"
npyt="$tmp/npy/bin/train"

# 1. Features that are finite doubles but not float32 (also after the scale), and NaN/inf.
expect_early csv-float32-overflow 1 "rank 0: error: $tmp/big.csv:5:7: feature 1e\+300 times the data scale 0.0625 is outside the float32 range$" \
  "$mlp" --steps 3 --data "$tmp/big.csv" --save "$tmp/big.safetensors"
check "csv-float32-overflow: nothing saved" test ! -e "$tmp/big.safetensors"
expect_early csv-float32-overflow-scaled 1 "rank 0: error: $tmp/big37.csv:5:7: feature 1e\+37 times the data scale 100 is outside the float32 range$" \
  "$tmp/mlp100/bin/train" --steps 3 --data "$tmp/big37.csv"
expect_early csv-nan 1 "rank 0: error: $tmp/nan.csv:5:7: field 4 is not a finite number: 'nan'$" "$mlp" --steps 3 --data "$tmp/nan.csv"
expect_early csv-nan-first-line 1 "rank 0: error: $tmp/nan1.csv:1:1: field 1 is not a finite number: 'nan'$" \
  "$mlp" --steps 3 --data "$tmp/nan1.csv"
expect_early npy-float32-overflow 1 "rank 0: error: $tmp/x_big.npy: element 451 \(row 7, column 3\): feature 1e\+300 times the data scale 0.0625 is outside the float32 range$" \
  "$npyt" --steps 3 --data "$tmp/x_big.npy" --labels "$tmp/y.npy"

# 2. --labels: the labels of .npy features, required with --data; rows and dtype checked.
"$npyt" --help >"$tmp/help" 2>&1
check "npy --help shows --labels with its canonical default" grep -qF -- "--labels PATH      .npy labels of the --data features (required with --data) [$(cd "$tmp" && pwd -P)/y.npy]" "$tmp/help"
expect npy-data-without-labels 2 "^train: --data: give --labels FILE too \(the model's labels '.*/y.npy' belong to its own features\)$" \
  "$npyt" --steps 1 --data "$tmp/x.npy"
expect labels-on-csv-model 2 "^train: --labels: this model's data has no separate labels file \(only .npy tables do\)$" \
  "$mlp" --steps 1 --labels "$tmp/y.npy"
expect_early labels-rows 1 "rank 0: error: $tmp/x.npy has 1797 rows but $tmp/y_short.npy has 1796$" \
  "$npyt" --steps 1 --data "$tmp/x.npy" --labels "$tmp/y_short.npy"
expect_early labels-float 1 "rank 0: error: $tmp/y_float.npy: labels have a floating-point dtype$" \
  "$npyt" --steps 1 --data "$tmp/x.npy" --labels "$tmp/y_float.npy"
"$npyt" --quiet --loss-log "$tmp/npy_a" >/dev/null 2>&1 || bad "npy run (model labels)"
"$npyt" --quiet --data "$tmp/x.npy" --labels "$tmp/y.npy" --loss-log "$tmp/npy_b" >/dev/null 2>&1 || bad "npy run (--labels y.npy)"
"$npyt" --quiet --data "$tmp/x.npy" --labels "$tmp/y_rot.npy" --loss-log "$tmp/npy_c" >/dev/null 2>&1 || bad "npy run (--labels y_rot.npy)"
check "--labels with the model's own files trains the same" cmp -s "$tmp/npy_a" "$tmp/npy_b"
check "--labels with other labels trains on them" bash -c "! cmp -s '$tmp/npy_a' '$tmp/npy_c'"

# 3. Token ids against every bound: the input's embedding (65 rows) and the target's
# cross_entropy (60 classes), for the whole stream, at open.
expect_early target-ids-text 1 "rank 0: error: $data/tinyshakespeare.txt: byte offset 10: character 'z' has id 64 \(the file has 65 distinct characters\) but the target 'targets' feeds cross_entropy 'loss' with 60 classes$" \
  "$tmp/tiny60/bin/train" --steps 1000
expect_early target-ids-u16 1 "rank 0: error: $tmp/tok.u16: token 3000 \(byte offset 6000\) has id 62 but the target 'targets' feeds cross_entropy 'loss' with 60 classes$" \
  "$tmp/tiny60u16/bin/train" --steps 1000

# 4. Both splits hold a window of T+1 tokens, checked at open.
expect_early val-split-short 1 "rank 0: error: $tmp/short80.txt: the validation split has 8 tokens; a window of context 8 needs at least 9$" \
  "$tiny" --steps 3 --data "$tmp/short80.txt"
expect_early train-split-short 1 "rank 0: error: $tmp/short9.txt: the training split has 8 tokens; a window of context 8 needs at least 9$" \
  "$tiny" --steps 3 --data "$tmp/short9.txt"

# 5. --save and --loss-log are checked at start.
expect_early save-is-a-directory 1 "rank 0: error: --save '$tmp': the path is a directory, not a regular file$" "$mlp" --steps 3 --save "$tmp"
expect_early save-missing-dir-early 1 "rank 0: error: --save '$tmp/no/such/dir/x.safetensors': cannot use directory '$tmp/no/such/dir': No such file or directory$" \
  "$mlp" --steps 3 --save "$tmp/no/such/dir/x.safetensors"
expect_early save-shards-missing-parent 1 "rank 0: error: --save '$tmp/no/such/': cannot create it: No such file or directory$" "$mlp" --steps 3 --save "$tmp/no/such/"
long=$(printf 'n%.0s' $(seq 1 246)) # old code: trains, then cannot create NAME.tmp.PID
expect_early save-name-too-long 1 "rank 0: error: --save '$tmp/$long': the file name has 246 bytes; this directory allows 255, less 32 for the temporary file written beside it$" \
  "$mlp" --steps 3 --save "$tmp/$long"
mkdir -p "$tmp/ck.safetensors.optim"
expect_early save-optim-is-a-directory 1 "rank 0: error: --save '$tmp/ck.safetensors.optim': the path is a directory, not a regular file$" \
  "$mlp" --steps 3 --save "$tmp/ck.safetensors"
check "save-optim-is-a-directory: nothing saved" test ! -e "$tmp/ck.safetensors"
expect_early loss-log-missing-dir 1 "rank 0: error: --loss-log '$tmp/none/l': cannot use directory '$tmp/none': No such file or directory$" \
  "$mlp" --steps 3 --loss-log "$tmp/none/l"

# A loss log cut short (file size limit: write fails with EFBIG) fails the run instead of exit 0.
expect loss-log-write-error 1 "rank 0: error: --loss-log: writing '$tmp/ll' failed$" \
  bash -c 'ulimit -f 1; trap "" XFSZ; exec "$0" --steps 300 --quiet --loss-log "$1"' "$mlp" "$tmp/ll"

# 6. FIFOs, directories and devices are refused without blocking (timeout: a hang fails).
mkfifo "$tmp/fifo"
expect_early fifo-data-text 1 "rank 0: error: data file '$tmp/fifo' is a FIFO, not a regular file$" timeout 10 "$gpt" --steps 1 --data "$tmp/fifo"
expect_early fifo-data-csv 1 "rank 0: error: data file '$tmp/fifo' is a FIFO, not a regular file$" timeout 10 "$mlp" --steps 1 --data "$tmp/fifo"
expect_early fifo-labels 1 "rank 0: error: labels file '$tmp/fifo' is a FIFO, not a regular file$" \
  timeout 10 "$npyt" --steps 1 --data "$tmp/x.npy" --labels "$tmp/fifo"
expect_early fifo-init 1 "rank 0: error: checkpoint '$tmp/fifo' is a FIFO, not a regular file$" timeout 10 "$mlp" --steps 1 --init "$tmp/fifo"
expect_early fifo-resume 1 "rank 0: error: checkpoint '$tmp/fifo' is a FIFO, not a regular file$" timeout 10 "$mlp" --steps 1 --resume "$tmp/fifo"
expect_early fifo-loss-log 1 "rank 0: error: --loss-log '$tmp/fifo': the path is a FIFO, not a regular file$" timeout 10 "$mlp" --steps 1 --loss-log "$tmp/fifo"
expect_early dir-data 1 "rank 0: error: data file '$tmp' is a directory, not a regular file$" timeout 10 "$mlp" --steps 1 --data "$tmp"
expect_early device-init 1 "rank 0: error: checkpoint '/dev/zero' is a character device, not a regular file$" timeout 10 "$mlp" --steps 1 --init /dev/zero

# 7. --eval-batches: 0 = the whole validation split; more batches than a table has are the whole
# split (no overflow, no hang); other integer flags are range-checked.
"$mlp" --steps 1 --quiet --eval-batches 0 >"$tmp/e0" 2>&1 || bad "mlp --eval-batches 0"
timeout 20 "$mlp" --steps 1 --quiet --eval-batches 9223372036854775807 >"$tmp/emax" 2>&1 || bad "mlp --eval-batches max"
"$mlp" --steps 1 --quiet --eval-batches 7 >"$tmp/e7" 2>&1 || bad "mlp --eval-batches 7"
check "table: --eval-batches 0 is the whole split (360 rows)" grep -q '^eval  step 1 | val loss [0-9.]* | val accuracy [0-9.]*% ([0-9]*/360)$' "$tmp/e0"
check "table: --eval-batches INT64_MAX = the whole split" cmp -s "$tmp/e0" "$tmp/emax"
check "table: --eval-batches 7 (of 6) = the whole split" cmp -s "$tmp/e0" "$tmp/e7"
"$tiny" --steps 1 --quiet --eval-batches 0 >"$tmp/t0" 2>&1 || bad "tiny --eval-batches 0: $(cat "$tmp/t0")"
check "tokens: --eval-batches 0 gives a number ($(cat "$tmp/t0"))" grep -q '^eval  step 1 | val loss [0-9]\.[0-9]\{4\}$' "$tmp/t0"
"$tiny" --steps 1 --quiet --data "$tmp/win90.txt" --eval-batches 0 >"$tmp/w0" 2>&1 || bad "tiny one window, whole split"
"$tiny" --steps 1 --quiet --data "$tmp/win90.txt" --eval-batches 1 >"$tmp/w1" 2>&1 || bad "tiny one window, 1 batch"
check "tokens: a one-window split gives the same loss whole and sampled ($(cat "$tmp/w0"))" cmp -s "$tmp/w0" "$tmp/w1"
"$mlp" --help >"$tmp/help" 2>&1
check "--help: --eval-batches 0 = the whole validation split" grep -q -- '--eval-batches N   batches per evaluation, 0 = the whole validation split \[0\]' "$tmp/help"
expect eval-batches-negative 2 "^train: --eval-batches: expected a non-negative integer, got '-1'$" "$mlp" --eval-batches -1
expect steps-overflow 2 "^train: --steps: expected a non-negative integer, got '99999999999999999999'$" "$mlp" --steps 99999999999999999999
expect log-every-zero 2 "^train: --log-every: expected a positive integer, got '0'$" "$mlp" --log-every 0
expect eval-every-negative 2 "^train: --eval-every: expected a non-negative integer, got '-5'$" "$mlp" --eval-every -5
# --steps up to 2^63 - 1 trains (old code: "cannot allocate the step timer", a timer per step).
first=$(timeout 20 bash -c '"$0" --steps 9223372036854775807 --log-every 1 2>&1 | grep -m1 "^step "' "$mlp")
check "--steps INT64_MAX trains ($first)" test "${first%% |*}" = "step 1/9223372036854775807"
expect eval-batches-overflow 2 "^train: --eval-batches: expected a non-negative integer, got '9223372036854775808'$" "$mlp" --eval-batches 9223372036854775808
# ---- end of issue 6, data and flags

# ---- Issue 27: every data error names its file and the line (CSV) or row (.npy) or byte offset
# (token files) where the data breaks what the model takes.
expect_early csv-features 1 "rank 0: error: $tmp/hdr3.csv:3: the row has 3 features \(then its label\) but the model takes 64$" \
  "$mlp" --steps 1 --data "$tmp/hdr3.csv"
check "csv-features: the HINT names the input" grep -qx "HINT: the model's input 'x' has 64 features" "$tmp/err"
expect_early csv-label-classes 1 "rank 0: error: $tmp/label10.csv:7:147: label 10 is out of range: the model has 10 classes$" \
  "$mlp" --steps 1 --data "$tmp/label10.csv"
check "csv-label-classes: the HINT" grep -qx "HINT: use labels 0..9, or a model with more classes" "$tmp/err"
expect_early npy-features 1 "rank 0: error: $tmp/x63.npy: row 0 has 63 features \(shape \(1797, 63\)\) but the model takes 64$" \
  "$npyt" --steps 1 --data "$tmp/x63.npy" --labels "$tmp/y.npy"
expect_early npy-label-classes 1 "rank 0: error: $tmp/y10.npy: row 5: label 10 is out of range: the model has 10 classes$" \
  "$npyt" --steps 1 --data "$tmp/x.npy" --labels "$tmp/y10.npy"
expect_early npy-label-negative 1 "rank 0: error: $tmp/yneg.npy: row 5: label -1 is out of range$" \
  "$npyt" --steps 1 --data "$tmp/x.npy" --labels "$tmp/yneg.npy"
expect_early npy-short 1 "rank 0: error: $tmp/x_short.npy: the file ends in row 1796 of 1797: the data section has 459932 bytes \(from byte offset 128\); the shape and dtype need 460032$" \
  "$npyt" --steps 1 --data "$tmp/x_short.npy" --labels "$tmp/y.npy"
expect_early text-vocab 1 "rank 0: error: $tmp/wide.txt: byte offset 1: character 'b' has id 65 \(the file has 70 distinct characters\) but the model's vocabulary holds 65$" \
  "$tiny" --steps 1 --data "$tmp/wide.txt"
# ---- end of issue 27

# Peak RSS within 5% of the plan plus the stated runtime overhead: the token stream (4 bytes per
# character) and a fixed 16 MiB for code, libraries, OpenMP stacks and kernel scratch; in the
# AddressSanitizer build also its shadow memory, an eighth of what the program touches.
"$gpt" --steps 10 --eval-batches 2 >"$tmp/run" 2>&1 || bad "gpt run"
plan=$(sed -n 's/^  total .*(\([0-9]*\) bytes)$/\1/p' "$tmp/run")
rss=$(sed -n 's/^peak RSS \([0-9.]*\) MiB$/\1/p' "$tmp/run")
chars=$(wc -c <"$root/../shared/data/tinyshakespeare.txt")
shadow=0
sanitized "$gpt" && shadow=8 # the plan and data over 8
echo "gpt_char: plan $plan bytes, peak RSS $rss MiB, data $((chars * 4)) bytes"
check "gpt_char peak RSS $rss MiB <= 1.05 x plan + data + 16 MiB$([ $shadow = 0 ] || echo ' + ASan shadow (1/8)')" \
  awk -v p="$plan" -v r="$rss" -v d="$((chars * 4))" -v s="$shadow" \
  'BEGIN { m = 1.05 * p + d + 16 * 1048576; if (s) m += (p + d) / s; exit !(r * 1048576 <= m) }'
check "gpt_char peak RSS $rss MiB >= the plan (the plan is really allocated and touched)" \
  awk -v p="$plan" -v r="$rss" 'BEGIN { exit !(r * 1048576 >= p) }'
finish
