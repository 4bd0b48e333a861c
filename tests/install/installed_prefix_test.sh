#!/usr/bin/env bash
# An installation works on its own: `cmake --install` into a fresh temporary prefix, the prefix moved to
# another folder (nothing may depend on where it was installed), then the shipped example study run from the
# installed files with a clean environment (no NEUROMKL_DATA_DIR, no PYTHONPATH into the repository) and the
# working directory outside both trees. Every file access of the runs is traced (strace -f -e trace=file): a
# single path into the source tree or the build tree fails the test, so the binary cannot fall back to the
# build-time source path unnoticed. The Python module, when built, is checked the same way.
#
# Usage: installed_prefix_test.sh BUILD_DIR SOURCE_DIR [PYTHON]
set -euo pipefail
build=$(cd "$1" && pwd -P)
source=$(cd "$2" && pwd -P)
python=${3:-}
if ! command -v strace > /dev/null; then
  echo "FAIL: strace is needed to prove that no file of the source or build tree is read (bash scripts/install_deps.sh installs it)" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/neuromkl-install-test.XXXXXX")
work=$(cd "$work" && pwd -P)
trap 'rm -rf "$work"' EXIT
for tree in "$source" "$build"; do
  case "$work/" in "$tree"/*) echo "FAIL: the temporary folder $work lies inside $tree" >&2; exit 1 ;; esac
done

cmake --install "$build" --prefix "$work/installed" > "$work/install.log"
mv "$work/installed" "$work/prefix"
prefix=$work/prefix
echo "installed: $(du -sh "$prefix" | cut -f1) in $prefix ($(find "$prefix" -type f | wc -l) files)"
cd "$work"
# ASAN_OPTIONS matters only to a sanitizer build: LeakSanitizer cannot run under strace (ptrace) and would end the run.
clean_env=(env -i PATH=/usr/bin:/bin HOME="$work" LANG=C.UTF-8 OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0)
traced() {  # traced NAME COMMAND...: runs COMMAND under strace, file accesses into $work/trace.NAME
  local name=$1
  shift
  strace -f -qq -e trace=file -o "$work/trace.$name" "$@"
}

# 1. The CLI: --version says where the data are; they must be the ones beside the installed binary.
traced version "${clean_env[@]}" "$prefix/bin/neuromkl" --version > version.txt
grep -qF "data $prefix/share/neuromkl (beside the binary $prefix/bin/neuromkl)" version.txt ||
  { echo "FAIL: the installed binary does not read its data beside itself:" >&2; cat version.txt >&2; exit 1; }

# 2. The example study from the installed files; nothing may be written beside it (an installed example is data):
# the results go to --out, the kernel cache to --cache-dir.
example=$prefix/share/neuromkl/examples/wager2008_emoreg
before=$(find "$prefix" | sort | md5sum)
traced run "${clean_env[@]}" "$prefix/bin/neuromkl" run "$example/study.json" --out "$work/results" --cache-dir "$work/cache" -q
for f in results.json report.html metrics.tsv predictions.tsv regions_enmkl_krr.tsv regions_krr.tsv model/model.json; do
  [ -s "$work/results/$f" ] || { echo "FAIL: the installed example wrote no $f" >&2; ls -R "$work/results" >&2; exit 1; }
done
ls "$work"/results/weights/*desc-EnmklKrrMean_weights.nii.gz > /dev/null || { echo "FAIL: no mean weight map" >&2; exit 1; }
grep -q '"regions": \[' "$work/results/results.json" || { echo "FAIL: results.json lists no regions" >&2; exit 1; }
[ "$(find "$prefix" | sort | md5sum)" = "$before" ] || { echo "FAIL: the run wrote into the installation" >&2; exit 1; }
[ -d "$work/cache" ] || { echo "FAIL: no kernel cache in --cache-dir" >&2; exit 1; }
# The built-in atlas (and the report's template) were read from the installation.
grep -qF "$prefix/share/neuromkl/atlases/aal/ROI_MNI_V4.nii.gz" "$work/trace.run" ||
  { echo "FAIL: the run did not read the installed AAL atlas" >&2; exit 1; }

# 3. The Python module, when it was built and installed: imported from the prefix, it runs the example (no
# permutations) with the installed atlas.
pydir=$prefix/lib/python3/dist-packages
if [ -n "$python" ] && [ -d "$pydir/neuromkl" ]; then
  code="
import json, neuromkl
assert neuromkl.__file__.startswith('$pydir/'), neuromkl.__file__
study = json.load(open('$example/study.json'))
study['permutations'] = {'count': 0}
study['output'] = {'cache_dir': '$work/python_cache'}
res = neuromkl.run_study(study, base_dir='$example', out_dir='$work/python_results')
assert len(res.regions['enmkl_krr']) > 100, len(res.regions['enmkl_krr'])
print('python: ok', neuromkl.__version__)
"
  traced python "${clean_env[@]}" PYTHONPATH="$pydir" "$python" -c "$code"
  [ -s "$work/python_results/results.json" ] || { echo "FAIL: the installed Python module wrote no results" >&2; exit 1; }
  [ "$(find "$prefix" -not -name __pycache__ -not -path '*/__pycache__/*' | sort | md5sum)" = "$before" ] ||
    { echo "FAIL: the Python run wrote into the installation" >&2; exit 1; }
  grep -qF "$prefix/share/neuromkl/atlases/aal/ROI_MNI_V4.nii.gz" "$work/trace.python" ||
    { echo "FAIL: the Python module did not read the installed AAL atlas" >&2; exit 1; }
elif [ -n "$python" ]; then
  echo "FAIL: the Python module was built but not installed into $pydir" >&2
  exit 1
fi

# 4. No file access into the source or the build tree, by any process of any run.
if grep -E "\"($source|$build)(/|\")" "$work"/trace.* > "$work/leaks.txt"; then
  echo "FAIL: the installed programs touched the source or build tree:" >&2
  head -20 "$work/leaks.txt" >&2
  exit 1
fi
echo "PASS: the installation in $prefix ran the example without the source tree ($source) or the build tree ($build)"
