#!/usr/bin/env bash
# Failures of a pipeline job never hang it (docs/pipeline.md): a rank killed (SIGKILL) or crashed
# (SIGSEGV) mid-run, a rank stopped (SIGSTOP: the others' watchdog, --timeout 3, fires on the
# message they wait for and names the stopped rank, in world ranks, at S = 2, 3, 4 and with
# --replicas 2), a rank stopped before MPI_Init (the start's watchdog), a NaN loss, and bad data
# read by one rank alone each make every rank exit within 30 s of the event, the job's exit
# status non-zero, with a message naming the rank and the cause. Every launch runs under
# `timeout 60`, so a hang fails the test instead of blocking ctest.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
. "$root/tests/e2e/mpi_env.sh"
"$pipec" compile samples/mlp_digits.json --stages 2 --microbatches 8 -o "$tmp/s2" >/dev/null 2>"$tmp/err" ||
  { bad "compile S = 2: $(head -3 "$tmp/err")"; finish; exit 1; }
"$pipec" compile samples/mlp_digits.json --stages 2 --microbatches 32 -o "$tmp/s2m" >/dev/null 2>"$tmp/err" ||
  { bad "compile S = 2, M = 32: $(head -3 "$tmp/err")"; finish; exit 1; }
"$pipec" compile samples/mlp_digits.json --stages 3 --microbatches 4 -o "$tmp/s3" >/dev/null 2>"$tmp/err" ||
  { bad "compile S = 3: $(head -3 "$tmp/err")"; finish; exit 1; }
"$pipec" compile samples/mlp_digits.json --stages 4 --microbatches 4 -o "$tmp/s4" >/dev/null 2>"$tmp/err" ||
  { bad "compile S = 4: $(head -3 "$tmp/err")"; finish; exit 1; }
"$pipec" compile samples/mlp_digits.json --stages 2 --microbatches 4 --replicas 2 -o "$tmp/r2" >/dev/null 2>"$tmp/err" ||
  { bad "compile S = 2, --replicas 2: $(head -3 "$tmp/err")"; finish; exit 1; }
long=(--steps 100000000 --threads 1 --quiet --eval-every 0 --log-every 1000000)

# pids_of OUT R: the pids of OUT/bin/rankR, by executable (mpirun's command line names it too;
# other jobs run programs called rankR; a program that re-executes itself is named "exe").
pids_of() {
  local exe p
  exe=$(realpath "$1/bin/rank$2")
  for p in $(pgrep -f "$exe"); do
    [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$exe" ] && echo "$p"
  done
}
# pid_of OUT R W: the pid of OUT/bin/rankR running as world rank W (with --replicas several
# processes run one program; mpirun puts the world rank in their environment).
pid_of() {
  local p
  for p in $(pids_of "$1" "$2"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$3" && echo "$p"
  done
}
# alive OUT S: the pids of OUT's ranks still running (zombies count as gone).
alive() {
  local r p
  for r in $(seq 0 $(($2 - 1))); do
    for p in $(pids_of "$1" "$r"); do
      [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" != Z ] && echo "$p"
    done
  done
}
# start OUT S ARGS...: launch OUT/launch.sh in the background (pid in $job), output in
# $tmp/job.*; returns once its S ranks run (or fails when they do not within 30 s); $procs
# processes of them with --replicas (default S).
start() {
  local o=$1 s=$2 want=${procs:-$2}
  shift 2
  timeout -k 5 60 "$o/launch.sh" "$@" </dev/null >"$tmp/job.out" 2>"$tmp/job.err" &
  job=$!
  local n=0
  for _ in $(seq 300); do
    n=$(alive "$o" "$s" | wc -l)
    [ "$n" -eq "$want" ] && return 0
    sleep 0.1
  done
  bad "$o: the $want ranks did not start within 30 s ($n running): $(head -3 "$tmp/job.err")"
  kill "$job" 2>/dev/null
  wait "$job"
  return 1
}
# ended NAME OUT S T0: wait for the job; it ended within 30 s of T0 (date +%s.%N), non-zero and
# not by the timeout, with no rank left behind and no sanitizer report. Prints the time taken.
ended() {
  local name=$1 o=$2 S=$3 t0=$4
  wait "$job"
  local rc=$? t
  t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "$name: job ended $t s after the event, exit $rc"
  if [ $rc -eq 0 ]; then
    bad "$name: exit 0"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ] && awk -v t="$t" 'BEGIN { exit !(t >= 55) }'; then
    bad "$name: hung until timeout 60 killed it"
  else
    ok
  fi
  if grep -qE 'Sanitizer|runtime error: ' "$tmp/job.out" "$tmp/job.err"; then
    bad "$name: sanitizer report: $(grep -hE -m1 'Sanitizer|runtime error: ' "$tmp/job.out" "$tmp/job.err")"
  fi
  check "$name: every rank gone within 30 s (took $t s)" awk -v t="$t" 'BEGIN { exit !(t < 30) }'
  local left
  mapfile -t left < <(alive "$o" "$S")
  if [ ${#left[@]} -gt 0 ]; then
    bad "$name: ranks left running: ${left[*]}"
    kill -CONT "${left[@]}" 2>/dev/null
    kill -9 "${left[@]}" 2>/dev/null
  else
    ok
  fi
}
# said NAME REGEX: some line of the job's stdout or stderr matches REGEX (extended).
said() {
  if grep -qE -- "$2" "$tmp/job.out" "$tmp/job.err"; then
    echo "$1: $(grep -hE -- "$2" "$tmp/job.out" "$tmp/job.err" | head -1)"
    ok
  else
    bad "$1: no line matches '$2'; stderr: $(grep -v '^-*$' "$tmp/job.err" | head -4 | tr '\n' ' ')"
  fi
}

# ---- SIGKILL of the middle rank of three, mid-run: mpirun reports the rank and the signal.
if start "$tmp/s3" 3 "${long[@]}"; then
  sleep 1
  t0=$(date +%s.%N)
  kill -9 "$(pids_of "$tmp/s3" 1)"
  ended "SIGKILL rank 1 of 3" "$tmp/s3" 3 "$t0"
  said "SIGKILL rank 1 of 3" 'process rank 1 with PID [0-9]+ on node .* exited on signal 9 \(Killed\)'
fi

# ---- A crash (SIGSEGV) of rank 0 of two, mid-run: the same, signal 11. (In the sanitizer tree
# AddressSanitizer would catch the signal and exit 1 with its report: it is told not to.)
asan_saved=${ASAN_OPTIONS-}
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
if start "$tmp/s2" 2 "${long[@]}"; then
  sleep 1
  t0=$(date +%s.%N)
  kill -SEGV "$(pids_of "$tmp/s2" 0)"
  ended "SIGSEGV rank 0 of 2" "$tmp/s2" 2 "$t0"
  said "SIGSEGV rank 0 of 2" 'process rank 0 with PID [0-9]+ on node .* exited on signal 11 \(Segmentation fault\)'
fi
export ASAN_OPTIONS="$asan_saved"

# ---- SIGSTOP of rank 0 of two (32 microbatches of 2 rows): rank 1 waits for it, its watchdog
# (--timeout 3) fires and the job aborts. The message (runtime/comm_mpi.c) names the tensor,
# microbatch and peer rank of the message rank 1 waits for: a receive (and its action) or a send
# (rank 1 must see its gradient's send complete before it rewrites the buffer, and the stopped
# rank takes no more). Where rank 1 happens to wait in the step end's all-gather (rank 0 stopped
# in its last backward or its own all-gather, about 1/64 of its step), it names the all-gather
# instead. Either way the probe that follows finds rank 0 silent and names it. A message naming
# the peer must show in one of up to 4 stops.
recv_re="^\\[rank 1\\] comm_mpi\\.c:[0-9]+: rank 1: error: timeout: waited 3 s (for tensor '[^']+' microbatch [0-9]+ from rank 0 \\([A-Z]+\\(v[0-9]+, m[0-9]+\\)\\)|to send tensor '[^']+' microbatch [0-9]+ to rank 0); rank 0 does not respond$"
other_re="^\\[rank 1\\] comm_mpi\\.c:[0-9]+: rank 1: error: timeout: waited 3 s in an all-gather with every rank \\(the start, or a step's end\\); rank 0 does not respond$"
hint_re='^\[rank 1\] HINT: a rank is stopped, crashed or deadlocked, or merely slower than --timeout allows: raise --timeout SECONDS \(0 = off\) if it is only slow$'
seen_peer=0
# started N: the N ranks have printed their plan, i.e. are past the transport's start (the stop
# comes then: a rank stopped inside MPI_Init stops the others' start, whose own watchdog names no
# rank; tested below).
started() {
  local _ r
  for _ in $(seq 300); do
    for r in $(seq 0 $(($1 - 1))); do
      grep -q "^\[rank $r\]" "$tmp/job.out" || continue 2
    done
    return 0
  done
  return 1
}
# early T0: the job ended less than --timeout (3 s) after the stop at T0. Then a wait that began
# before the stop timed out (the machine loaded), and its probe came before the stop too: every
# rank answered, rightly. Such a run says nothing of the stop (one the stop caused has the probe
# find the stopped rank silent, and waits --timeout more for it): the caller runs it again.
early() {
  local t
  t=$(awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  awk -v t="$t" 'BEGIN { exit !(t < 3) }' || return 1
  echo "the job ended $t s after the stop, before the stop could time anything out: again"
}
for try in 1 2 3 4; do
  start "$tmp/s2m" 2 --steps 100000000 --threads 1 --eval-every 0 --log-every 1000000 --timeout 3 || break
  started 2 || bad "SIGSTOP try $try: the ranks printed no plan within 30 s: $(head -3 "$tmp/job.err")"
  sleep 1
  t0=$(date +%s.%N)
  kill -STOP "$(pids_of "$tmp/s2m" 0)"
  ended "SIGSTOP rank 0 of 2, try $try (watchdog)" "$tmp/s2m" 2 "$t0"
  early "$t0" && continue
  said "SIGSTOP rank 0 of 2, try $try (watchdog)" "$recv_re|$other_re"
  said "SIGSTOP rank 0 of 2, try $try: the hint" "$hint_re"
  if grep -qE -- "$recv_re" "$tmp/job.out" "$tmp/job.err"; then
    seen_peer=$try
    break
  fi
done
check "SIGSTOP: the watchdog named the message's tensor, microbatch and peer (in $seen_peer tries)" \
  test "$seen_peer" -gt 0

# ---- Who is missing, at S >= 3 and with --replicas 2 (world ranks): the stopped rank's
# neighbours wait for it, but so do the ranks that wait for those neighbours (whose own peer is
# alive), and a collective waits for every rank. Every rank that times out (--timeout 3) probes
# the others, and only the stopped one does not answer: every timeout message of the job must
# name it alone, whatever it waited for, and a stream's peer it names must be a world rank of the
# waiting rank's own replica. Each case is run once or twice (which message comes first varies),
# and again (up to 3 times) when it ended early.
# stop_re W: a timeout message of any rank naming world rank W as the one that does not respond.
stop_re() {
  printf '%s\n' "^\\[rank ([0-9]+)\\] comm_mpi\\.c:[0-9]+: rank \\1: error: timeout: waited 3 s (for tensor '[^']+' microbatch [0-9]+ from rank [0-9]+ \\([A-Z]+\\(v[0-9]+, m[0-9]+\\)\\)|to send tensor '[^']+' microbatch [0-9]+ to rank [0-9]+|in an all-gather with every rank \\(the start, or a step's end\\)|in the gradient exchange with the 2 replicas of pipeline rank [01] \\(bucket [0-9]+\\)); rank $1 does not respond\$"
}
# stop_one NAME OUT S PROCS R W: run OUT (S programs on PROCS processes) and stop world rank W
# (program R) mid-run.
stop_one() {
  local name=$1 o=$2 s=$3 n=$4 r=$5 w=$6 lines re p q try
  for try in 1 2 3; do
    procs=$n start "$o" "$s" --steps 100000000 --threads 1 --eval-every 0 --log-every 1000000 --timeout 3 || return
    started "$n" || bad "$name: the ranks printed no plan within 30 s: $(head -3 "$tmp/job.err")"
    sleep 1
    t0=$(date +%s.%N)
    kill -STOP "$(pid_of "$o" "$r" "$w")"
    ended "$name" "$o" "$s" "$t0"
    early "$t0" || break
  done
  lines=$(grep -hE 'error: timeout' "$tmp/job.out" "$tmp/job.err")
  re=$(stop_re "$w")
  if [ -z "$lines" ]; then
    bad "$name: no timeout message; stderr: $(grep -v '^-*$' "$tmp/job.err" | head -4 | tr '\n' ' ')"
  elif grep -vqE -- "$re" <<<"$lines"; then
    bad "$name: a timeout message does not name rank $w alone: $(grep -vE -- "$re" <<<"$lines" | head -1)"
  else
    echo "$name: $(head -1 <<<"$lines")"
    ok
  fi
  while read -r p q; do # the streams' peers: the waiting rank's replica (world rank / S)
    [ -z "$p" ] || [ $((p / s)) -eq $((q / s)) ] ||
      bad "$name: rank $p names rank $q, of another replica, as its message's peer"
  done < <(sed -nE 's/^\[rank ([0-9]+)\] .*(from|to) rank ([0-9]+)( \(|;).*/\1 \3/p' <<<"$lines")
}
for try in 1 2; do
  stop_one "SIGSTOP the middle rank 1 of 3, try $try" "$tmp/s3" 3 3 1 1
  stop_one "SIGSTOP the last rank 2 of 3, try $try" "$tmp/s3" 3 3 2 2
done
stop_one "SIGSTOP the last rank 3 of 4" "$tmp/s4" 4 4 3 3
stop_one "SIGSTOP world rank 3 of 2 x 2 (--replicas 2: pipeline rank 1 of replica 1)" "$tmp/r2" 2 4 1 3
stop_one "SIGSTOP world rank 2 of 2 x 2 (--replicas 2: pipeline rank 0 of replica 1)" "$tmp/r2" 2 4 0 2

# ---- A rank stopped before MPI_Init (its program here a script that stops itself, then runs the
# real one): the other waits in MPI_Init_thread, outside any wait for a message. The start's
# watchdog (--timeout 2) ends that rank, naming the start, and mpirun the job, the stopped rank
# included: within seconds, non-zero, no process left.
cp -r "$tmp/s2" "$tmp/s2stop"
mv "$tmp/s2stop/bin/rank1" "$tmp/s2stop/bin/rank1.real"
# shellcheck disable=SC2016 # the script's own $$, $0 and $@
printf '#!/bin/sh\nkill -STOP $$\nexec "$0.real" "$@"\n' >"$tmp/s2stop/bin/rank1"
chmod +x "$tmp/s2stop/bin/rank1"
t0=$(date +%s.%N)
timeout -k 5 60 "$tmp/s2stop/launch.sh" "${long[@]}" --timeout 2 </dev/null >"$tmp/job.out" 2>"$tmp/job.err" &
job=$!
ended "SIGSTOP rank 1 of 2 before MPI_Init" "$tmp/s2stop" 2 "$t0"
t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
check "SIGSTOP before MPI_Init: ended within 15 s (took $t s)" awk -v t="$t" 'BEGIN { exit !(t < 15) }'
said "SIGSTOP before MPI_Init" '^\[rank 0\] comm_mpi\.c:[0-9]+: rank 0: error: timeout: waited 2 s for the 2 ranks of the job to start \(in MPI_Init_thread\)$'
said "SIGSTOP before MPI_Init: the hint" '^\[rank 0\] HINT: a rank is stopped, crashed or deadlocked'
mapfile -t rest < <(pgrep -f "$tmp/s2stop/bin/")
check "SIGSTOP before MPI_Init: no process left (${rest[*]})" test ${#rest[@]} -eq 0
[ ${#rest[@]} -gt 0 ] && kill -CONT "${rest[@]}" 2>/dev/null && kill -9 "${rest[@]}" 2>/dev/null

# ---- A NaN loss: a learning rate of 1e308 makes the parameters infinite in step 1, so step 2's
# loss is NaN (as at S = 1, tests/e2e/numerics.sh); every rank stops, nothing is saved.
t0=$(date +%s.%N)
timeout -k 5 60 "$tmp/s2/launch.sh" --lr 1e308 --steps 10 --threads 1 --quiet --save "$tmp/nan.st" </dev/null \
  >"$tmp/job.out" 2>"$tmp/job.err" &
job=$!
ended "NaN loss" "$tmp/s2" 2 "$t0"
said "NaN loss" '^\[rank ([01])\] train\.c:[0-9]+: rank \1: error: step 2: the loss is NaN; stopped before the update$'
check "NaN loss: nothing saved" test ! -e "$tmp/nan.st"

# ---- Bad data read by one rank alone: rank 1 of two gets a table whose row 7 has a field that
# is not a number (mpirun's MPMD line by hand: launch.sh gives every rank the same arguments).
zcat "$root/../shared/data/digits.csv.gz" | awk -F, 'NR == 7 { $3 = "abc" } 1' OFS=, >"$tmp/bad.csv"
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
t0=$(date +%s.%N)
timeout -k 5 60 "${mpi[@]}" -np 1 "$tmp/s2/bin/rank0" "${long[@]}" : -np 1 "$tmp/s2/bin/rank1" "${long[@]}" \
  --data "$tmp/bad.csv" </dev/null >"$tmp/job.out" 2>"$tmp/job.err" &
job=$!
ended "bad data on rank 1" "$tmp/s2" 2 "$t0"
said "bad data on rank 1" "^\[rank 1\] data\.c:[0-9]+: rank 1: error: $tmp/bad\.csv:7:5: field 3 is not a number: 'abc'$"
finish
