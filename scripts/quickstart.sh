#!/usr/bin/env bash
# The main job: install what is missing, build, and run the example study that ships in examples/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" -DNEUROMKL_BUILD_TESTS=OFF -DNEUROMKL_BUILD_BENCH=OFF
study="$root/examples/wager2008_emoreg/study.json"
"$root/build/pipeline/neuromkl" validate "$study"
"$root/build/pipeline/neuromkl" run "$study" --force
