#!/usr/bin/env bash
# `neuromkl run` with float64 kernels against the compact float32 store (kernels.precision), end to end
# on one simulated cohort, alternating the two: each run's wall time, peak RSS (/usr/bin/time) and its kernel
# stage's time, the ratio float32 / float64 of the peaks, and how far float32's out-of-fold decisions are from
# float64's (max |difference| over max |decision|). The learner is ENMKL-SVM with fixed C = 1, mu = 0.5 over 5
# outer folds; no maps, no final model, kernel cache off, so the kernel stage runs each time.
# Usage: bash bench/precision_run.sh [build dir (default build)] [subjects (default 1200)] [downsample (default 3)] [repeats (default 1)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
subjects=${2:-1200}
downsample=${3:-3}
repeats=${4:-1}
neuromkl=$build/pipeline/neuromkl
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
work=$(mktemp -d /tmp/neuromkl_precision.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$neuromkl" simulate --out "$work/cohort" --subjects "$subjects" --downsample "$downsample" --seed 7 -q > /dev/null
for precision in float64 float32; do
  cat > "$work/$precision.json" <<EOF
{"name": "$precision", "subjects": {"table": "cohort/participants.tsv"},
 "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
 "kernels": {"precision": "$precision", "cache": false},
 "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}],
 "output": {"model": false, "weight_maps": false, "save_kernels": false}, "seed": 7}
EOF
done
echo "neuromkl run, $subjects simulated subjects x 116 regions (downsample $downsample), ENMKL-SVM, 5 outer folds; $(nproc) cores"
for ((i = 1; i <= repeats; ++i)); do
  for precision in float64 float32; do
    out="$work/results_${precision}_$i"
    /usr/bin/time -f "%e %M" -o "$work/time_${precision}_$i" "$neuromkl" run "$work/$precision.json" --out "$out" -q > "$work/log" 2>&1 ||
      { tail -20 "$work/log"; exit 1; }
  done
done
python3 - "$work" "$repeats" <<'PY'
import csv, json, sys
work, repeats = sys.argv[1], int(sys.argv[2])
def decisions(path):
    with open(path) as f:
        return [float(r["decision"]) for r in csv.DictReader(f, delimiter="\t")]
peak = {}
for i in range(1, repeats + 1):
    for p in ("float64", "float32"):
        wall, kib = open(f"{work}/time_{p}_{i}").read().split()
        r = json.load(open(f"{work}/results_{p}_{i}/results.json"))
        gb = int(kib) * 1024 / 1e9
        peak.setdefault(p, []).append(gb)
        store = r["kernels"].get("precision", {}).get("store_mib")
        extra = f", store {store / 1024:.2f} GiB" if store else ""
        print(f"run {i} {p}: wall {float(wall):6.1f} s, kernel stage {r['seconds']['kernels']:5.1f} s, peak RSS {gb:5.2f} GB{extra}")
a = decisions(f"{work}/results_float64_1/predictions.tsv")
b = decisions(f"{work}/results_float32_1/predictions.tsv")
scale = max(abs(x) for x in a)
print(f"peak RSS float32 / float64: {min(peak['float32']) / min(peak['float64']):.2f}x (smallest of each)")
print(f"decisions: max |float32 - float64| / max |float64| = {max(abs(x - y) for x, y in zip(a, b)) / scale:.2e}")
PY
