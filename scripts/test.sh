#!/usr/bin/env bash
# The whole test suite: install what is missing, build everything (tests included), run ctest
# (the Python package's pytest suite is the ctest test `python_pytest`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh" chromium  # chromium: the report is checked in a real browser
"$root/scripts/build.sh" -DNEUROMKL_BUILD_TESTS=ON -DNEUROMKL_BUILD_BENCH=ON -DNEUROMKL_BUILD_PYTHON=ON
cd "${NEUROMKL_BUILD_DIR:-$root/build}"
# The Python tests must be part of the run: fail if the package was not configured (pybind11/python3-dev missing).
if ! ctest -N -R '^python_pytest$' | grep -q 'Total Tests: 1'; then
  echo "neuromkl: the Python package was not built (is pybind11-dev / python3-dev installed?); python_pytest is missing" >&2
  exit 1
fi
ctest -j "${NEUROMKL_JOBS:-$(nproc)}" --output-on-failure
