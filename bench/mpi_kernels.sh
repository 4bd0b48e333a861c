#!/usr/bin/env bash
# The distributed kernel stage of `neuromkl run`: one study's kernel stage as one process
# and under mpirun with 2 and 3 ranks (3 oversubscribed on a 2-core machine), the per-rank budget
# (kernels.memory_budget_mb) set below the subject data so that the ranks share the decoding and
# the products. Prints each run's kernel stage wall time (results.json seconds: kernels, and its
# read and product parts) and compares the kernels with the single-process ones (max |difference|
# relative to the kernel's largest entry: float32 rounding, see docs/batch.md).
# Usage: bash bench/mpi_kernels.sh [build dir (default build)] [subjects (default 360)] [downsample (default 2)] [budget MiB (default 8)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
subjects=${2:-360}
downsample=${3:-2}
neuromkl=$build/pipeline/neuromkl
work=$(mktemp -d /tmp/neuromkl_mpi_kernels.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root)
"$neuromkl" simulate --out "$work/cohort" --subjects "$subjects" --downsample "$downsample" --seed 3 -q > /dev/null
# The learner is a single quick fit: the kernel stage is what is timed. The per-rank budget
# (default 8 MiB) must be below the subject data (subjects x voxels x 4 bytes; the logs print it).
budget=${4:-8}
python3 - "$work/cohort/study.json" "$budget" <<'PY'
import json, sys
p = sys.argv[1]
s = json.load(open(p))
s["learners"] = [{"name": "kelm", "params": {"c": 1}}]
s["cv"] = {"outer": {"k": 2}, "inner": {"k": 2}}
s["kernels"] = {"cache": False, "memory_budget_mb": float(sys.argv[2])}
json.dump(s, open(p, "w"))
PY
echo "kernel stage of $subjects subjects (simulated, downsample $downsample), per-rank budget $budget MiB; $(nproc) cores"
run() {  # label, output name, threads per process, command...
  local label=$1 name=$2 threads=$3; shift 3
  local out="$work/results_$name"
  "$@" run "$work/cohort/study.json" --out "$out" --threads "$threads" > "$work/log_$name" 2>&1 || { tail -20 "$work/log_$name"; exit 1; }
  [ "$name" = 1 ] && { grep -oE "[0-9.]+ MiB of subject data exceed[^;]*" "$work/log_$name" | head -1 || true; }
  python3 - "$label" "$out/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
s = r["seconds"]
d = r["kernels"].get("distributed", {})
print(f"{sys.argv[1]:<40} kernel stage {s['kernels']:6.2f} s (read {s['kernels_read_images']:6.2f} s, products+gather {s['kernels_products']:6.2f} s)"
      f"  ranks {d.get('ranks', 1)}")
PY
}
# One thread per rank under mpirun (the ranks share this machine's cores).
run "1 process, 2 threads (out of core)" 1 2 "$neuromkl"
run "1 process, 1 thread (out of core)" 1t 1 "$neuromkl"
run "mpirun -np 2, 1 thread each" 2 1 "${mpi[@]}" -np 2 "$neuromkl"
run "mpirun -np 3, 1 thread each (oversub.)" 3 1 "${mpi[@]}" -np 3 "$neuromkl"
# Kernels: every run's raw kernels (results/kernels/*.npy) against the single-process ones.
python3 - "$work" <<'PY'
import glob, os, struct, sys, array, ast
work = sys.argv[1]
def npy(f):
    b = open(f, "rb").read()
    hl = int.from_bytes(b[8:10], "little")
    a = array.array("d"); a.frombytes(b[10 + hl:]); return a
ref = {os.path.basename(f): npy(f) for f in glob.glob(f"{work}/results_1/kernels/*.npy")}
if not ref:
    print("(no raw kernels in the outputs to compare)"); sys.exit(0)
for ranks in (2, 3):
    worst = 0.0
    for name, a in ref.items():
        b = npy(f"{work}/results_{ranks}/kernels/{name}")
        top = max(abs(x) for x in a) or 1.0
        worst = max(worst, max(abs(x - y) for x, y in zip(a, b)) / top)
    print(f"kernels of {ranks} ranks vs 1 process: max |difference| / max |K| = {worst:.2e}")
PY
for ranks in 2 3; do
  if cmp -s "$work/results_1/predictions.tsv" "$work/results_$ranks/predictions.tsv"; then
    echo "predictions.tsv identical: $ranks ranks"
  else
    python3 - "$work/results_1/predictions.tsv" "$work/results_$ranks/predictions.tsv" "$ranks" <<'PY'
import sys
a = [l.split("\t") for l in open(sys.argv[1]).read().split("\n")]
b = [l.split("\t") for l in open(sys.argv[2]).read().split("\n")]
worst, text = 0.0, 0
for x, y in zip(a, b):
    for u, v in zip(x, y):
        if u == v: continue
        try: worst = max(worst, abs(float(u) - float(v)) / max(abs(float(u)), abs(float(v)), 1e-300))
        except ValueError: text += 1
print(f"predictions.tsv, {sys.argv[3]} ranks vs 1 process: max relative difference {worst:.1e}, differing text cells {text}")
PY
  fi
done
