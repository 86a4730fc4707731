#!/usr/bin/env bash
# The GPU check's CPU rehearsal (scripts/gpu_check.sh --device cpu --tiny), called stage by stage
# as a device window runs it (docs/gpu.md): the build stage; the small stage killed right after
# its first training part (GPU_CHECK_KILL_AFTER), whose row must already be in the table beside
# parts said not to have run; the small stage again, which keeps the finished parts and runs the
# rest, parity and both round trips holding; the large stage. Exit 0 only when every call did
# what it should.
#   staged_rehearsal.sh SCRIPT BUILD OUT PYTHON
set -uo pipefail
script=$1 build=$2 out=$3 python=$4
rm -rf "$out"
check=(bash "$script" --device cpu --tiny --build "$build" --out "$out" --python "$python")
fail() { echo "gpu-check rehearsal: FAILED: $*"; exit 1; }

"${check[@]}" --stage build || fail "the build stage"

GPU_CHECK_KILL_AFTER=train-tiny_a "${check[@]}" --stage small
status=$?
((status == 137)) || fail "the call killed after train-tiny_a exited $status, not 137 (SIGKILL)"
[[ -f $out/parts/train-tiny_a.done && ! -e $out/parts/peer-tiny_a.done ]] ||
  fail "parts/ after the kill: $(ls "$out/parts" | tr '\n' ' ')"
grep -qE '^\| tiny_a \([0-9.]+M, seq 64\) \| [0-9,]+ \|' "$out/gpu_check.md" ||
  fail "the table written before the kill lacks tiny_a's row: $(cat "$out/gpu_check.md")"
grep -q "loss parity cpu vs cpu and the checkpoint round trip: not run yet" "$out/gpu_check.md" ||
  fail "the table does not say parity has not run: $(cat "$out/gpu_check.md")"

"${check[@]}" --stage small >"$out/resumed.log" 2>&1 || { cat "$out/resumed.log"; fail "the resumed small stage"; }
grep -q "train-tiny_a: finished by an earlier call" "$out/resumed.log" ||
  fail "the resumed call ran train-tiny_a again: $(cat "$out/resumed.log")"
for note in "loss parity cpu vs cpu, 20 steps float32" "checkpoint round trip at step 10: cpu -> cpu" \
            "FULL_SHARD x 2 rank(s) on cpu (cadre run) vs NO_SHARD x 1 rank(s) on cpu"; do
  grep -qF "$note" "$out/gpu_check.md" || fail "the table lacks '$note': $(cat "$out/gpu_check.md")"
done
grep -q "not run yet\|FAILED" "$out/gpu_check.md" && fail "parts missing after the small stage: $(cat "$out/gpu_check.md")"

"${check[@]}" --stage large || fail "the large stage"
echo "gpu-check rehearsal: passed"
