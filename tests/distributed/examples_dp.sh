#!/usr/bin/env bash
# The reverse example under mpirun: data-parallel training with rank 0 alone writing, bit-exact
# --resume with the same number of ranks, --resume with another number of ranks, ZeRO-1 giving
# the same checkpoint bits, bad input, and faults: a rank SIGKILLed mid-training ends the job
# within a bounded time and its last checkpoint resumes; a stopped (hung) rank makes the others
# end with xgrad's timeout error. Usage: examples_dp.sh BUILD_DIR
set -euo pipefail
build=$1
ex=$build/examples/reverse
check=$build/tests/check_outputs
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(dirname "$0")/lsan.supp:print_suppressions=0"
# With clang's ASan the leaked blocks' stacks end in Open MPI components that MPI_Finalize has
# already unloaded ("<unknown module>"), which no suppression can name: leak checking is off for
# the programs mpirun starts (ASan and UBSan stay on; distributed_solo, the same tests without
# mpirun, keeps leak checking).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export XGRAD_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # NP ARGS...: mpirun -np NP reverse ARGS, output in $work/log
  local np=$1
  shift
  mpirun -np "$np" "$ex" "$@" > "$work/log" 2>&1 || { cat "$work/log"; echo "FAILED: mpirun -np $np reverse $*"; return 1; }
}
common=(--steps 20 --eval-every 10 --batch 15)  # 15: not a multiple of 2 (an uneven split)

# 1. Two ranks; rank 0 alone prints one summary line and writes the files.
run 2 "${common[@]}" --out "$work/full"
[ "$(grep -c '^reverse: 20 steps' "$work/log")" = 1 ] || { cat "$work/log"; echo "expected one summary line"; exit 1; }
grep -q '| ranks 2$' "$work/log"
"$check" run "$work/full"
[ "$(ls "$work/full" | sort | tr '\n' ' ')" = "attention.png checkpoint.safetensors loss.png metrics.json " ] ||
  { ls -la "$work/full"; echo "unexpected files"; exit 1; }
grep -q '"ranks": 2' "$work/full/metrics.json"

# 2. Interrupted at step 7 and resumed with two ranks: the uninterrupted run, bit for bit.
run 2 "${common[@]}" --out "$work/resumed" --no-plots --stop-after 7
run 2 --out "$work/resumed" --resume
grep -q 'checkpoint at step 20)$' "$work/log"
"$check" same-run "$work/full" "$work/resumed"

# 3. ZeRO-1: the same checkpoint bits (and it resumes without ZeRO).
run 2 "${common[@]}" --out "$work/zero" --no-plots --zero --stop-after 10
run 2 --out "$work/zero" --resume --no-plots
"$check" same "$work/full/checkpoint.safetensors" "$work/zero/checkpoint.safetensors"

# 4. Another number of ranks on resume: 4 ranks, then one process without mpirun (same global
#    batch: the same run up to rounding; it completes).
run 4 "${common[@]}" --out "$work/other" --no-plots --stop-after 10
grep -q 'checkpoint at step 10); stopped by --stop-after' "$work/log"
"$ex" --out "$work/other" --resume --no-plots > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
grep -q 'reverse: 20 steps' "$work/log"
grep -q 'resumed from .* at step 10' "$work/log"

# 5. Bad input: a global batch smaller than the ranks is refused on every rank, no hang.
if mpirun -np 4 "$ex" --steps 5 --batch 3 --out "$work/bad" > "$work/log" 2>&1; then
  echo "--batch 3 with 4 ranks was accepted"; exit 1
fi
grep -q -- '--batch 3 is smaller than the 4 ranks: every rank needs at least one sequence' "$work/log" ||
  { cat "$work/log"; exit 1; }

# 6. A rank killed (SIGKILL) mid-training: mpirun ends the job non-zero within 20 s, naming the
#    rank; the last checkpoint loads and the run resumes from it.
mpirun -np 2 "$ex" --steps 100000 --eval-every 5 --batch 15 --no-plots --out "$work/killed" > "$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do [ -f "$work/killed/checkpoint.safetensors" ] && break; sleep 0.1; done
[ -f "$work/killed/checkpoint.safetensors" ] || { cat "$work/killed.log"; echo "no checkpoint written"; exit 1; }
sleep 0.5
victim=$(pgrep -P "$job" -f "examples/reverse" | tail -1)
[ -n "$victim" ] || { echo "no rank process found"; exit 1; }
start=$(date +%s.%N)
kill -9 "$victim"
status=0
for _ in $(seq 1 200); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then kill -9 "$job"; echo "the job still runs 20 s after a rank was killed"; exit 1; fi
wait "$job" || status=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
[ "$status" != 0 ] || { echo "the job exited 0 after a rank was killed"; exit 1; }
grep -q 'exited on signal 9 (Killed)' "$work/killed.log" || { cat "$work/killed.log"; exit 1; }
echo "killed rank: job ended with status $status after $elapsed s"
"$check" same "$work/killed/checkpoint.safetensors" "$work/killed/checkpoint.safetensors" > /dev/null  # it loads
run 2 --out "$work/killed" --resume --no-plots --stop-after 5
step=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$work/log")
[ -n "$step" ] && [ $((step % 5)) = 0 ] || { cat "$work/log"; echo "no resume from an evaluation step"; exit 1; }
grep -q "checkpoint at step $((step + 5))); stopped by --stop-after" "$work/log" || { cat "$work/log"; exit 1; }

# 7. A rank that stops answering (SIGSTOP: mpirun sees nothing): the other one gives up after
#    XGRAD_DIST_TIMEOUT seconds with xgrad's error, and the job ends.
XGRAD_DIST_TIMEOUT=3 mpirun -np 2 "$ex" --steps 100000 --eval-every 5 --batch 15 --no-plots --out "$work/hung" \
  > "$work/hung.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do [ -f "$work/hung/checkpoint.safetensors" ] && break; sleep 0.1; done
victim=$(pgrep -P "$job" -f "examples/reverse" | tail -1)
kill -STOP "$victim"
start=$(date +%s.%N)
for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then kill -9 "$victim" "$job"; cat "$work/hung.log"; echo "the job still runs 30 s after a rank hung"; exit 1; fi
status=0
wait "$job" || status=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
[ "$status" != 0 ] || { echo "the job exited 0 after a rank hung"; exit 1; }
grep -q 'no reply from the other ranks within 3 s (XGRAD_DIST_TIMEOUT)' "$work/hung.log" || { cat "$work/hung.log"; exit 1; }
echo "hung rank: job ended with status $status after $elapsed s: $(grep -m1 'no reply' "$work/hung.log")"
echo "examples_dp: all runs ok"
