#!/usr/bin/env bash
# The whole test suite: install what is missing, build everything (tests included), run ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh" chromium  # chromium: the report is checked in a real browser
"$root/scripts/build.sh" -DNEUROMKL_BUILD_TESTS=ON -DNEUROMKL_BUILD_BENCH=ON
cd "${NEUROMKL_BUILD_DIR:-$root/build}"
ctest -j "${NEUROMKL_JOBS:-$(nproc)}" --output-on-failure
