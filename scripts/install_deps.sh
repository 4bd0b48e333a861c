#!/usr/bin/env bash
# Installs the Debian packages neuromkl needs (only the missing ones). Needs root or sudo.
set -euo pipefail
# dpkg-dev: dpkg-shlibdeps computes the Debian package's dependencies (scripts/package.sh); strace: the installation
# test proves that an installed neuromkl reads nothing from the source or build tree.
packages=(build-essential cmake ninja-build pkg-config dpkg-dev strace
  libinsighttoolkit5-dev libeigen3-dev nlohmann-json3-dev libtbb-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libspdlog-dev libfmt-dev
  libopenblas-dev liblapacke-dev zlib1g-dev libxxhash-dev libsvm-dev libopenmpi-dev openmpi-bin
  python3-dev pybind11-dev python3-numpy python3-setuptools python3-sklearn python3-pandas python3-pytest
  python3-nibabel python3-venv python3-wheel python3-pip  # nibabel: images in Python; venv, wheel, pip: `pip install .`
  clang-14 libclang-rt-14-dev)  # clang + libFuzzer: scripts/fuzz.sh and the fuzz_smoke test (docs/sanitizers.md)
# Optional extras for some checks (benchmark peers, browser rendering) are added by their scripts.
packages+=("$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "neuromkl: all Debian packages present"
  exit 0
fi
echo "neuromkl: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
