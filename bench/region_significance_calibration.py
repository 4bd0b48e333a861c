#!/usr/bin/env python3
"""Calibration of the region and source permutation p-values (docs/statistics.md) on simulated cohorts.

Null cohorts (no signal anywhere): the fraction of cohorts with any region (or source) at p_FWE <= 0.05 must be
within binomial error of <= 5 % (a one-sided exact binomial test at 0.05 does not reject a 5 % rate). Planted cohorts (three signal regions in the first of two image sources): the
fraction of cohorts where the three planted regions, and no other region, reach p_FWE <= 0.05, and where the signal
source does and the noise source does not. Prints the figures with their binomial 95 % intervals.

Usage: bench/region_significance_calibration.py [--cli build/pipeline/neuromkl] [--cohorts 40] [--permutations 200]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

PLANTED = ["Hippocampus_L", "Precuneus_R", "Frontal_Mid_L"]
LEARNERS = [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}, {"name": "svm", "params": {"c": 0.01}}]


def binomial_tail(k, n, p):
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def wilson(k, n, z=1.96):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def run_cohort(cli, folder, seed, signal, permutations, subjects):
    cohort = os.path.join(folder, f"cohort{seed}")
    subprocess.run([cli, "simulate", "--out", cohort, "--subjects", str(subjects), "--downsample", "3", "--seed", str(seed), "--effect", "0.8",
                    "--signal", ",".join(PLANTED) if signal else "none", "--second-modality", "-q"], check=True, stdout=subprocess.DEVNULL)
    study = {"name": f"c{seed}", "subjects": {"table": "participants.tsv"},
             "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
             "kernels": {"sources": [{"name": "mri", "kind": "images"}, {"name": "noise", "kind": "images", "image_column": "image_b"}]},
             "learners": LEARNERS, "cv": {"outer": {"k": 5}, "inner": {"k": 3}}, "permutations": {"count": permutations},
             "output": {"weight_maps": False, "model": False}, "seed": seed}
    path = os.path.join(cohort, "study.json")
    with open(path, "w") as f:
        json.dump(study, f)
    out = os.path.join(cohort, "out")
    subprocess.run([cli, "run", path, "--out", out, "-q"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    per_learner = {}
    for i, learner in enumerate(results["learners"]):
        label = learner["label"]
        regions = {row["name"]: row["p_fwe"] for row in learner["regions"]["table"]}
        sources = [s["weight_percent"][label]["p_fwe"] for s in results["sources"]]
        per_learner[label] = (regions, sources)
    return per_learner


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "build", "pipeline", "neuromkl"))
    parser.add_argument("--cohorts", type=int, default=40)
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument("--subjects", type=int, default=60)
    args = parser.parse_args()
    start = time.time()
    labels = [l["name"] for l in LEARNERS]
    null_any = {l: [0, 0] for l in labels}          # any region at p_FWE <= 0.05, any source
    planted_exact = {l: [0, 0] for l in labels}     # exactly the planted regions; the signal source and not the noise source
    with tempfile.TemporaryDirectory() as folder:
        for c in range(args.cohorts):
            for signal in (False, True):
                seed = 1000 + 2 * c + signal
                for label, (regions, sources) in run_cohort(args.cli, folder, seed, signal, args.permutations, args.subjects).items():
                    hits = {name for name, p in regions.items() if p is not None and p <= 0.05}
                    if not signal:
                        null_any[label][0] += bool(hits)
                        null_any[label][1] += any(p <= 0.05 for p in sources)
                    else:
                        planted_exact[label][0] += hits == {"mri:" + r for r in PLANTED}
                        planted_exact[label][1] += sources[0] <= 0.05 and sources[1] > 0.05
            print(f"  {c + 1} of {args.cohorts} null and planted cohorts done ({time.time() - start:.0f} s)", file=sys.stderr)
    n = args.cohorts
    print(f"{n} null and {n} planted cohorts ({args.subjects} subjects, 2 image sources x 116 AAL regions), {args.permutations} permutations each, "
          f"{time.time() - start:.0f} s")
    ok = True
    for label in labels:
        for what, k, goal in (("null: any region at p_FWE <= 0.05", null_any[label][0], "<= 5 %"),
                              ("null: any source at p_FWE <= 0.05", null_any[label][1], "<= 5 %"),
                              ("planted: exactly the 3 planted regions at p_FWE <= 0.05", planted_exact[label][0], ">= 90 %"),
                              ("planted: signal source and not the noise source", planted_exact[label][1], ">= 90 %")):
            lo, hi = wilson(k, n)
            # "<= 5 %": not more false positives than a 5 % rate makes likely (one-sided exact binomial test at 0.05).
            passed = binomial_tail(k, n, 0.05) > 0.05 if goal == "<= 5 %" else k / n >= 0.9
            ok &= passed
            print(f"  {label:10s} {what:58s} {k:3d}/{n} = {100 * k / n:5.1f} % (95 % CI {100 * lo:.1f}-{100 * hi:.1f} %), goal {goal}: "
                  f"{'met' if passed else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
