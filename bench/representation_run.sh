#!/usr/bin/env bash
# `neuromkl run` on kernels against the same study on features (kernels.representation), end to end on one simulated
# cohort: on "kernel"; on "features" with folds forming their own kernels (the default budget, an eighth of the
# memory); and on "features" with kernels.memory_budget_mb 0.01, so that no fold forms its kernels and the learners run
# on the voxels. Each run's wall time, peak RSS (/usr/bin/time), kernel stage time and the feature matrix's size, and
# how far each features run's out-of-fold decisions are from the kernel run's (max |difference| over max |decision|,
# per learner). Learners: svm (C = 1) and ENMKL-SVM (C = 1, mu = 0.5), fixed, 5 outer folds; no maps, no final model,
# kernel cache off.
# Usage: bash bench/representation_run.sh [build dir (default build)] [subjects (default 1200)] [downsample (default 3)] [modes (default "kernel formed features")]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
subjects=${2:-1200}
downsample=${3:-3}
modes=${4:-kernel formed features}
neuromkl=$build/pipeline/neuromkl
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
work=$(mktemp -d /tmp/neuromkl_representation.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$neuromkl" simulate --out "$work/cohort" --subjects "$subjects" --downsample "$downsample" --seed 7 -q > /dev/null
for mode in $modes; do
  case $mode in
    kernel) kernels='"representation": "kernel"' ;;
    formed) kernels='"representation": "features"' ;;
    features) kernels='"representation": "features", "memory_budget_mb": 0.01' ;;
    *) echo "unknown mode $mode (kernel, formed, features)" >&2; exit 2 ;;
  esac
  cat > "$work/$mode.json" <<EOF
{"name": "$mode", "subjects": {"table": "cohort/participants.tsv"},
 "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
 "kernels": {$kernels, "cache": false},
 "learners": [{"name": "svm", "params": {"c": 1.0}}, {"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}],
 "output": {"model": false, "weight_maps": false, "save_kernels": false}, "seed": 7}
EOF
done
echo "neuromkl run, $subjects simulated subjects x 116 regions (downsample $downsample), svm and ENMKL-SVM fixed, 5 outer folds; $(nproc) cores"
for mode in $modes; do
  /usr/bin/time -f "%e %M" -o "$work/time_$mode" "$neuromkl" run "$work/$mode.json" --out "$work/results_$mode" -q > "$work/log" 2>&1 ||
    { tail -20 "$work/log"; exit 1; }
done
python3 - "$work" $modes <<'PY'
import csv, json, sys
work, modes = sys.argv[1], sys.argv[2:]
def decisions(mode):
    out = {}
    with open(f"{work}/results_{mode}/predictions.tsv") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            out.setdefault(r["learner"], {})[r["subject"]] = float(r["decision"])
    return out
for mode in modes:
    wall, kib = open(f"{work}/time_{mode}").read().split()
    r = json.load(open(f"{work}/results_{mode}/results.json"))
    rep = r["kernels"]["representation"]
    size = f", features {rep['features_mib']:.0f} MiB" if "features_mib" in rep else ""
    print(f"{mode:9s}: wall {float(wall):7.1f} s, kernel stage {r['seconds']['kernels']:6.1f} s, peak RSS {int(kib) * 1024 / 1e9:5.2f} GB{size}")
if "kernel" in modes:
    ref = decisions("kernel")
    for mode in modes:
        if mode == "kernel":
            continue
        other = decisions(mode)
        for learner, values in ref.items():
            scale = max(abs(v) for v in values.values())
            diff = max(abs(v - other[learner][s]) for s, v in values.items())
            print(f"decisions {mode} vs kernel, {learner}: {diff / scale:.2e} of the largest")
PY
