#!/usr/bin/env bash
# One kernel choice of the `kernels` label (tests/kernels/CMakeLists.txt): runs the parity and
# equivalence tests under one setting of the variables that pick CPU kernels, set on this
# command line only. Prints each test's worst ratio or difference lines and a closing summary.
#
# Usage: run_choice.sh SETTING CPU_FLAGS EXCLUDED -- BINARY FILTER [BINARY FILTER ...]
#   SETTING    NAME=VALUE, or NAME= to run with NAME unset (a fresh machine's default), then
#              optionally +NAME=VALUE... : the other libraries' choices of the same machine, set
#              with it (an AVX2 machine: OpenBLAS's Haswell kernels, oneDNN and ATen at AVX2).
#              The first setting decides whether the choice applies here and whether it is
#              the environment's own (a CPU that detects Haswell's kernels is an AVX2 machine).
#   CPU_FLAGS  comma-separated /proc/cpuinfo flags the choice needs, or "-": where one is
#              missing the choice is not applicable (OpenBLAS does not check: a SkylakeX kernel
#              dies of SIGILL on an AVX2-only CPU) and exits 77, which ctest reports as not run.
#   EXCLUDED   gtest patterns (a:b) this choice leaves out, or "-" (the CMakeLists says why).
set -uo pipefail
usage="usage: run_choice.sh SETTING CPU_FLAGS EXCLUDED -- BINARY FILTER ..."
setting=${1:?$usage}
needs=${2:?$usage}
excluded=${3:?$usage}
[[ ${4:-} == "--" ]] || { echo "run_choice.sh: expected -- after EXCLUDED; $usage" >&2; exit 2; }
shift 4
(( $# > 0 && $# % 2 == 0 )) || { echo "run_choice.sh: BINARY FILTER pairs expected" >&2; exit 2; }

primary=${setting%%+*}
with=()
[[ $setting == *+* ]] && IFS=+ read -ra with <<<"${setting#*+}"
name=${primary%%=*}
value=${primary#*=}
if [[ $needs != "-" ]]; then
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for f in ${needs//,/ }; do
    if [[ $flags != *" $f "* ]]; then
      echo "kernels: $setting is not applicable on this CPU (no $f): not run"
      exit 77
    fi
  done
fi

# A setting the environment already has is what the rest of the suite runs under (the same
# tests, unlabelled): running them again would repeat that, not add a kernel choice.
if [[ -n $value && ${!name-} == "$value" ]] ||
   [[ -z $value && -z ${!name+set} && ( $name != OPENBLAS_CORETYPE || -z ${OPENBLAS_L2_SIZE+set} ) ]]; then
  echo "kernels: $setting is this environment's own, which the rest of the suite runs under: not run again"
  exit 77
fi

# The environment of every test process (and the processes they start): the setting alone
# changed. Unsetting OPENBLAS_CORETYPE unsets OPENBLAS_L2_SIZE with it: a fresh machine has neither.
run_env=(env)
if [[ -z $value ]]; then
  run_env+=(-u "$name")
  [[ $name == OPENBLAS_CORETYPE ]] && run_env+=(-u OPENBLAS_L2_SIZE)
else
  run_env+=("$name=$value")
fi
# Which kernel OpenBLAS really loads under an environment (its own words on stderr).
openblas_core() {
  "$@" OPENBLAS_VERBOSE=2 /usr/bin/python3 -c "import ctypes; ctypes.CDLL('libopenblas.so.0')" 2>&1 |
    grep -m1 -i 'core' || true
}
# The float32 kernels of an OpenBLAS 0.3.21 core, by name: a core that takes another's rounds as
# that one does. Zen takes Haswell's sgemm/sgemv/sdot/saxpy kernels and sgemm blocking (P, Q);
# they differ in copy and beta routines, which move or scale values exactly, and in how threads
# split M and N, never K. (Cooperlake is not SkylakeX's: its sgemm Q, the K block, is 320, not 448.)
float32_kernels() {
  local core=${1,,}
  core=${core#core: }
  case $core in
    zen) echo haswell ;;
    *) echo "$core" ;;
  esac
}
if [[ $name == OPENBLAS_CORETYPE ]]; then
  core=$(openblas_core "${run_env[@]}")
  echo "kernels: $setting: OpenBLAS says: ${core:-nothing}"
  if [[ -n $value && $core != *"not found"* ]]; then
    own=$(openblas_core env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
    if [[ -n $core && $(float32_kernels "$core") == $(float32_kernels "$own") ]]; then
      echo "kernels: $setting has the float32 kernels of '$own', which this CPU runs unset" \
        "(the rest of the suite): not run again"
      exit 77
    fi
  fi
  if [[ $core == *"not found"* ]]; then
    # This OpenBLAS cannot force that kernel (0.3.21's list of names stops short of Cooperlake)
    # and falls back to the one it detects: the choice is what the CPU runs unset, or not to be had.
    detected=$(openblas_core env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
    if [[ ${detected,,} != "core: ${value,,}" ]]; then
      echo "kernels: $setting is not applicable: this OpenBLAS cannot force it, and detects '$detected' here: not run"
      exit 77
    fi
    echo "kernels: $setting: this OpenBLAS cannot force it but detects it on this CPU: run with OPENBLAS_CORETYPE unset"
    run_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
  fi
fi

run_env+=("${with[@]}")

failed=()
while (( $# )); do
  binary=$1 filter=$2
  shift 2
  [[ $excluded != "-" ]] && filter="$filter-$excluded"
  echo "== kernels: $setting: $(basename "$binary") --gtest_filter=$filter"
  log=$(mktemp)
  "${run_env[@]}" "$binary" --gtest_filter="$filter" --gtest_color=no >"$log" 2>&1
  rc=$?
  # The figures each test prints about its margin, and gtest's verdicts.
  grep -E 'worst ratio|worst Cadre|\[order spread\]|max relative|^\[  (PASSED|FAILED) |^\[       OK |^\[  FAILED  \]|Failure|Expected|actual' "$log"
  # A filter that matches no test passes nothing: it fails here.
  if (( rc != 0 )) || ! grep -qE '^\[  PASSED  \] [1-9][0-9]* test' "$log"; then
    failed+=("$(basename "$binary") $filter")
    echo "-- kernels: $setting: $(basename "$binary") failed (exit $rc); its whole output:"
    cat "$log"
  fi
  rm -f "$log"
done
if (( ${#failed[@]} )); then
  printf 'kernels: %s: FAILED: %s\n' "$setting" "${failed[@]}"
  exit 1
fi
echo "kernels: $setting: every test passed"
