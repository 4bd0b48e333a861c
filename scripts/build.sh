#!/usr/bin/env bash
# Configures and builds neuromkl in build/ (Release). Set NEUROMKL_WERROR=ON to fail on warnings, and
# NEUROMKL_COMPILER_LAUNCHER=ccache to compile through a compiler cache (CI builds two clones).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NEUROMKL_BUILD_DIR:-$root/build}
launcher=()
if [ -n "${NEUROMKL_COMPILER_LAUNCHER:-}" ]; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER="$NEUROMKL_COMPILER_LAUNCHER" -DCMAKE_CXX_COMPILER_LAUNCHER="$NEUROMKL_COMPILER_LAUNCHER")
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNEUROMKL_WERROR="${NEUROMKL_WERROR:-OFF}" "${launcher[@]}" "$@"
cmake --build "$build" -j "${NEUROMKL_JOBS:-$(nproc)}"
