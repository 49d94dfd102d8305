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
expect_fail() {
  local name=$1 pattern=$2
  shift 3
  cases=$((cases + 1))
  local out=$work/case$cases.out err=$work/case$cases.err rc
  (cd "$work" && timeout 120 "$@") > "$out" 2> "$err"
  rc=$?
  local problems=()
  if [ "$rc" -eq 0 ]; then problems+=("exit code 0 (accepted)"); fi
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
mkdir -p "$work/ckdir/checkpoint.safetensors"      # the checkpoint path is a directory
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
expect_fail "gradexp: non-numeric --power-iterations"    'power-iterations|two' -- "$ex/gradexp" --power-iterations two
expect_fail "gradexp: --threads 0"                       'threads'        -- "$ex/gradexp" --threads 0
expect_fail "extend: unknown option --bogus"             'bogus'          -- "$ex/extend" --bogus
expect_fail "extend: non-numeric --steps"                'steps'          -- "$ex/extend" --steps 1e9x

# --- output directory errors -------------------------------------------------------------------------
expect_fail "reverse: --out is a regular file"           'regular_file|directory' -- "$ex/reverse" --steps 1 --out "$work/regular_file"
expect_fail "sort: --out is a regular file"              'regular_file|directory' -- "$ex/sort" --steps 1 --out "$work/regular_file"
expect_fail "gradexp: --out is a regular file"           'regular_file|directory' -- "$ex/gradexp" --steps 1 --out "$work/regular_file"
expect_fail "extend: --out is a regular file"            'regular_file|directory' -- "$ex/extend" --steps 1 --out "$work/regular_file"

# --- --resume errors -------------------------------------------------------------------------------------
expect_fail "reverse: --resume with no checkpoint"       'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/empty"
expect_fail "sort: --resume with no checkpoint"          'checkpoint\.safetensors' -- "$ex/sort" --resume --no-plots --out "$work/empty"
expect_fail "gradexp: --resume with no checkpoint"       'checkpoint\.safetensors' -- "$ex/gradexp" --resume --no-plots --out "$work/empty"
expect_fail "extend: --resume with no checkpoint"        'checkpoint|resume'       -- "$ex/extend" --resume --out "$work/empty"
expect_fail "reverse: --resume, checkpoint is text"      'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/garbage"
expect_fail "reverse: --resume, checkpoint truncated"    'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/truncated"
expect_fail "sort: --resume, checkpoint of 0 bytes"      'checkpoint\.safetensors' -- "$ex/sort" --resume --no-plots --out "$work/zero"
expect_fail "reverse: --resume, sort's checkpoint"       'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/wrong_model"
expect_fail "reverse: --resume, different --dim"         'checkpoint\.safetensors' -- "$ex/reverse" --resume --dim 32 --no-plots --out "$work/fixture/reverse"
expect_fail "reverse: --resume, checkpoint is a directory" 'checkpoint\.safetensors' -- "$ex/reverse" --resume --no-plots --out "$work/ckdir"
expect_fail "reverse: --resume, metadata without history" 'history'               -- "$ex/reverse" --resume --no-plots --out "$work/no_history"
# Bad runtime settings from the environment: an error before training, never SIGILL.
expect_fail "reverse: XGRAD_CPU_PATH=avx1024"             'XGRAD_CPU_PATH'  -- env XGRAD_CPU_PATH=avx1024 "$ex/reverse" --steps 5 --no-plots --out "$work/bad_path"
expect_fail "sort: XGRAD_NUM_THREADS=two"                 'XGRAD_NUM_THREADS' -- env XGRAD_NUM_THREADS=two "$ex/sort" --steps 5 --no-plots --out "$work/bad_threads"
expect_fail "reverse: XGRAD_NUM_THREADS=0"                'XGRAD_NUM_THREADS' -- env XGRAD_NUM_THREADS=0 "$ex/reverse" --steps 5 --no-plots --out "$work/bad_threads0"

echo "bad_cli: $cases cases, $((cases - failed)) ok, $failed failed"
[ "$failed" -eq 0 ]
