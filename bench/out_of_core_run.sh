#!/usr/bin/env bash
# Features out of core, end to end: one simulated cohort and one study on features (kernels.representation "features",
# kernels.cache on, ENMKL-SVM with fixed parameters, 5 outer folds, no maps or model), run four times: reading the images
# into the cache entry and then hitting it, each without a memory limit and inside a memory cgroup whose limit is a
# fraction of the feature matrix (a cluster job with a small memory request). Under the limit the matrix cannot stay in
# memory: the mapping of the entry's features.npy is paged from the disk. Prints each run's kernel stage and nested-CV
# time, wall time, peak RSS (anonymous plus the mapping's resident pages, as the kernel counts them), the cgroup's peak
# usage against its limit, and whether the four runs' predictions.tsv are byte for byte the same.
# Needs root and a cgroup memory controller (v1 /sys/fs/cgroup/memory or v2 memory.max).
# Usage: bash bench/out_of_core_run.sh [build dir (default build)] [subjects (default 2000)] [limit as a fraction of the
#        features (default 0.5)] [downsample (default 1: 2 mm)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
subjects=${2:-2000}
fraction=${3:-0.5}
downsample=${4:-1}
neuromkl=$build/pipeline/neuromkl
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then
  group=/sys/fs/cgroup/memory/neuromkl_out_of_core_$$; limit_file=limit_in_bytes; peak_file=memory.max_usage_in_bytes
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers && [ -w /sys/fs/cgroup ]; then
  group=/sys/fs/cgroup/neuromkl_out_of_core_$$; limit_file=max; peak_file=memory.peak
else
  echo "needs root and a cgroup memory controller (v1 /sys/fs/cgroup/memory or v2 with memory in cgroup.controllers)" >&2; exit 1
fi
work=$(mktemp -d /var/tmp/neuromkl_out_of_core.XXXXXX)  # on disk, not a tmpfs: the point is paging from the disk
trap 'rmdir "$group" 2> /dev/null || true; rm -rf "$work"' EXIT
"$neuromkl" simulate --out "$work/cohort" --subjects "$subjects" --downsample "$downsample" --seed 7 -q > /dev/null
for cache in free limited; do
  cat > "$work/study_$cache.json" <<JSON
{"name": "out_of_core", "subjects": {"table": "cohort/participants.tsv"},
 "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
 "kernels": {"representation": "features", "cache": true, "memory_budget_mb": 1},
 "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}],
 "output": {"model": false, "weight_maps": false, "cache_dir": "$work/cache_$cache"}, "seed": 7}
JSON
done
echo "neuromkl run on features, $subjects simulated subjects x 116 regions (downsample $downsample, float32 images), enmkl_svm fixed, 5 outer folds; $(nproc) cores"
run() {  # run <name> <study> [limit bytes]
  local name=$1 study=$2 limit=${3:-}
  if [ -n "$limit" ]; then
    mkdir -p "$group"
    if [ "$limit_file" = max ]; then echo "$limit" > "$group/memory.max"; else echo "$limit" > "$group/memory.limit_in_bytes"; fi
    # The page cache of the cohort's images and of an earlier entry is charged elsewhere; this run's own pages here.
    (echo $BASHPID > "$group/cgroup.procs"; exec /usr/bin/time -f "%e %M" -o "$work/time_$name" "$neuromkl" run "$study" --out "$work/results_$name" -q) \
      > "$work/log_$name" 2>&1 || { tail -20 "$work/log_$name"; exit 1; }
    cat "$group/$peak_file" > "$work/peak_$name"
    rmdir "$group"
  else
    /usr/bin/time -f "%e %M" -o "$work/time_$name" "$neuromkl" run "$study" --out "$work/results_$name" -q > "$work/log_$name" 2>&1 ||
      { tail -20 "$work/log_$name"; exit 1; }
  fi
}
run read "$work/study_free.json"
run hit "$work/study_free.json"
features=$(python3 -c "import json; print(int(json.load(open('$work/results_read/results.json'))['kernels']['representation']['features_mib'] * 2**20))")
limit=$(python3 -c "print(int($features * $fraction))")
sync; echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || true  # the limited runs start from the disk
run read_limited "$work/study_limited.json" "$limit"
run hit_limited "$work/study_limited.json" "$limit"
python3 - "$work" "$limit" <<'PY'
import filecmp, json, os, sys
work, limit = sys.argv[1], int(sys.argv[2])
names = ("read", "hit", "read_limited", "hit_limited")
for name in names:
    wall, kib = open(f"{work}/time_{name}").read().split()
    r = json.load(open(f"{work}/results_{name}/results.json"))
    rep = r["kernels"]["representation"]
    peak = open(f"{work}/peak_{name}").read().strip() if os.path.exists(f"{work}/peak_{name}") else ""
    group = f", cgroup peak {int(peak) / 1e9:.2f} GB of a {limit / 1e9:.2f} GB limit" if peak else ""
    print(f"{name:12s}: kernel stage {r['seconds']['kernels']:6.1f} s ({r['kernels']['cache']}), nested CV {r['seconds']['nested_cv']:6.1f} s, wall {float(wall):6.1f} s, "
          f"peak RSS {int(kib) * 1024 / 1e9:5.2f} GB{group}; features {rep['features_mib'] / 1024:.2f} GiB, held: {rep['storage']['held'].split(':')[0]}")
same = all(filecmp.cmp(f"{work}/results_read/predictions.tsv", f"{work}/results_{n}/predictions.tsv", shallow=False) for n in names[1:])
print(f"predictions identical in all four runs: {same}")
PY
