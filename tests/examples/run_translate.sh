#!/usr/bin/env bash
# The translate example, small and short: outputs written and loadable, the loss decreases, no
# held-out input among the training inputs, cached and uncached decoding agree, --resume gives
# the uninterrupted run bit for bit, --translate works, and bad inputs are refused with the
# documented one-line messages. Usage: run_translate.sh BUILD_DIR
set -euo pipefail
build=$1
ex=$build/examples/translate
check=$build/tests/check_outputs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
small=(--steps 40 --eval-every 20 --batch 16 --heldout 100 --dim 32 --ff 64 --threads 1)

"$ex" "${small[@]}" --out "$work/full" > "$work/full.log" 2>&1 || { cat "$work/full.log"; exit 1; }
"$check" run "$work/full" --no-plots  # metrics.json parses, evaluation losses decrease, the checkpoint loads
for png in loss cross_attention_0 cross_attention_1 cross_attention_2; do
  head -c 8 "$work/full/$png.png" | grep -q PNG || { echo "translate: $png.png missing or not a PNG"; exit 1; }
done
grep -q ', 0 of them seen in training;' "$work/full.log" || { cat "$work/full.log"; exit 1; }
grep -q '"heldout_inputs_seen_in_training": 0' "$work/full/metrics.json"
grep -q '"cached_and_uncached_tokens_identical": true' "$work/full/metrics.json"
grep -q '(same tokens: yes)' "$work/full.log"

# Stopped after 13 steps (between two evaluations), then resumed: the same run, bit for bit.
"$ex" "${small[@]}" --out "$work/resumed" --stop-after 13 > "$work/stop.log" 2>&1
grep -q 'checkpoint at step 13); stopped by --stop-after' "$work/stop.log" || { cat "$work/stop.log"; exit 1; }
"$ex" --out "$work/resumed" --resume > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; exit 1; }
grep -q '(checkpoint at step 40)' "$work/resume.log" || { cat "$work/resume.log"; exit 1; }
"$check" same "$work/full/checkpoint.safetensors" "$work/resumed/checkpoint.safetensors"
same_metrics() {  # metrics.json but the timings (*_seconds) and thread counts
  grep -v -e '_seconds' -e '"threads"' "$1"
}
diff <(same_metrics "$work/full/metrics.json") <(same_metrics "$work/resumed/metrics.json") ||
  { echo "translate: metrics.json of the resumed run differs"; exit 1; }
cmp "$work/full/loss.png" "$work/resumed/loss.png"
if "$ex" --out "$work/resumed" --resume --layers 1 > "$work/refused.log" 2>&1; then echo "changed --layers accepted"; exit 1; fi
grep -q -- '--layers 1 differs from the stored run.s --layers 2' "$work/refused.log" || { cat "$work/refused.log"; exit 1; }

# --translate with the stored run's model: one line per input, greedy and beam.
"$ex" --out "$work/full" --translate "tue 12 march 1985" --translate "12/03/85" > "$work/tr.log"
[ "$(wc -l < "$work/tr.log")" -eq 2 ] && grep -q '^tue 12 march 1985 -> ' "$work/tr.log" && grep -q '^12/03/85 -> ' "$work/tr.log" ||
  { cat "$work/tr.log"; exit 1; }
"$ex" --out "$work/full" --beam 3 --translate "March 12, 1985" | grep -q '^March 12, 1985 -> ' 

# Bad inputs: exit code, and exactly one message line on stderr matching the pattern.
expect() {  # CODE PATTERN ARGS...
  local code=$1 pattern=$2 rc=0
  shift 2
  "$ex" "$@" > "$work/bad.out" 2> "$work/bad.err" || rc=$?
  local msg
  msg=$(grep -v '^Run with --help for more information\.$' "$work/bad.err" || true)
  if [ "$rc" -ne "$code" ] || [ "$(printf '%s' "$msg" | grep -c '')" -ne 1 ] || ! printf '%s\n' "$msg" | grep -Eq -- "$pattern"; then
    echo "translate $*: exit $rc (want $code), stderr:"; cat "$work/bad.err"; echo "want one line matching /$pattern/"; exit 1
  fi
}
expect 2 "characters not in the vocabulary: 'ä' \(U\+00E4\), '\\?' \(the model reads letters" \
  --out "$work/full" --translate "12 mär 1985?"
expect 2 'the input is empty' --out "$work/full" --translate ""
expect 2 'the input has 40 characters; the model reads at most 32 \(its max_src_len\)' \
  --out "$work/full" --translate "0123456789012345678901234567890123456789"
expect 105 '--beam: 0 is out of range; allowed: a whole number from 1 to 64' --out "$work/full" --beam 0 --translate "12/03/85"
expect 2 "--translate: no checkpoint in $work/none; train first" --out "$work/none" --translate "12/03/85"
echo "translate: short run, resume, --translate and bad inputs ok"
