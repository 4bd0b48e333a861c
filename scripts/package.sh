#!/usr/bin/env bash
# Builds the Debian package of neuromkl (CLI, Python module, atlases, schemas, examples, docs) with CPack:
#   bash scripts/package.sh            -> build-package/neuromkl_<version>_<arch>.deb
#   sudo apt-get install ./build-package/neuromkl_*.deb
# Its dependencies are computed from the binaries by dpkg-shlibdeps (dpkg-dev). Release build without tests
# or benchmarks in its own folder (NEUROMKL_PACKAGE_DIR); NEUROMKL_COMPILER_LAUNCHER=ccache as for build.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NEUROMKL_PACKAGE_DIR:-$root/build-package}
"$root/scripts/install_deps.sh"
NEUROMKL_BUILD_DIR=$build "$root/scripts/build.sh" -DNEUROMKL_BUILD_TESTS=OFF -DNEUROMKL_BUILD_BENCH=OFF -DNEUROMKL_BUILD_PYTHON=ON
rm -f "$build"/neuromkl_*.deb
(cd "$build" && cpack -G DEB)
deb=$(ls "$build"/neuromkl_*.deb)
echo "neuromkl: $deb ($(du -h "$deb" | cut -f1))"
dpkg-deb --field "$deb" Depends Recommends
