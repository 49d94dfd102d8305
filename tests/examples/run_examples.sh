#!/usr/bin/env bash
# Short runs of every example: the loss decreases, every output is written and loadable,
# and --resume reproduces an uninterrupted run bit for bit. Usage: run_examples.sh BUILD_DIR
set -euo pipefail
build=$1
ex=$build/examples
check=$build/tests/check_outputs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for name in reverse sort; do
  "$ex/$name" --steps 60 --eval-every 20 --out "$work/$name" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
  "$check" run "$work/$name"
  # Interrupted, then resumed, must equal one uninterrupted 40-step run: the same checkpoint
  # bits, per-step losses, metrics and loss.png. Options not given take the stored values
  # (--steps 40, --batch 16); a given one equal to the stored one and the free ones (--threads)
  # are accepted. Stops at an evaluation (20), between two (13, then 9 more: 22) and before
  # the first (7): a stopped run writes its checkpoint at the step where it stopped.
  "$ex/$name" --steps 40 --eval-every 10 --batch 16 --out "$work/$name-full" > /dev/null 2>&1
  for stop in 20 13 7; do
    resumed=$work/$name-resumed-$stop
    "$ex/$name" --steps 40 --eval-every 10 --batch 16 --out "$resumed" --no-plots --stop-after $stop > "$work/stop.log" 2>&1
    grep -q "checkpoint at step $stop); stopped by --stop-after" "$work/stop.log" || { echo "$name --stop-after $stop:"; cat "$work/stop.log"; exit 1; }
    # The accuracy shown is the last evaluation's, and the line says from which step.
    case $stop in 13) evaluated='% \(at step 10\) on' ;; 7) evaluated='% \(no evaluation yet\) on' ;; *) evaluated='[0-9]% on' ;; esac
    grep -Eq "$evaluated" "$work/stop.log" || { echo "$name --stop-after $stop: no /$evaluated/ in:"; cat "$work/stop.log"; exit 1; }
    "$check" same "$work/$name-full/checkpoint.safetensors" "$resumed/checkpoint.safetensors" > /dev/null 2>&1 &&
      { echo "$name: the interrupted run already equals the full one"; exit 1; }
    if [ $stop = 13 ]; then
      "$ex/$name" --out "$resumed" --resume --no-plots --stop-after 9 > "$work/stop.log" 2>&1
      grep -q "checkpoint at step 22); stopped by --stop-after" "$work/stop.log" || { echo "$name: second stop:"; cat "$work/stop.log"; exit 1; }
    fi
    "$ex/$name" --out "$resumed" --resume --eval-every 10 --threads 1 > "$work/resume.log" 2>&1
    grep -Eq "s training in total, .* s in this run; .*\(checkpoint at step 40\)$" "$work/resume.log" ||
      { echo "$name --resume after --stop-after $stop:"; cat "$work/resume.log"; exit 1; }
    "$check" same-run "$work/$name-full" "$resumed"
  done
  resumed=$work/$name-resumed-20
  # A --resume of a finished run says so, exits 0 and changes no file.
  cp -p "$resumed/metrics.json" "$resumed/checkpoint.safetensors" "$work/"
  "$ex/$name" --out "$resumed" --resume > "$work/finished.log" 2>&1 || { cat "$work/finished.log"; exit 1; }
  grep -q "already finished (step 40 of --steps 40); nothing to do, nothing changed" "$work/finished.log" ||
    { cat "$work/finished.log"; exit 1; }
  cmp "$work/metrics.json" "$resumed/metrics.json"
  cmp "$work/checkpoint.safetensors" "$resumed/checkpoint.safetensors"
  # A different trajectory is refused, naming the option, the given and the stored value.
  "$ex/$name" --steps 40 --eval-every 10 --batch 16 --out "$resumed" --no-plots --stop-after 20 > /dev/null 2>&1
  expect_refused() {  # PATTERN ARGS...
    local pattern=$1
    shift
    if "$ex/$name" --out "$resumed" --no-plots --resume "$@" > "$work/refused.log" 2>&1; then
      echo "$name --resume $* was accepted"; exit 1
    fi
    grep -Eq -- "$pattern" "$work/refused.log" || { echo "$name --resume $*: no /$pattern/ in:"; cat "$work/refused.log"; exit 1; }
  }
  expect_refused '--steps 80 differs from the stored run.s --steps 40' --steps 80
  expect_refused '--seed 1 differs from the stored run.s --seed 0' --seed 1
  expect_refused '--batch 8 differs from the stored run.s --batch 16' --batch 8
  expect_refused '--layers 1 differs from the stored run.s --layers 2' --layers 1
  expect_refused '--eval-every 5 differs from the stored run.s --eval-every 10' --eval-every 5
  "$ex/$name" --help | grep -q -- --resume
  # The thread count never changes results: whole runs with 1, 2 and 4 threads, same bits.
  for t in 1 2 4; do
    "$ex/$name" --steps 40 --eval-every 10 --threads $t --out "$work/$name-t$t" --no-plots > /dev/null 2>&1
  done
  "$check" same "$work/$name-t1/checkpoint.safetensors" "$work/$name-t2/checkpoint.safetensors"
  "$check" same "$work/$name-t1/checkpoint.safetensors" "$work/$name-t4/checkpoint.safetensors"
done

"$ex/extend" --steps 50 --out "$work/extend"
# Bad command lines exit non-zero with a message.
if "$ex/reverse" --steps abc > "$work/bad.log" 2>&1; then echo "bad --steps accepted"; exit 1; fi
grep -q -i "steps" "$work/bad.log"
if "$ex/reverse" --resume --out "$work/nothing-here" > "$work/bad2.log" 2>&1; then echo "resume without checkpoint accepted"; exit 1; fi
grep -q "no checkpoint in $work/nothing-here to resume from; run without --resume first" "$work/bad2.log" || { cat "$work/bad2.log"; exit 1; }
# A metrics.json that cannot be replaced (a directory there): the run fails naming it and
# leaves no metrics.json.tmp behind.
mkdir -p "$work/blocked/metrics.json"
if "$ex/reverse" --steps 2 --eval-every 1 --no-plots --out "$work/blocked" > "$work/bad3.log" 2>&1; then
  echo "reverse wrote over a directory named metrics.json"; exit 1
fi
grep -q "write_json: cannot replace '$work/blocked/metrics.json'" "$work/bad3.log" || { cat "$work/bad3.log"; exit 1; }
[ ! -e "$work/blocked/metrics.json.tmp" ] || { echo "metrics.json.tmp left behind"; exit 1; }
echo "examples: all short runs ok"
