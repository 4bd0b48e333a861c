#!/usr/bin/env bash
# The feature cache, end to end: one simulated cohort, one study on features (kernels.representation "features", svm C = 1
# fixed, 5 outer folds, no maps or model) run with kernels.cache off (the matrix in memory) and twice with it on. The first
# cached run reads the images straight into the cache entry's file, mapped; the second maps the entry. Prints each run's
# kernel stage time (results.json seconds.kernels: with the cache, the read pass and the write of the entry), nested-CV
# time, wall time, where the features were held, the entry's size on disk, and whether the runs' predictions.tsv are byte
# for byte the same. The run without the cache is the floor both are measured against, in the same process environment.
# Usage: bash bench/feature_cache_run.sh [build dir (default build)] [subjects (default 800)] [downsample (default 1: 2 mm)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
subjects=${2:-800}
downsample=${3:-1}
neuromkl=$build/pipeline/neuromkl
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
work=$(mktemp -d /tmp/neuromkl_feature_cache.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$neuromkl" simulate --out "$work/cohort" --subjects "$subjects" --downsample "$downsample" --seed 7 -q > /dev/null
cat > "$work/study.json" <<JSON
{"name": "cached", "subjects": {"table": "cohort/participants.tsv"},
 "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
 "kernels": {"representation": "features", "cache": CACHE},
 "learners": [{"name": "svm", "params": {"c": 1.0}}],
 "output": {"model": false, "weight_maps": false, "cache_dir": "$work/cache"}, "seed": 7}
JSON
echo "neuromkl run on features, $subjects simulated subjects x 116 regions (downsample $downsample, float32 images), svm fixed, 5 outer folds; $(nproc) cores"
sed 's/CACHE/false/' "$work/study.json" > "$work/study_memory.json"
sed -i 's/CACHE/true/' "$work/study.json"
for run in memory read hit; do
  study=$work/study.json
  [ "$run" = memory ] && study=$work/study_memory.json
  /usr/bin/time -f "%e %M" -o "$work/time_$run" "$neuromkl" run "$study" --out "$work/results_$run" -q > "$work/log_$run" 2>&1 ||
    { tail -20 "$work/log_$run"; exit 1; }
done
python3 - "$work" <<'PY'
import filecmp, json, os, sys
work = sys.argv[1]
seconds = {}
for run in ("memory", "read", "hit"):
    wall, kib = open(f"{work}/time_{run}").read().split()
    r = json.load(open(f"{work}/results_{run}/results.json"))
    seconds[run] = r["seconds"]["kernels"]
    rep = r['kernels']['representation']
    print(f"{run:6s}: kernel stage {seconds[run]:6.2f} s ({r['kernels']['cache']}), nested CV {r['seconds']['nested_cv']:6.2f} s, wall {float(wall):6.1f} s, "
          f"peak RSS {int(kib) * 1024 / 1e9:5.2f} GB, features {rep['features_mib']:.0f} MiB ({rep['storage']['values']}, {rep['storage']['held'].split(':')[0]})")
entry = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(f"{work}/cache") for f in fs)
same = all(filecmp.cmp(f'{work}/results_memory/predictions.tsv', f'{work}/results_{run}/predictions.tsv', shallow=False) for run in ("read", "hit"))
print(f"cache entry {entry / 2**20:.0f} MiB on disk; kernel stage read into the entry / in memory {seconds['read'] / seconds['memory']:.3f}, "
      f"hit / in memory {seconds['hit'] / seconds['memory']:.3f}; predictions identical: {same}")
PY
