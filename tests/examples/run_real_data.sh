#!/usr/bin/env bash
# Short runs of the real-data examples (fashion_vit and gradexp on Fashion-MNIST, char_gpt on
# fortunes) on small subsets: outputs written and loadable, the loss decreases, --resume reproduces an
# uninterrupted run bit for bit, --generate-only samples from the checkpoint alone, cached and
# uncached sampling give the same text, and bad inputs give their documented messages.
# The data packages must be installed (CI installs them): without them this test FAILS, it
# never skips. Usage: run_real_data.sh BUILD_DIR
set -euo pipefail
build=$1
ex=$build/examples
check=$build/tests/check_outputs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fm=/usr/share/datasets/fashion-mnist
for need in "dataset-fashion-mnist:$fm/train-images-idx3-ubyte.gz" "fortunes:/usr/share/games/fortunes/fortunes"; do
  if [ ! -f "${need#*:}" ]; then
    echo "run_real_data: FAILED: the Debian package ${need%%:*} is not installed (${need#*:} is missing): apt-get install ${need%%:*}"
    exit 1
  fi
done

fail() { echo "run_real_data: FAILED: $*"; exit 1; }
# expect_error PATTERN LOG COMMAND...: the command must fail and print PATTERN (grep -E).
expect_error() {
  local pattern=$1 log=$2
  shift 2
  if "$@" > "$log" 2>&1; then fail "accepted: $*"; fi
  grep -Eq -- "$pattern" "$log" || { cat "$log"; fail "no /$pattern/ from: $*"; }
}

# --- fashion_vit ------------------------------------------------------------------------------
vit=("$ex/fashion_vit" --train-subset 1024 --test-subset 256 --batch 32 --patch 7 --dim 32 --depth 2 --heads 2 --mlp 64)
"${vit[@]}" --steps 40 --eval-every 20 --out "$work/vit" > "$work/vit.log" 2>&1 || { cat "$work/vit.log"; fail "fashion_vit"; }
"$check" run "$work/vit"
head -c 8 "$work/vit/confusion.png" | grep -q PNG || fail "no confusion.png"
grep -Eq "^fashion_vit: 40 steps \(1.25 epochs\), test accuracy [0-9.]+% on 256 images" "$work/vit.log" || { cat "$work/vit.log"; fail "fashion_vit summary"; }
grep -q "^published: above [0-9]* of the [0-9]* results published in" "$work/vit.log" || fail "no published baselines line"
grep -q '"test_loss"' "$work/vit/metrics.json" || fail "no test_loss in metrics.json"
# Interrupted in the first epoch, resumed across the epoch boundary: the uninterrupted run's bits.
"${vit[@]}" --steps 40 --eval-every 10 --out "$work/vit-full" > /dev/null 2>&1
"${vit[@]}" --steps 40 --eval-every 10 --out "$work/vit-resumed" --no-plots --stop-after 15 > "$work/stop.log" 2>&1
grep -q "checkpoint at step 15); stopped by --stop-after" "$work/stop.log" || { cat "$work/stop.log"; fail "vit --stop-after"; }
"$ex/fashion_vit" --out "$work/vit-resumed" --resume > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "vit --resume"; }
"$check" same-run "$work/vit-full" "$work/vit-resumed"
expect_error "--dim 64 differs from the stored run.s --dim 32" "$work/bad.log" \
  "$ex/fashion_vit" --out "$work/vit-resumed" --resume --dim 64
expect_error "--pool \"mean\" differs from the stored run.s --pool \"cls\"" "$work/bad.log" \
  "$ex/fashion_vit" --out "$work/vit-resumed" --resume --pool mean
expect_error "--label-smoothing: 'nan' is not a finite number; allowed: a number >= 0 and < 1" "$work/bad.log" \
  "${vit[@]}" --steps 2 --label-smoothing nan --out "$work/x"
[ ! -e "$work/x" ] || fail "--label-smoothing nan made --out before it was refused"
# Bad data: a missing directory names the package; a truncated and a wrong file name the file.
expect_error "load_fashion_mnist: directory '$work/none' does not exist .*apt-get install dataset-fashion-mnist" "$work/bad.log" \
  "${vit[@]}" --steps 2 --data-dir "$work/none" --out "$work/x"
mkdir "$work/fm"
for f in train-images-idx3-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do ln -s "$fm/$f.gz" "$work/fm/$f.gz"; done
head -c 20000 "$fm/train-labels-idx1-ubyte.gz" > "$work/fm/train-labels-idx1-ubyte.gz"
expect_error "read_idx: '$work/fm/train-labels-idx1-ubyte.gz': truncated gzip data: the compressed stream ends before its end marker" \
  "$work/bad.log" "${vit[@]}" --steps 2 --data-dir "$work/fm" --out "$work/x"
printf 'hello, world' | gzip > "$work/fm/train-labels-idx1-ubyte.gz"
expect_error "read_idx: '$work/fm/train-labels-idx1-ubyte.gz': not an IDX file: magic number 68 65 6c 6c" "$work/bad.log" \
  "${vit[@]}" --steps 2 --data-dir "$work/fm" --out "$work/x"
{ printf '\0\0\10\1\0\0\352\140'; head -c 59999 /dev/zero; } | gzip > "$work/fm/train-labels-idx1-ubyte.gz"
expect_error "truncated data: the header declares \(60000\) unsigned byte \(0x08\) = 60000 bytes .* has 59999" "$work/bad.log" \
  "${vit[@]}" --steps 2 --data-dir "$work/fm" --out "$work/x"
expect_error "--patch: 5 not in \{1,2,4,7,14,28\}" "$work/bad.log" "${vit[@]}" --patch 5 --out "$work/x"

# --- gradexp (the ViT on Fashion-MNIST, full-batch gradient descent) ----------------------------
# Every output written; the measurements finite and consistent (check_outputs gradexp: the loss
# decreases, lambda_max >= every probe's Rayleigh quotient and tr(H)/n, no per-example loop in
# the per-sample gradients, hvp / vhp / jvp / Lanczos vs power checks); a run stopped and
# resumed equals the uninterrupted one (the measurements before the stop come back from
# measurements.json).
gx=(--steps 20 --eval-every 5 --train-size 48 --test-size 64 --dim 16 --mlp 32 --lanczos-iterations 12 --hutchinson-samples 3)
"$ex/gradexp" "${gx[@]}" --out "$work/gradexp" > "$work/gradexp.log" 2>&1 || { cat "$work/gradexp.log"; fail "gradexp"; }
"$check" gradexp "$work/gradexp" || { cat "$work/gradexp.log"; fail "gradexp measurements"; }
for png in loss sharpness grad_norms trace_noise; do
  head -c 8 "$work/gradexp/$png.png" | grep -q PNG || fail "gradexp: $png.png is not a PNG"
done
grep -q '^digraph xgrad' "$work/gradexp/graph_mha_forward.dot" || fail "gradexp: no forward graph"
grep -q 'in_proj_weight' "$work/gradexp/graph_mha_backward.dot" || fail "gradexp: no backward graph"
if command -v dot > /dev/null; then grep -q '<svg' "$work/gradexp/graph_mha_backward.svg" || fail "gradexp: no SVG"; fi
test "$(grep -c '"step"' "$work/gradexp/measurements.json")" -eq 4 || fail "gradexp: not 4 measurements"
grep -Eq "^trained 20 steps \(full-batch gradient descent on 48 images, peak lr 0.5\): training loss [0-9.]+, test accuracy [0-9.]+% on 64 images" \
  "$work/gradexp.log" || { cat "$work/gradexp.log"; fail "gradexp summary"; }
"$ex/gradexp" "${gx[@]}" --out "$work/gradexp-resumed" --no-plots --stop-after 7 > /dev/null 2>&1
"$ex/gradexp" --resume --out "$work/gradexp-resumed" > "$work/gradexp-resume.log" 2>&1 ||
  { cat "$work/gradexp-resume.log"; fail "gradexp --resume"; }
"$check" same-run "$work/gradexp" "$work/gradexp-resumed"
expect_error "--dim 32 differs from the stored run.s --dim 16" "$work/bad.log" \
  "$ex/gradexp" --out "$work/gradexp-resumed" --resume --dim 32
expect_error "--lanczos-iterations 2 is less than --eigenvalues 3" "$work/bad.log" \
  "$ex/gradexp" --eigenvalues 3 --lanczos-iterations 2 --out "$work/x"
expect_error "--train-size: 1 is out of range" "$work/bad.log" "$ex/gradexp" --train-size 1 --out "$work/x"
expect_error "load_fashion_mnist: directory '$work/none' does not exist" "$work/bad.log" \
  "$ex/gradexp" --data-dir "$work/none" --out "$work/x"
"$ex/gradexp" --help | grep -q -- --hutchinson-samples || fail "gradexp --help"

# --- char_gpt ---------------------------------------------------------------------------------
gpt=("$ex/char_gpt" --max-files 3 --context 32 --dim 32 --layers 2 --heads 2 --mlp 64 --batch 8)
"${gpt[@]}" --steps 40 --eval-every 20 --tokens 80 --out "$work/gpt" > "$work/gpt.log" 2>&1 || { cat "$work/gpt.log"; fail "char_gpt"; }
"$check" run "$work/gpt"
grep -Eq "^char_gpt: 40 steps, validation loss [0-9.]+ nats/char \([0-9.]+ bits/char\), bigram [0-9.]+, unigram [0-9.]+" "$work/gpt.log" ||
  { cat "$work/gpt.log"; fail "char_gpt summary"; }
# 80 characters with a 32-character context: the sessions restart (the window rule) twice.
grep -Eq "^sampled 80 characters .*: with the key/value cache [0-9.e+]+ characters/s, without [0-9.e+]+ characters/s .*; cached and uncached texts identical$" \
  "$work/gpt.log" || { cat "$work/gpt.log"; fail "cached and uncached sampling"; }
cp "$work/gpt/samples.txt" "$work/samples-after-training.txt"
# --generate-only: no data needed, the same text for the same options and seed.
"$ex/char_gpt" --generate-only --out "$work/gpt" --tokens 80 --data-dir "$work/none" > "$work/gen.log" 2>&1 ||
  { cat "$work/gen.log"; fail "--generate-only"; }
grep -q "cached and uncached texts identical" "$work/gen.log" || { cat "$work/gen.log"; fail "--generate-only sampling"; }
cmp "$work/gpt/samples.txt" "$work/samples-after-training.txt" || fail "--generate-only sampled another text"
"$ex/char_gpt" --generate-only --out "$work/gpt" --tokens 20 --prompt "" --top-k 1 > "$work/gen.log" 2>&1 ||
  { cat "$work/gen.log"; fail "--generate-only with an empty prompt, greedy"; }
# A context shorter than the 32 characters of the attention picture.
"$ex/char_gpt" --max-files 1 --context 8 --dim 16 --layers 1 --heads 2 --mlp 32 --batch 4 --steps 2 --tokens 5 \
  --no-plots --out "$work/gpt-ctx8" > "$work/ctx8.log" 2>&1 || { cat "$work/ctx8.log"; fail "char_gpt --context 8"; }
[ -f "$work/gpt-ctx8/metrics.json" ] || fail "char_gpt --context 8 wrote no metrics.json"
# Resume.
"${gpt[@]}" --steps 30 --eval-every 10 --tokens 10 --out "$work/gpt-full" > /dev/null 2>&1
"${gpt[@]}" --steps 30 --eval-every 10 --tokens 10 --out "$work/gpt-resumed" --no-plots --stop-after 14 > /dev/null 2>&1
"$ex/char_gpt" --out "$work/gpt-resumed" --resume --tokens 10 > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "gpt --resume"; }
"$check" same-run "$work/gpt-full" "$work/gpt-resumed"
# Bad inputs.
expect_error "CharVocab::encode: --prompt: character U\+20AC '€' at position 5 is not in the vocabulary" "$work/bad.log" \
  "$ex/char_gpt" --generate-only --out "$work/gpt" --prompt "cost €5"
expect_error "--top-k 1000 is larger than the vocabulary \([0-9]+ characters\)" "$work/bad.log" \
  "$ex/char_gpt" --generate-only --out "$work/gpt" --top-k 1000
expect_error "--temperature: 0 is out of range; allowed: a number greater than 0" "$work/bad.log" \
  "$ex/char_gpt" --generate-only --out "$work/gpt" --temperature 0
expect_error "--temperature: -1 is out of range; allowed: a number greater than 0" "$work/bad.log" \
  "$ex/char_gpt" --generate-only --out "$work/gpt" --temperature -1
expect_error "--generate-only: no checkpoint in $work/empty; train first" "$work/bad.log" \
  "$ex/char_gpt" --generate-only --out "$work/empty"
expect_error "--layers 3 differs from the stored run.s --layers 2" "$work/bad.log" \
  "$ex/char_gpt" --generate-only --out "$work/gpt" --layers 3
expect_error "load_fortunes: directory '$work/none' does not exist .*apt-get install fortunes" "$work/bad.log" \
  "${gpt[@]}" --steps 2 --data-dir "$work/none" --out "$work/y"
mkdir "$work/text"
printf 'ok\n%%\nbad \377 byte\n' > "$work/text/latin1"
expect_error "load_fortunes: '$work/text/latin1': not UTF-8 text: invalid byte sequence at byte offset 9" "$work/bad.log" \
  "${gpt[@]}" --steps 2 --data-dir "$work/text" --out "$work/y"
echo "real-data examples: all short runs ok"
