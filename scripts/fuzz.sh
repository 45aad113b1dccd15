#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/: clang-16, ASan and UBSan) in build-fuzz/ and runs each
# for SECONDS (default 60) from its committed seed corpus, fuzz/corpus/<target>/, with the
# dictionary fuzz/dict/<target>.dict (tokens and edge values of its input). A crash, an
# uncaught exception, a sanitizer report, a leak, an input running over 10 s or 2 GiB fails the
# target; libFuzzer saves that input as build-fuzz/findings/<target>/{crash,leak,timeout,oom}-*.
# Prints the executions each target ran, then `fuzz: N passed, M failed`; exits 1 on a failure.
# scripts/fuzz.sh [SECONDS] [TARGET...]  (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(path_fuzzer json_codec_fuzzer tar_fuzzer seccomp_profile_fuzzer recipe_json_fuzzer
           dns_message_fuzzer tls_hello_fuzzer http_head_fuzzer http1_framing_fuzzer)
fi

echo "== fuzzing (libFuzzer: ${#targets[@]} targets, ${seconds} s each) =="
build_dir=${HUTCH_FUZZ_BUILD_DIR:-build-fuzz}
cmake -S . -B "$build_dir" -DHUTCH_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 ${HUTCH_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j"$(nproc)" --target fuzzers

# The tar fuzzer extracts under $TMPDIR: a scratch dir of this run, on tmpfs when there is one.
scratch=$(mktemp -d "$([[ -d /dev/shm ]] && echo /dev/shm || echo /tmp)/hutch-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

passed=0
failed=0
for target in "${targets[@]}"; do
  work="$build_dir/fuzz-corpus/$target"  # new inputs go here, never into the committed seeds
  findings="$build_dir/findings/$target"
  log="$build_dir/fuzz-$target.log"
  rm -rf "$work"
  mkdir -p "$work" "$findings"
  dict=()
  [[ -f "fuzz/dict/$target.dict" ]] && dict=(-dict="fuzz/dict/$target.dict")
  status=0
  TMPDIR="$scratch" "$build_dir/fuzz/$target" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/" "${dict[@]}" \
    "$work" "fuzz/corpus/$target" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if ((status == 0)); then
    passed=$((passed + 1))
    echo "fuzz: $target passed: ${runs:-0} executions in ${seconds}s, corpus $(ls "$work" | wc -l) new inputs"
  else
    failed=$((failed + 1))
    echo "fuzz: $target FAILED (exit $status) after ${runs:-?} executions; log $log:"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written|tar_fuzzer:' "$log" | head -20 || true
  fi
done
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
