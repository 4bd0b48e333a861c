#!/usr/bin/env python3
"""Calibration of the permutation test of a study whose target is adjusted for confounds (/target/confounds).

Null cohorts: the images carry age and nothing else of the score, and age goes with the score (r = 0.8). Adjusted for
age, nothing is left to predict, so the fraction of cohorts with p(pearson_r) <= 0.05 must be within binomial error of
5 % (the permutations permute the score's residuals on age and add back its fitted age effect: Freedman & Lane 1983).
The same cohorts without the adjustment show what the confound does: the images "predict" the score through age in
nearly every cohort. Prints both rejection rates with their binomial 95 % intervals, and the time per cohort.

Usage: bench/target_confounds_calibration.py [--cli build/pipeline/neuromkl] [--cohorts 40] [--permutations 99]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from region_significance_calibration import binomial_tail, wilson  # the same binomial figures, from bench/


def p_value(cli, cohort, name, confounds, permutations, seed):
    target = {"column": "score", "task": "regression"}
    if confounds:
        target["confounds"] = ["age"]
    study = {"name": name, "subjects": {"table": "participants.tsv"}, "target": target, "atlas": "aal",
             "learners": [{"name": "krr", "params": {"lambda": 1.0}}], "cv": {"outer": {"k": 5}},
             "permutations": {"count": permutations}, "output": {"weight_maps": False, "model": False}, "seed": seed}
    path = os.path.join(cohort, name + ".json")
    with open(path, "w") as f:
        json.dump(study, f)
    out = os.path.join(cohort, name)
    subprocess.run([cli, "run", path, "--out", out, "-q"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "results.json")) as f:
        learner = json.load(f)["learners"][0]
    return learner["permutations"]["p_values"]["pearson_r"], learner["metrics"]["pooled"]["pearson_r"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "build", "pipeline", "neuromkl"))
    parser.add_argument("--cohorts", type=int, default=40)
    parser.add_argument("--permutations", type=int, default=99)
    parser.add_argument("--subjects", type=int, default=80)
    args = parser.parse_args()
    rejected = {"adjusted": 0, "raw": 0}
    r_values = {"adjusted": [], "raw": []}
    start = time.time()
    with tempfile.TemporaryDirectory() as folder:
        for c in range(args.cohorts):
            seed = 1000 + c
            cohort = os.path.join(folder, f"cohort{seed}")
            subprocess.run([args.cli, "simulate", "--task", "regression", "--out", cohort, "--subjects", str(args.subjects), "--downsample", "3",
                            "--seed", str(seed), "--signal", "none", "--age-regions", "Frontal_Sup_L,Occipital_Mid_L",
                            "--age-target-correlation", "0.8", "--age-effect", "2", "-q"], check=True, stdout=subprocess.DEVNULL)
            for name, confounds in (("adjusted", True), ("raw", False)):
                p, r = p_value(args.cli, cohort, name, confounds, args.permutations, seed)
                rejected[name] += p <= 0.05
                r_values[name].append(r)
            print(f"cohort {c + 1}/{args.cohorts}: adjusted r {r_values['adjusted'][-1]:+.3f}, raw r {r_values['raw'][-1]:+.3f}", file=sys.stderr)
    seconds = time.time() - start
    n = args.cohorts
    print(f"{n} null cohorts ({args.subjects} subjects, images carry age only, age-score r = 0.8), {args.permutations} permutations each, KRR:")
    for name in ("adjusted", "raw"):
        k = rejected[name]
        low, high = wilson(k, n)
        mean_r = sum(r_values[name]) / n
        print(f"  {name:>8}: p(pearson_r) <= 0.05 in {k}/{n} = {k / n:.3f} (95 % CI {low:.3f}-{high:.3f}); mean pooled r {mean_r:+.3f}")
    tail = binomial_tail(rejected["adjusted"], n, 0.05)
    verdict = "consistent with" if tail > 0.05 else "ABOVE"
    print(f"  adjusted rejection rate {verdict} the nominal 5 % (P(X >= {rejected['adjusted']}) = {tail:.3f} under Binomial({n}, 0.05))")
    print(f"  {seconds / n:.1f} s per cohort (both studies)")
    return 0 if tail > 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
