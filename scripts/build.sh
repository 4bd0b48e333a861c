#!/usr/bin/env bash
# Configures and builds neuromkl in build/ (Release). Set NEUROMKL_WERROR=ON to fail on warnings.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NEUROMKL_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNEUROMKL_WERROR="${NEUROMKL_WERROR:-OFF}" "$@"
cmake --build "$build" -j "${NEUROMKL_JOBS:-$(nproc)}"
