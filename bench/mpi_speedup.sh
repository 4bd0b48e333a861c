#!/usr/bin/env bash
# MPI speed-up of one 200-permutation study: `neuromkl batch` as one process and under
# mpirun with 1 and 2 ranks, wall times printed, results compared (they must be identical).
# Usage: bash bench/mpi_speedup.sh [build dir (default build)] [permutations (default 200)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
perms=${2:-200}
neuromkl=$build/pipeline/neuromkl
work=$(mktemp -d /tmp/neuromkl_mpi_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root)
"$neuromkl" simulate --out "$work/cohort" --subjects 60 --downsample 3 --seed 3 -q > /dev/null
cat > "$work/batch.json" <<JSON
{"name": "speedup", "studies": [{"file": "cohort/study.json", "name": "speedup", "overrides": {
  "cv": {"outer": {"k": 5}, "inner": {"k": 5}}, "learners": [{"name": "svm", "grid": {"c": [0.01, 0.1, 1, 10, 100]}}],
  "permutations": {"count": $perms}}}]}
JSON
run() {  # label, command...
  local label=$1; shift
  rm -rf "$work/results/speedup"
  local start end
  start=$(date +%s%N)
  "$@" > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  end=$(date +%s%N)
  printf '%-40s %6d ms\n' "$label" $(( (end - start) / 1000000 ))
  mv "$work/results/speedup" "$work/results_$label"
}
echo "one study, 5x5 nested CV, svm over 5 C values, $perms permutations ($(nproc) cores)"
run "1 process, 2 threads" "$neuromkl" batch "$work/batch.json" --threads 2
run "1 process, 1 thread" "$neuromkl" batch "$work/batch.json" --threads 1
run "mpirun -np 1, 1 thread" "${mpi[@]}" -np 1 "$neuromkl" batch "$work/batch.json" --threads 1
run "mpirun -np 2, 1 thread per rank" "${mpi[@]}" -np 2 "$neuromkl" batch "$work/batch.json" --threads 1
for r in "1 process, 1 thread" "mpirun -np 2, 1 thread per rank"; do
  if cmp -s "$work/results_1 process, 2 threads/studies/speedup/null_distribution.tsv" "$work/results_$r/studies/speedup/null_distribution.tsv"; then
    echo "null distribution identical to the 2-thread run: $r"
  else
    echo "NULL DISTRIBUTION DIFFERS: $r"; exit 1
  fi
done
