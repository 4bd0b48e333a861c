#!/usr/bin/env bash
# A full `neuromkl run` on the kernel path at mid scale: one simulated cohort, ENMKL-SVM with fixed C = 1, mu = 0.5 over
# 5 outer folds, with the region weights, the final model and its export (no voxel maps, kernel cache off). Prints the
# kernel store's size (116 regions x n^2 x the precision's bytes), the run's peak RSS against it, the resident memory
# sampled every 0.2 s with the stage the log was in (each stage's peak), and each stage's time against the nested CV's.
# Usage: bash bench/kernel_run.sh [build dir (default build)] [subjects (default 2000)] [precision float64|float32 (default float64)] [downsample (default 3)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
subjects=${2:-2000}
precision=${3:-float64}
downsample=${4:-3}
neuromkl=$build/pipeline/neuromkl
work=$(mktemp -d /tmp/neuromkl_kernel_run.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$neuromkl" simulate --out "$work/cohort" --subjects "$subjects" --downsample "$downsample" --seed 7 -q > /dev/null
cat > "$work/study.json" <<EOF
{"name": "kernel_run", "subjects": {"table": "cohort/participants.tsv"},
 "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
 "kernels": {"representation": "kernel", "precision": "$precision", "cache": false},
 "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}],
 "output": {"model": true, "weight_maps": false, "save_kernels": false}, "seed": 7}
EOF
echo "neuromkl run, $subjects simulated subjects x 116 regions (downsample $downsample), $precision kernels, ENMKL-SVM fixed, 5 outer folds, weights, final model and export; $(nproc) cores"
start=$(date +%s.%N)
"$neuromkl" run "$work/study.json" --out "$work/results" -q > "$work/log" 2>&1 &
pid=$!
# Resident memory (VmRSS, and VmHWM, the kernel's own peak so far) every 0.2 s until the run ends, with the time.
while kill -0 "$pid" 2> /dev/null; do
  rss=$(awk '/^VmRSS:/ {r = $2} /^VmHWM:/ {h = $2} END {if (r) print r, h}' "/proc/$pid/status" 2> /dev/null || true)
  [ -n "$rss" ] && echo "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}') $rss" >> "$work/rss"
  sleep 0.2
done
wait "$pid" || { tail -20 "$work/log"; exit 1; }
python3 - "$work" "$subjects" "$precision" <<'PY'
import json, sys
work, n, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = json.load(open(f"{work}/results/results.json"))
regions = r["kernels"]["count"]
bytes_per = 8 if precision == "float64" else 4
store = regions * n * n * bytes_per
samples = [tuple(map(float, line.split())) for line in open(f"{work}/rss")]
peak = max(hwm for _, _, hwm in samples) * 1024  # up to the last sample
print(f"kernel store {store / 2**30:.2f} GiB ({regions} regions x {n}^2 x {bytes_per} B); "
      f"peak resident {peak / 1e9:.2f} GB = {peak / store:.2f}x the store (goal <= 1.3x)")
# The stages run one after the other in this order: a sample belongs to the stage whose time span holds it.
sec = r["seconds"]
order = [k for k in ("subjects", "kernels", "nested_cv", "weights", "final_model", "model_export") if k in sec]
bounds, t = [], 0.0
for k in order:
    bounds.append((k, t, t + sec[k]))
    t += sec[k]
peaks = {}
for when, rss, _ in samples:
    stage = next((k for k, a, b in bounds if a <= when < b), "outputs")
    peaks[stage] = max(peaks.get(stage, 0), rss * 1024)
for k in order + ["outputs"]:
    if k in peaks:
        print(f"  {k:13s} {sec.get(k, float('nan')):7.1f} s, peak resident {peaks[k] / 1e9:6.2f} GB ({peaks[k] / store:.2f}x)")
cv = sec["nested_cv"]
after = sum(sec.get(k, 0) for k in ("weights", "final_model", "model_export"))
print(f"  after the nested CV (weights, final model, export): {after:.1f} s = {after / cv:.2f}x its time (goal <= 1); total {sec['total']:.1f} s")
PY
