#!/usr/bin/env bash
# The feature cache, end to end: one simulated cohort, one study on features (kernels.representation "features", svm C = 1
# fixed, 5 outer folds, no maps or model) run twice with kernels.cache on. The first run reads the images into the feature
# matrix and stores it in the cache; the second reads it from the cache. Prints each run's kernel stage time (results.json
# seconds.kernels: for the first run the read pass and the write of the entry), wall time, the entry's size on disk, and
# whether the two runs' predictions.tsv are byte for byte the same. The first run's read is the floor the hit is measured
# against, in the same process environment.
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
 "kernels": {"representation": "features", "cache": true},
 "learners": [{"name": "svm", "params": {"c": 1.0}}],
 "output": {"model": false, "weight_maps": false, "cache_dir": "$work/cache"}, "seed": 7}
JSON
echo "neuromkl run on features, $subjects simulated subjects x 116 regions (downsample $downsample, float32 images), svm fixed, 5 outer folds; $(nproc) cores"
for run in read hit; do
  /usr/bin/time -f "%e %M" -o "$work/time_$run" "$neuromkl" run "$work/study.json" --out "$work/results_$run" -q > "$work/log_$run" 2>&1 ||
    { tail -20 "$work/log_$run"; exit 1; }
done
python3 - "$work" <<'PY'
import filecmp, json, os, sys
work = sys.argv[1]
seconds = {}
for run in ("read", "hit"):
    wall, kib = open(f"{work}/time_{run}").read().split()
    r = json.load(open(f"{work}/results_{run}/results.json"))
    seconds[run] = r["seconds"]["kernels"]
    print(f"{run:4s}: kernel stage {seconds[run]:6.2f} s ({r['kernels']['cache']}), wall {float(wall):6.1f} s, peak RSS {int(kib) * 1024 / 1e9:5.2f} GB, "
          f"features {r['kernels']['representation']['features_mib']:.0f} MiB ({r['kernels']['representation']['storage']['values']})")
entry = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(f"{work}/cache") for f in fs)
print(f"cache entry {entry / 2**20:.0f} MiB on disk; hit / read {seconds['hit'] / seconds['read']:.3f}; predictions identical: "
      f"{filecmp.cmp(f'{work}/results_read/predictions.tsv', f'{work}/results_hit/predictions.tsv', shallow=False)}")
PY
