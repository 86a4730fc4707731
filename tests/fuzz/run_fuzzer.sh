#!/usr/bin/env bash
# Runs one fuzz target for a bounded time: `run_fuzzer.sh FUZZER NAME SEEDS_DIR WORK_DIR`.
# The corpus is the generated seeds (real files), the checked-in corpus and the checked-in
# regressions (inputs that once crashed a parser: every one of them runs each time). New
# inputs go to a scratch directory under WORK_DIR; a crash leaves its input in
# WORK_DIR/findings/ (copy it to tests/fuzz/regressions/NAME/ with the fix) and fails.
# FUZZ_SECONDS (default 4) bounds the run; `make fuzz` sets it higher.
set -euo pipefail
fuzzer=$1 name=$2 seeds=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
seconds=${FUZZ_SECONDS:-4}
scratch="$work/corpus/$name"
mkdir -p "$scratch" "$work/findings" "$here/corpus/$name" "$here/regressions/$name"
corpora=("$scratch" "$here/regressions/$name" "$here/corpus/$name")
[[ -d $seeds/$name ]] && corpora+=("$seeds/$name")
# -rss_limit_mb: a parser that allocates what a length field asks for is a finding too.
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -max_len=65536 \
  -artifact_prefix="$work/findings/$name-" -print_final_stats=1 "${corpora[@]}"
