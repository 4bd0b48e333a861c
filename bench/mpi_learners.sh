#!/usr/bin/env bash
# Kernels that do not fit one rank: one study as one process and under mpirun with 2 and 3 ranks whose
# per-rank budget (kernels.memory_budget_mb) is below the study's kernels, so that kernel k stays on rank k mod P and
# every computation that reads it runs there (docs/batch.md, "Kernels that do not fit one rank"). Prints, per run,
# the wall time of the kernel stage and of the nested CV, each process's peak resident memory (GNU time), the
# requests rank 0 sent to the ranks and their time, and the largest difference of the predictions from the
# one-process run's. The one-process run uses the same budget (its kernel stage then reads out of core).
# Design "sources": a study of three sources (the images, a tabular clinical score, 20-node connectivity), whose
# kernels rank 0 forms and hands out to the ranks (docs/batch.md).
# Usage: bash bench/mpi_learners.sh [build dir (default build)] [subjects (default 600)] [downsample (default 3)]
#        [budget MiB (default 64)] [learner (default enmkl_svm)] [design: images (default) or sources]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
subjects=${2:-600}
downsample=${3:-3}
budget=${4:-64}
learner=${5:-enmkl_svm}
design=${6:-images}
neuromkl=$build/pipeline/neuromkl
work=$(mktemp -d /tmp/neuromkl_mpi_learners.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root)
extra=()
[ "$design" = sources ] && extra=(--clinical-effect 0.8 --connectivity 20 --connectivity-signal node03)
"$neuromkl" simulate --out "$work/cohort" --subjects "$subjects" --downsample "$downsample" --seed 5 -q "${extra[@]}" > /dev/null
python3 - "$work/cohort/study.json" "$budget" "$learner" "$design" <<'PY'
import json, sys
p = sys.argv[1]
s = json.load(open(p))
params = {"enmkl_svm": {"c": 1, "mu": 0.5}, "enmkl_krr": {"lambda": 1, "mu": 0.5}, "simplemkl": {"c": 1}, "kelm": {"c": 1}}[sys.argv[3]]
s["learners"] = [{"name": sys.argv[3], "params": params}]
s["cv"] = {"outer": {"k": 5}, "inner": {"k": 3}}
s["kernels"] = {"cache": False, "memory_budget_mb": float(sys.argv[2])}
if sys.argv[4] == "sources":
    s["kernels"]["sources"] = [{"name": "gm", "kind": "images"},
                               {"name": "clin", "kind": "tabular", "tabular": {"table": s["subjects"]["table"], "groups": {"clinical": ["clinical"]}}},
                               {"name": "fc", "kind": "connectivity", "connectivity": {"column": "connectome", "kernels": "node",
                                                                                        "nodes": p.replace("study.json", "nodes.tsv")}}]
s["output"] = {"weight_maps": False, "model": False, "save_kernels": False}
json.dump(s, open(p, "w"))
PY
count=116
[ "$design" = sources ] && count=137
kernels_mib=$(python3 -c "print(f'{$count * $subjects * $subjects * 8 / 2**20:.0f}')")
echo "$learner, $subjects simulated subjects (downsample $downsample), $count kernels ($design) = $kernels_mib MiB in float64;" \
  "per-rank budget $budget MiB; outer 5 folds, fixed parameters; $(nproc) cores"
run() {  # label, name, threads per process, command...
  local label=$1 name=$2 threads=$3; shift 3
  local out="$work/results_$name"
  "$@" /usr/bin/time -f "peak RSS %M KiB" "$neuromkl" run "$work/cohort/study.json" --out "$out" --threads "$threads" > "$work/log_$name" 2>&1 ||
    { tail -20 "$work/log_$name"; exit 1; }
  python3 - "$label" "$out/results.json" "$work/log_$name" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[2]))
log = open(sys.argv[3]).read()
s = r["seconds"]
rss = [int(x) / 1024 for x in re.findall(r"peak RSS (\d+) KiB", log)]
req = re.search(r"(\d+) requests to the (\d+) ranks holding the kernels took ([0-9.]+) s", log)
held = r["kernels"].get("distributed", {}).get("kernels_held_by_ranks", False)
print(f"{sys.argv[1]:<34} kernels {s['kernels']:6.2f} s, nested CV {s['nested_cv']:6.2f} s; peak RSS per process "
      + ", ".join(f"{m:.0f}" for m in sorted(rss, reverse=True)) + " MiB"
      + (f"; {req.group(1)} requests, {req.group(3)} s" if req else "") + ("" if held or "mpirun" not in sys.argv[1] else " (kernels gathered)"))
PY
}
run "1 process, 2 threads" 1 2
run "mpirun -np 2, 1 thread each" 2 1 "${mpi[@]}" -np 2
run "mpirun -np 3, 1 thread each (oversub.)" 3 1 "${mpi[@]}" -np 3
for ranks in 2 3; do
  python3 - "$work/results_1/predictions.tsv" "$work/results_$ranks/predictions.tsv" "$ranks" <<'PY'
import sys
a = [l.split("\t") for l in open(sys.argv[1]).read().split("\n")]
b = [l.split("\t") for l in open(sys.argv[2]).read().split("\n")]
header = a[0]
worst, text = 0.0, 0
for x, y in zip(a[1:], b[1:]):
    for h, u, v in zip(header, x, y):
        if u == v: continue
        try: worst = max(worst, abs(float(u) - float(v)) / max(abs(float(u)), abs(float(v)), 1e-300))
        except ValueError: text += 1
print(f"predictions.tsv, {sys.argv[3]} ranks vs 1 process: max relative difference {worst:.1e}, differing text cells {text}")
PY
done
