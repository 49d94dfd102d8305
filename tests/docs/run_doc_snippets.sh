#!/bin/bash
# Docs that compile: every ```cpp block of README.md and docs/*.md is either a complete
# program (it has `int main`), which is built against the INSTALLED package
# (find_package(xgrad CONFIG)) and run (exit status 0 required), or it says so on its first
# line with `// fragment` and is skipped. A block that is neither fails the test.
#
# Usage: run_doc_snippets.sh <source dir> <xgrad build dir> <scratch dir>
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work/project" "$work/prefix"

docs=("$src/README.md")
shopt -s nullglob
docs+=("$src"/docs/*.md)

# Split the blocks into project/<doc>_<line>.cpp; list "name<TAB>doc:line<TAB>kind" in index.tsv.
for doc in "${docs[@]}"; do
  base=$(basename "$doc" .md | tr -c 'A-Za-z0-9\n' '_')
  awk -v dir="$work/project" -v base="$base" -v doc="${doc#$src/}" '
    /^```cpp[[:space:]]*$/ { inside = 1; start = NR; file = dir "/" base "_" NR ".cpp"; first = ""; main = 0; next }
    inside && /^```[[:space:]]*$/ {
      inside = 0; close(file)
      kind = (first ~ /^\/\/ fragment/) ? "fragment" : (main ? "program" : "bad")
      printf "%s_%d\t%s:%d\t%s\n", base, start, doc, start, kind >> (dir "/index.tsv")
      next
    }
    inside { if (first == "") first = $0; if ($0 ~ /int main[[:space:]]*\(/) main = 1; print > file }
  ' "$doc"
done
[[ -f "$work/project/index.tsv" ]] || { echo "no cpp blocks found in ${docs[*]}" >&2; exit 1; }

programs=() bad=0 fragments=0 skipped=0
have_distributed=$(sed -n 's/^XGRAD_HAVE_DISTRIBUTED:INTERNAL=//p' "$build/CMakeCache.txt")
while IFS=$'\t' read -r name where kind; do
  if [[ $kind == program && $have_distributed != ON ]] && grep -q '#include <xgrad/distributed/' "$work/project/$name.cpp"; then
    echo "skip $where: needs xgrad::distributed, not built (no MPI)"
    skipped=$((skipped + 1)); continue
  fi
  case $kind in
    program) programs+=("$name") ;;
    fragment) fragments=$((fragments + 1)); rm -f "$work/project/$name.cpp" ;;
    bad) echo "FAIL $where: a cpp block with no 'int main' that is not marked '// fragment' on its first line" >&2
         bad=$((bad + 1)) ;;
  esac
done < "$work/project/index.tsv"

{
  echo 'cmake_minimum_required(VERSION 3.22)'
  echo 'project(xgrad_doc_snippets LANGUAGES CXX)'
  echo 'set(CMAKE_CXX_STANDARD 17)'
  echo 'set(CMAKE_CXX_STANDARD_REQUIRED ON)'
  echo 'find_package(xgrad CONFIG REQUIRED)'
  for p in "${programs[@]}"; do
    echo "add_executable($p $p.cpp)"
    echo "target_link_libraries($p PRIVATE xgrad::xgrad)"
    # A program on xgrad/distributed/ links xgrad::distributed (run without mpirun: one rank).
    if grep -q '#include <xgrad/distributed/' "$work/project/$p.cpp"; then
      echo "target_link_libraries($p PRIVATE xgrad::distributed)"
    fi
    echo "set_target_properties($p PROPERTIES BUILD_RPATH \"\$<TARGET_FILE_DIR:xgrad::xgrad>\")"
  done
} > "$work/project/CMakeLists.txt"

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
gen=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build/CMakeCache.txt")
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cmake -S "$work/project" -B "$work/build" -G "${gen:-Unix Makefiles}" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
failed=0
for p in "${programs[@]}"; do
  where=$(awk -F'\t' -v n="$p" '$1 == n { print $2 }' "$work/project/index.tsv")
  if ! cmake --build "$work/build" --target "$p" > "$work/$p.build.log" 2>&1; then
    echo "FAIL $where: does not compile against the installed package:" >&2
    grep -m 20 -E 'error|Error' "$work/$p.build.log" >&2 || tail -20 "$work/$p.build.log" >&2
    failed=$((failed + 1)); continue
  fi
  if ! (cd "$work" && "$work/build/$p" > "$work/$p.out" 2>&1); then
    echo "FAIL $where: the program exits with an error:" >&2; tail -20 "$work/$p.out" >&2
    failed=$((failed + 1)); continue
  fi
  echo "ok   $where ($(wc -l < "$work/$p.out") lines of output)"
done
echo "doc snippets: ${#programs[@]} programs built and run, $failed failed; $fragments fragments; $bad unmarked blocks; $skipped skipped (no xgrad::distributed)"
[[ $failed -eq 0 && $bad -eq 0 ]]
