#!/usr/bin/env bash
# The stages of `make test` (and of the longer targets), each timed, ending with one summary of
# every suite: scripts/test_summary.py. Every stage runs even when an earlier one failed, so the
# summary shows all of it; the exit code is 1 if any stage failed.
#
#   scripts/ci_test.sh STAGE...      stages: format release long fuzz asan tsan kernels
#
# release  ctest on BUILD (the release build): every suite but the long ones (label long);
#          convergence_test runs alone (RUN_SERIAL), never beside the timing-sensitive suites.
# long     the long suites (convergence_long: the convergence cases make test leaves out;
#          multiproc_chaos_long; python_long).
# fuzz     libFuzzer on every decoder of untrusted bytes (seven targets: tests/fuzz) for
#          FUZZ_SECONDS each, from the committed seed corpora, one target per core at a time.
# asan     AddressSanitizer build (no LibTorch) and its ctest: the suites labelled asan (every
#          torch-free unit suite, the collectives, the conformance and multi-process suites).
# tsan     ThreadSanitizer build and its ctest: the suites labelled tsan (those whose code runs
#          threads: transports, collectives, rendezvous, engine, servers, trace, multi-process).
#          Both build at -O1 -g1 and size their largest cases down (cmake/Sanitize.cmake); their
#          suites run two at a time, as the release suites do (ASan 73 -> 40 s, TSan 104 -> 59 s).
# kernels  the numerically sensitive suites (torch, convergence, compress, sync, ps) under two
#          forced OpenBLAS kernel families besides the default (KERNELS): the cross-machine check
#          to run before changing any numerical bound (docs/testing.md).
#
# Environment: BUILD (build), JOBS (nproc), FUZZ_SECONDS (5), SANITIZE_LABELS (unset: asan for
# the asan stage and tsan for the tsan stage; empty: every suite),
# KERNELS (Haswell Sandybridge), RESULTS (BUILD/test-results).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-5}
KERNELS=${KERNELS:-Haswell Sandybridge}
RESULTS=$(realpath -m "${RESULTS:-$BUILD/test-results}")
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
failed=0

# run_stage NAME JUNIT COMMAND...: runs COMMAND, records its exit code and time (and the JUnit
# file of a ctest stage, or "" for others) in stages.tsv.
run_stage() {
  local name=$1 junit=$2 start code
  shift 2
  echo "== $name: $*"
  start=$(date +%s)
  "$@"
  code=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$code" "$(($(date +%s) - start))" "$junit" >>"$RESULTS/stages.tsv"
  [ "$code" -eq 0 ] || failed=1
}

ctest_in() {  # ctest_in DIR JUNIT [ctest args...]
  local dir=$1 junit=$2
  shift 2
  # A failed suite's whole output (ctest keeps 300 kB by default, the start of it; a failing
  # assertion in a chatty suite came after that), for the summary's digest of why it failed.
  (cd "$dir" && ctest --output-on-failure --test-output-size-failed 20000000 \
    --output-junit "$junit" "$@")
}

# build_sanitized KIND DIR LABELS: configures DIR with the sanitizer and builds the test binaries
# of the suites labelled LABELS only (every target when it is empty): the CLI and the MPI
# transport would take minutes to build for suites that do not run.
build_sanitized() {
  local kind=$1 dir=$2 labels=$3 targets=()
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADSYNC_SANITIZE="$kind" \
    -DGRADSYNC_BUILD_BENCHMARKS=OFF -DGRADSYNC_WITH_TORCH=OFF >/dev/null || return
  if [ -n "$labels" ]; then
    # Every test binary is named after its suite (gradsync_add_test).
    mapfile -t targets < <(cd "$dir" && ctest -N -L "$labels" |
      sed -n 's/^ *Test *#[0-9]*: //p')
    [ "${#targets[@]}" -gt 0 ] || { echo "no suites labelled $labels"; return 1; }
    targets=(--target "${targets[@]}")
  fi
  cmake --build "$dir" -j "$JOBS" "${targets[@]}"
}

sanitizer_stage() {  # sanitizer_stage address|thread
  local kind=$1 dir="$BUILD-${1:0:1}san"
  local labels=${SANITIZE_LABELS-${1:0:1}san}
  run_stage "$kind sanitizer build" "" build_sanitized "$kind" "$dir" "$labels"
  TSAN_OPTIONS="halt_on_error=1 suppressions=$ROOT/tests/tsan.supp" \
    run_stage "$kind sanitizer ctest" "$RESULTS/$kind.xml" \
    ctest_in "$dir" "$RESULTS/$kind.xml" -j 2 ${labels:+-L "$labels"}
}

for stage in "$@"; do
  case $stage in
    format) run_stage "format check" "" make --no-print-directory format-check ;;
    release)
      run_stage "release ctest" "$RESULTS/release.xml" \
        ctest_in "$BUILD" "$RESULTS/release.xml" -j 2 -LE long
      ;;
    long)
      run_stage "long ctest" "$RESULTS/long.xml" ctest_in "$BUILD" "$RESULTS/long.xml" -L long
      ;;
    fuzz) run_stage "fuzz (${FUZZ_SECONDS}s per target)" "" \
      make --no-print-directory fuzz FUZZ_SECONDS="$FUZZ_SECONDS" BUILD="$BUILD" ;;
    asan) sanitizer_stage address ;;
    tsan) sanitizer_stage thread ;;
    kernels)
      for kernel in $KERNELS; do
        OPENBLAS_CORETYPE=$kernel run_stage "ctest, OpenBLAS kernel $kernel" \
          "$RESULTS/kernel-$kernel.xml" ctest_in "$BUILD" "$RESULTS/kernel-$kernel.xml" \
          -R '^(torch_test|torch_test_rest|convergence_test|convergence_long|compress_test|guard_test|sync_test|ps_test)$'
      done
      ;;
    *)
      echo "ci_test.sh: unknown stage '$stage' (format release fuzz asan tsan kernels)" >&2
      exit 2
      ;;
  esac
done
scripts/test_summary.py "$RESULTS"
exit $failed
