#!/usr/bin/env bash
# Bad command lines and bad files for the example programs: each must exit non-zero (but not
# by a signal: exit code >= 128 is a crash) and explain itself in ONE line on stderr that names
# the problem; no stack trace, no abort, no multi-line dump. CLI11's usage hint line
# ("Run with --help for more information.") is allowed in addition to the one message line.
# Usage: bad_cli.sh BUILD_DIR
set -uo pipefail
build=$(cd "${1:?usage: bad_cli.sh BUILD_DIR}" && pwd)
ex=$build/examples
for name in reverse sort gradexp extend; do
  [ -x "$ex/$name" ] || { echo "bad_cli: $ex/$name is missing (build the examples first)"; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cases=0
failed=0

# expect_fail NAME PATTERN -- COMMAND...
#   PATTERN: an extended regex the one message line must match (case-insensitive).
# expect_code CODE NAME PATTERN -- COMMAND...: the same, and the exit code must be CODE
#   (CLI11 rejects a value with 105, an example's error is 2, a picture not drawn 1).
want_rc=
expect_code() {
  want_rc=$1
  shift
  expect_fail "$@"
  want_rc=
}
expect_fail() {
  local name=$1 pattern=$2
  shift 3
  cases=$((cases + 1))
  local out=$work/case$cases.out err=$work/case$cases.err rc
  (cd "$work" && timeout 120 "$@") > "$out" 2> "$err"
  rc=$?
  local problems=()
  if [ "$rc" -eq 0 ]; then problems+=("exit code 0 (accepted)"); fi
  if [ -n "$want_rc" ] && [ "$rc" -ne "$want_rc" ]; then problems+=("exit code $rc, want $want_rc"); fi
  if [ "$rc" -eq 124 ]; then problems+=("timed out"); fi
  if [ "$rc" -eq 126 ] || [ "$rc" -eq 127 ]; then problems+=("could not run the program (exit $rc)"); fi
  if [ "$rc" -ge 128 ]; then problems+=("crashed: exit code $rc (signal $((rc - 128)))"); fi
  if grep -Eqi 'terminate called|Aborted|core dumped|Segmentation|stack trace|^#[0-9]+ ' "$err" "$out"; then
    problems+=("abort / stack trace in the output")
  fi
  # The message lines: stderr without CLI11's usage hint and without progress-bar lines.
  local msg
  msg=$(grep -v -e '^Run with --help for more information\.$' -e '^\[[#.]*\] step ' "$err")
  local nlines
  nlines=$(printf '%s' "$msg" | grep -c '' || true)
  if [ "$nlines" -ne 1 ]; then problems+=("$nlines message lines on stderr (want exactly 1)"); fi
  if ! printf '%s\n' "$msg" | grep -Eqi -- "$pattern"; then problems+=("no stderr line matches /$pattern/"); fi
  if [ ${#problems[@]} -eq 0 ]; then
    printf 'ok    %-58s exit %3d  %s\n' "$name" "$rc" "$(printf '%s' "$msg" | head -1 | cut -c1-150)"
  else
    failed=$((failed + 1))
    printf 'FAIL  %-58s exit %3d\n' "$name" "$rc"
    local p
    for p in "${problems[@]}"; do printf '        - %s\n' "$p"; done
    printf '        stderr (first 10 lines):\n'
    head -10 "$err" | sed 's/^/          | /'
  fi
}

# expect_stdout NAME CODE PRESENT ABSENT -- COMMAND...: exit code CODE, some stdout line
#   matches PRESENT and none matches ABSENT (extended regexes); for runs that succeed or
#   only fail to draw.
expect_stdout() {
  local name=$1 want=$2 present=$3 absent=$4
  shift 5
  cases=$((cases + 1))
  local out=$work/case$cases.out err=$work/case$cases.err rc problems=()
  (cd "$work" && timeout 120 "$@") > "$out" 2> "$err"
  rc=$?
  [ "$rc" -eq "$want" ] || problems+=("exit code $rc, want $want")
  grep -Eq -- "$present" "$out" || problems+=("no stdout line matches /$present/")
  if grep -Eq -- "$absent" "$out"; then problems+=("a stdout line matches /$absent/"); fi
  if [ ${#problems[@]} -eq 0 ]; then
    printf 'ok    %-58s exit %3d  %s\n' "$name" "$rc" "$(grep -E -- "$present" "$out" | head -1 | cut -c1-150)"
  else
    failed=$((failed + 1))
    printf 'FAIL  %-58s exit %3d\n' "$name" "$rc"
    local p
    for p in "${problems[@]}"; do printf '        - %s\n' "$p"; done
    head -5 "$out" "$err" | sed 's/^/          | /'
  fi
}

# --- fixtures: a real checkpoint of each training example, then damaged copies -------------------
mkdir -p "$work/fixture"
"$ex/reverse" --steps 2 --eval-every 1 --batch 4 --no-plots --out "$work/fixture/reverse" > /dev/null 2>&1 ||
  { echo "setup: reverse --steps 2 failed"; exit 1; }
"$ex/sort" --steps 2 --eval-every 1 --batch 4 --no-plots --out "$work/fixture/sort" > /dev/null 2>&1 ||
  { echo "setup: sort --steps 2 failed"; exit 1; }
ck_reverse=$work/fixture/reverse/checkpoint.safetensors
ck_sort=$work/fixture/sort/checkpoint.safetensors
size=$(stat -c %s "$ck_reverse")

mkdir -p "$work/empty"
mkdir -p "$work/garbage" && printf 'this is not a safetensors file, just text\n' > "$work/garbage/checkpoint.safetensors"
mkdir -p "$work/truncated" && head -c $((size / 2)) "$ck_reverse" > "$work/truncated/checkpoint.safetensors"
mkdir -p "$work/zero" && : > "$work/zero/checkpoint.safetensors"
mkdir -p "$work/wrong_model" && cp "$ck_sort" "$work/wrong_model/checkpoint.safetensors"
# A checkpoint that loads but whose metadata lacks the training history (same-length rename).
mkdir -p "$work/no_history" && perl -0777 -pe 's/"history":/"hist0ry":/' "$ck_reverse" > "$work/no_history/checkpoint.safetensors"
cmp -s "$ck_reverse" "$work/no_history/checkpoint.safetensors" && { echo "setup: could not edit the metadata"; exit 1; }
# A checkpoint of an earlier version: no stored run configuration (same-length rename).
mkdir -p "$work/no_config" && perl -0777 -pe 's/"run_config":/"run_c0nfig":/' "$ck_reverse" > "$work/no_config/checkpoint.safetensors"
cmp -s "$ck_reverse" "$work/no_config/checkpoint.safetensors" && { echo "setup: could not edit the metadata"; exit 1; }
# A stored option out of range (a hand-edited file): --batch 4 -> 0, same length.
mkdir -p "$work/bad_config" && perl -0777 -pe 's/\\"--batch\\":4/\\"--batch\\":0/' "$ck_reverse" > "$work/bad_config/checkpoint.safetensors"
cmp -s "$ck_reverse" "$work/bad_config/checkpoint.safetensors" && { echo "setup: could not edit the stored --batch"; exit 1; }
mkdir -p "$work/ckdir/checkpoint.safetensors"      # the checkpoint path is a directory
# A run stopped by --stop-after (checkpoint at step 1 of 3) whose metadata lacks the training time.
"$ex/reverse" --steps 3 --eval-every 1 --batch 4 --no-plots --stop-after 1 --out "$work/fixture/stopped" > /dev/null 2>&1 ||
  { echo "setup: reverse --stop-after 1 failed"; exit 1; }
mkdir -p "$work/no_seconds" &&
  perl -0777 -pe 's/"train_seconds":/"train_sec0nds":/' "$work/fixture/stopped/checkpoint.safetensors" > "$work/no_seconds/checkpoint.safetensors"
cmp -s "$work/fixture/stopped/checkpoint.safetensors" "$work/no_seconds/checkpoint.safetensors" && { echo "setup: could not edit the metadata"; exit 1; }
# A gnuplot that fails with its own message, and a PATH without gnuplot.
mkdir -p "$work/badgnuplot" && printf '#!/bin/sh\necho "fake gnuplot: cannot open font Sans" >&2\nexit 3\n' > "$work/badgnuplot/gnuplot"
chmod +x "$work/badgnuplot/gnuplot"
mkdir -p "$work/nognuplot"
printf 'a regular file\n' > "$work/regular_file"

# --- command-line errors ----------------------------------------------------------------------------
expect_fail "reverse: unknown option --bogus"            'bogus'          -- "$ex/reverse" --bogus
expect_fail "reverse: non-numeric --steps abc"           'steps|abc'      -- "$ex/reverse" --steps abc
expect_fail "reverse: --steps without a value"           'steps'          -- "$ex/reverse" --steps
expect_fail "reverse: negative --steps -5"               'steps'          -- "$ex/reverse" --steps -5 --no-plots --out "$work/neg_steps"
expect_fail "reverse: --eval-every 0"                    'eval-every'     -- "$ex/reverse" --eval-every 0
expect_fail "reverse: non-numeric --seed"                'seed|x7'        -- "$ex/reverse" --seed x7
expect_fail "sort: --threads 0"                          'threads'        -- "$ex/sort" --threads 0
expect_fail "sort: --threads 100000"                     'threads'        -- "$ex/sort" --threads 100000
expect_fail "sort: --length 1 (out of range 2-32)"       'length'         -- "$ex/sort" --length 1
expect_fail "sort: --length 33 (out of range 2-32)"      'length'         -- "$ex/sort" --length 33
expect_fail "sort: stray positional argument"            'extra'          -- "$ex/sort" extra
expect_fail "gradexp: non-numeric --lanczos-iterations"  'lanczos-iterations|two' -- "$ex/gradexp" --lanczos-iterations two
expect_fail "gradexp: --threads 0"                       'threads'        -- "$ex/gradexp" --threads 0
expect_fail "extend: unknown option --bogus"             'bogus'          -- "$ex/extend" --bogus
expect_fail "extend: non-numeric --steps"                'steps'          -- "$ex/extend" --steps 1e9x

# Values out of range: CLI11 exit code 105, one line naming the option, the value and the range.
expect_code 105 "reverse: --steps 0"                     '^--steps: 0 is out of range; allowed: a whole number from 1 to' -- "$ex/reverse" --steps 0
expect_code 105 "extend: --steps 0"                      '^--steps: 0 is out of range; allowed: a whole number from 1 to' -- "$ex/extend" --steps 0
expect_code 105 "reverse: --seed -1 (no wrap to 2^64-1)" '^--seed: -1 is negative; allowed: a whole number from 0 to 2\^64 - 1' -- "$ex/reverse" --seed -1
expect_code 105 "sort: --seed 2^64 (too large)"          '^--seed: 18446744073709551616 is out of range' -- "$ex/sort" --seed 18446744073709551616
expect_code 105 "reverse: --batch 0"                     '^--batch: 0 is out of range; allowed: a whole number from 1 to 65536' -- "$ex/reverse" --batch 0
expect_code 105 "sort: --batch 0"                        '^--batch: 0 is out of range; allowed: a whole number from 1 to 65536' -- "$ex/sort" --batch 0
expect_code 105 "reverse: --batch -1 (no wrap)"          '^--batch: -1 is negative'  -- "$ex/reverse" --batch -1
expect_code 105 "reverse: --layers 0"                    '^--layers: 0 is out of range; allowed: a whole number from 1 to 64' -- "$ex/reverse" --layers 0
expect_code 105 "sort: --layers 0"                       '^--layers: 0 is out of range; allowed: a whole number from 1 to 64' -- "$ex/sort" --layers 0
expect_code 105 "reverse: --dim 0"                       '^--dim: 0 is out of range'   -- "$ex/reverse" --dim 0
expect_code 105 "reverse: --heads 0"                     '^--heads: 0 is out of range' -- "$ex/reverse" --heads 0
expect_code 2   "reverse: --dim 30 --heads 4"            'dim 30 is not a multiple of --heads 4' -- "$ex/reverse" --dim 30 --heads 4 --steps 1 --no-plots --out "$work/dim30"
expect_code 105 "reverse: --lr 0"                        '^--lr: 0 is out of range; allowed: a number greater than 0' -- "$ex/reverse" --lr 0
expect_code 105 "sort: --lr nan"                         '^--lr: .nan. is not a finite number' -- "$ex/sort" --lr nan
expect_code 105 "reverse: --stop-after -5"               '^--stop-after: -5 is negative; allowed: a whole number from 0 to' -- "$ex/reverse" --stop-after -5
expect_code 105 "gradexp: --lanczos-iterations -3"       '^--lanczos-iterations: -3 is negative; allowed: a whole number from 1 to 1000' -- "$ex/gradexp" --lanczos-iterations -3
expect_code 105 "gradexp: --hutchinson-samples 0"        '^--hutchinson-samples: 0 is out of range' -- "$ex/gradexp" --hutchinson-samples 0
expect_code 105 "gradexp: --train-size 1"                '^--train-size: 1 is out of range; allowed: a whole number from 2 to 60000' -- "$ex/gradexp" --train-size 1
expect_code 2   "gradexp: fewer Lanczos steps than eigenvalues" 'lanczos-iterations 2 is less than --eigenvalues 3' -- "$ex/gradexp" --eigenvalues 3 --lanczos-iterations 2 --steps 1 --no-plots --out "$work/lanczos"
expect_code 105 "reverse: --eval-every 0"                '^--eval-every: 0 is out of range' -- "$ex/reverse" --eval-every 0
expect_code 105 "sort: --threads 0"                      '^--threads: 0 is out of range; allowed: a whole number from 1 to 256' -- "$ex/sort" --threads 0
expect_code 109 "demo: unknown option --bogus"           'bogus'          -- "$ex/demo" --bogus

# --help: exit 0, every option with a value shows its default.
for name in reverse sort gradexp extend; do
  cases=$((cases + 1))
  if help=$("$ex/$name" --help) && ! printf '%s\n' "$help" | grep -E -- '^ +--[a-z-]+ [A-Z]+' | grep -v -q -- '\[default: ' &&
     printf '%s\n' "$help" | grep -q -- '--threads.*\[default: decided at run time'; then
    printf 'ok    %-58s\n' "$name --help: every default shown"
  else
    failed=$((failed + 1))
    printf 'FAIL  %-58s\n' "$name --help: an option without its default"
    printf '%s\n' "$help" | grep -E -- '^ +--[a-z-]+ [A-Z]+' | grep -v -- '\[default: ' | sed 's/^/          | /'
  fi
done
expect_stdout "demo --help"                    0 'Usage: .*demo' 'd loss' -- "$ex/demo" --help

# What the last lines claim: no PNG with --no-plots or when gnuplot is missing or fails;
# gnuplot missing and gnuplot failing are told apart, the latter with gnuplot's own message.
expect_stdout "reverse --no-plots: no PNG claimed" 0 'wrote .*/\{metrics\.json,checkpoint\.safetensors\} \(checkpoint at step 2\)$' 'png' -- "$ex/reverse" --steps 2 --eval-every 1 --batch 4 --no-plots --out "$work/noplots"
expect_stdout "gradexp --no-plots: no PNG, no SVG claimed" 0 'wrote .*/\{metrics\.json,measurements\.json,graph_mha_forward\.dot,graph_mha_backward\.dot,checkpoint\.safetensors\} \(checkpoint at step 2\)$' 'png|svg' -- "$ex/gradexp" --steps 2 --train-size 8 --lanczos-iterations 2 --hutchinson-samples 1 --no-plots --out "$work/noplots_gradexp"
expect_stdout "sort: PNGs claimed when drawn"      0 'wrote .*/\{metrics\.json,loss\.png,attention\.png,checkpoint\.safetensors\} \(checkpoint at step 2\)$' 'zzz' -- "$ex/sort" --steps 2 --eval-every 1 --batch 4 --out "$work/plots"
expect_stdout "reverse: --out with a quote, PNGs drawn" 0 "wrote .*/it's/\\{metrics\\.json,loss\\.png,attention\\.png," 'zzz' -- "$ex/reverse" --steps 2 --eval-every 1 --batch 4 --out "$work/it's"
expect_code 1 "reverse: gnuplot missing"                 '^warning: no .*loss\.png: gnuplot is not installed' -- env PATH="$work/nognuplot" "$ex/reverse" --steps 2 --eval-every 1 --batch 4 --out "$work/nognuplot_out"
expect_code 1 "sort: gnuplot fails"                      '^warning: no .*loss\.png: gnuplot exited with status 3: fake gnuplot: cannot open font Sans' -- env PATH="$work/badgnuplot:$PATH" "$ex/sort" --steps 2 --eval-every 1 --batch 4 --out "$work/badgnuplot_out"
expect_code 1 "gradexp: gnuplot fails"                   'gnuplot exited with status 3: fake gnuplot' -- env PATH="$work/badgnuplot:$PATH" "$ex/gradexp" --steps 2 --train-size 8 --lanczos-iterations 2 --hutchinson-samples 1 --out "$work/badgnuplot_gradexp"
expect_stdout "reverse: gnuplot missing, no PNG claimed" 1 'wrote .*/\{metrics\.json,checkpoint\.safetensors\} \(checkpoint at step 2\)$' 'png' -- env PATH="$work/nognuplot" "$ex/reverse" --steps 2 --eval-every 1 --batch 4 --out "$work/nognuplot_out2"

# --- output directory errors -------------------------------------------------------------------------
expect_fail "reverse: --out is a regular file"           'regular_file|directory' -- "$ex/reverse" --steps 1 --out "$work/regular_file"
expect_fail "sort: --out is a regular file"              'regular_file|directory' -- "$ex/sort" --steps 1 --out "$work/regular_file"
expect_fail "gradexp: --out is a regular file"           'regular_file|directory' -- "$ex/gradexp" --steps 1 --out "$work/regular_file"
expect_fail "extend: --out is a regular file"            'regular_file|directory' -- "$ex/extend" --steps 1 --out "$work/regular_file"

# --- --resume errors -------------------------------------------------------------------------------------
expect_code 2 "reverse: --resume with no checkpoint" 'no checkpoint in .*/empty to resume from; run without --resume first' -- "$ex/reverse" --resume --no-plots --out "$work/empty"
expect_code 2 "sort: --resume with no checkpoint" 'no checkpoint in .*/empty to resume from; run without --resume first' -- "$ex/sort" --resume --no-plots --out "$work/empty"
expect_code 2 "gradexp: --resume with no checkpoint" 'no checkpoint in .*/empty to resume from; run without --resume first' -- "$ex/gradexp" --resume --no-plots --out "$work/empty"
"$ex/gradexp" --steps 3 --eval-every 2 --stop-after 2 --train-size 8 --lanczos-iterations 2 --hutchinson-samples 1 --no-plots \
  --out "$work/gradexp_lost" > /dev/null 2>&1 && rm "$work/gradexp_lost/measurements.json"
expect_code 2 "gradexp: --resume without measurements.json" 'measurements\.json is missing: the measurements of the earlier evaluations are lost' -- "$ex/gradexp" --resume --no-plots --out "$work/gradexp_lost"
expect_code 109 "extend: --resume (keeps no checkpoint)"  'not expected: --resume'  -- "$ex/extend" --resume --out "$work/empty"
expect_fail "reverse: --resume, checkpoint is text"      'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/garbage"
expect_fail "reverse: --resume, checkpoint truncated"    'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/truncated"
expect_fail "sort: --resume, checkpoint of 0 bytes"      'checkpoint\.safetensors' -- "$ex/sort" --resume --no-plots --out "$work/zero"
expect_fail "reverse: --resume, sort's checkpoint"       'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/wrong_model"
# A resume that would change the run is refused, naming the option, the given and the stored value
# (the fixtures ran with --steps 2 --eval-every 1 --batch 4 and the defaults otherwise).
expect_code 2 "reverse: --resume, different --dim"       'checkpoint\.safetensors: --dim 32 differs from the stored run.s --dim 64' -- "$ex/reverse" --resume --dim 32 --no-plots --out "$work/fixture/reverse"
expect_code 2 "reverse: --resume, different --steps"     '--steps 5 differs from the stored run.s --steps 2'    -- "$ex/reverse" --resume --steps 5 --no-plots --out "$work/fixture/reverse"
expect_code 2 "reverse: --resume, different --seed"      '--seed 9 differs from the stored run.s --seed 0'     -- "$ex/reverse" --resume --seed 9 --no-plots --out "$work/fixture/reverse"
expect_code 2 "reverse: --resume, different --layers"    '--layers 1 differs from the stored run.s --layers 2' -- "$ex/reverse" --resume --layers 1 --no-plots --out "$work/fixture/reverse"
expect_code 2 "reverse: --resume, different --lr"        '--lr 0.01 differs from the stored run.s --lr 0.003'  -- "$ex/reverse" --resume --lr 0.01 --no-plots --out "$work/fixture/reverse"
expect_code 2 "sort: --resume, different --length"       '--length 4 differs from the stored run.s --length 8' -- "$ex/sort" --resume --length 4 --no-plots --out "$work/fixture/sort"
expect_code 2 "sort: --resume, different --batch"        '--batch 64 differs from the stored run.s --batch 4'  -- "$ex/sort" --resume --batch 64 --no-plots --out "$work/fixture/sort"
expect_code 2 "reverse: --resume, stored --batch 0"      'the stored --batch 0 is invalid: 0 is out of range' -- "$ex/reverse" --resume --no-plots --out "$work/bad_config"
expect_code 2 "reverse: --resume, no stored configuration" "no 'example' / 'run_config' metadata" -- "$ex/reverse" --resume --no-plots --out "$work/no_config"
expect_fail "reverse: --resume, checkpoint is a directory" 'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/ckdir"
expect_fail "reverse: --resume, metadata without history" 'history'               -- "$ex/reverse" --resume --no-plots --out "$work/no_history"
expect_code 2 "reverse: --resume, metadata without training time" "no 'train_seconds' metadata" -- "$ex/reverse" --resume --no-plots --out "$work/no_seconds"
# A --resume of a finished run changes nothing and says so.
expect_stdout "reverse: --resume of a finished run" 0 'already finished \(step 2 of --steps 2\); nothing to do, nothing changed' 'wrote' -- "$ex/reverse" --resume --no-plots --out "$work/fixture/reverse"
# Bad runtime settings from the environment: an error before training, never SIGILL.
expect_fail "reverse: XGRAD_CPU_PATH=avx1024"             'XGRAD_CPU_PATH'  -- env XGRAD_CPU_PATH=avx1024 "$ex/reverse" --steps 5 --no-plots --out "$work/bad_path"
expect_fail "sort: XGRAD_NUM_THREADS=two"                 'XGRAD_NUM_THREADS' -- env XGRAD_NUM_THREADS=two "$ex/sort" --steps 5 --no-plots --out "$work/bad_threads"
expect_fail "reverse: XGRAD_NUM_THREADS=0"                'XGRAD_NUM_THREADS' -- env XGRAD_NUM_THREADS=0 "$ex/reverse" --steps 5 --no-plots --out "$work/bad_threads0"

echo "bad_cli: $cases cases, $((cases - failed)) ok, $failed failed"
[ "$failed" -eq 0 ]
