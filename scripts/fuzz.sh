#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang + ASan + UBSan in build-fuzz/ and runs each
# for SECONDS (default 60) on its seed corpus (tests/fuzz/corpus/<target>/). New interesting inputs
# go to build-fuzz/corpus/<target>/, crashes to build-fuzz/artifacts/<target>/. Exit 1 on a finding.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: config table nifti_header npy
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(config table nifti_header npy)
build="${NEUROMKL_FUZZ_BUILD:-$here/build-fuzz}"
cxx="${NEUROMKL_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
cc="${NEUROMKL_FUZZ_CC:-$(command -v clang || command -v clang-14 || true)}"
if [ -z "$cxx" ] || [ -z "$cc" ]; then
  echo "fuzz.sh: clang not found (Debian: apt-get install clang-14 libclang-rt-14-dev, or scripts/install_deps.sh)" >&2
  exit 2
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
    -DNEUROMKL_FUZZ=ON -DNEUROMKL_BUILD_TESTS=OFF -DNEUROMKL_BUILD_BENCH=OFF -DNEUROMKL_BUILD_PYTHON=OFF -DNEUROMKL_WITH_MPI=OFF \
    "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j"${NEUROMKL_FUZZ_JOBS:-2}" --target $(printf 'fuzz_%s ' "${targets[@]}")
status=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  echo "== fuzz_$t: ${seconds} s"
  # UBSan findings abort (the build uses -fno-sanitize-recover); leaks are findings too.
  if ! UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" \
      "$build/corpus/$t" "$here/tests/fuzz/corpus/$t" 2>"$build/fuzz_$t.log"; then
    echo "fuzz_$t: FINDING (see $build/fuzz_$t.log and $build/artifacts/$t/)" >&2
    tail -40 "$build/fuzz_$t.log" >&2
    status=1
  fi
  grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$build/fuzz_$t.log" || true
done
rm -f /tmp/neuromkl_fuzz_*
exit $status
