#!/usr/bin/env python3
"""What forming a tabular source's kernels inside every fold costs: the same study run twice in one go, once on a
table z-scored beforehand with every subject's statistics and `standardise` off (the kernels formed once, in the kernel
stage), once with `"standardise": true` and `"impute": "median"` (every outer and inner fold imputes, standardises and
forms the kernels with its training subjects' statistics). Prints wall time and peak memory of each run and their
ratio, and the pooled balanced accuracies (equal within the statistics' difference).

Usage: python3 bench/tabular_folds.py [--neuromkl build/pipeline/neuromkl] [--subjects 270] [--columns 13] [--work DIR]

The table is simulated (two informative columns, the rest noise, one cell in fifty missing for the second run); the
kernels are the MKL-BP protocol's (Qi, Liang & Xu 2018): Gaussian widths 2^-3 .. 2^6 and polynomial degrees 1-3 on each
column and on all columns, 13 (columns + 1) kernels, with SimpleMKL and MKL-BP on 10 x 2-fold CV.
"""
import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_table(path, n, p, gaps, rng):
    rows = ["id," + ",".join(f"x{j}" for j in range(p)) + ",label"]
    for i in range(n):
        y = 1 if i % 2 else -1
        x = [rng.gauss(0, 1) * (10 ** (j % 3)) + (0.8 * y * (10 ** (j % 3)) if j < 2 else 0) + 50 * (j % 4) for j in range(p)]
        cells = ["NA" if gaps and rng.random() < 0.02 else repr(v) for v in x]
        rows.append(f"s{i}," + ",".join(cells) + f",{y}")
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")


def zscore(src, dst):
    with open(src) as f:
        lines = [l.rstrip("\n").split(",") for l in f]
    header, data = lines[0], lines[1:]
    for j in range(1, len(header) - 1):
        values = [float(r[j]) for r in data if r[j] != "NA"]
        mean = sum(values) / len(values)
        sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 or 1.0
        median = sorted(values)[len(values) // 2]
        for r in data:
            r[j] = repr(((median if r[j] == "NA" else float(r[j])) - mean) / sd)
    with open(dst, "w") as f:
        f.write("\n".join(",".join(r) for r in [header] + data) + "\n")


def study(name, table, in_folds, work):
    tabular = {"table": table, "id_column": "id", "groups": "each_and_all", "exclude_columns": ["label"],
               "functions": [{"type": "gaussian", "width": [2.0 ** k for k in range(-3, 7)]}, {"type": "polynomial", "degree": [1, 2, 3]}]}
    if in_folds:
        tabular.update({"standardise": True, "impute": "median"})
    s = {"name": name, "subjects": {"table": table, "id_column": "id"},
         "target": {"column": "label", "task": "classification", "positive_class": "1"},
         "kernels": {"source": "tabular", "centre": False, "cache": False, "tabular": tabular},
         "cv": {"outer": {"scheme": "repeated_kfold", "k": 2, "repeats": 10}, "inner": {"scheme": "stratified_kfold", "k": 5}},
         "learners": [{"name": "simplemkl", "params": {"c": 100}}, {"name": "mkl_bp", "label": "MKL-BP", "params": {"c": 100, "p": 64, "v": 0.5}}],
         "permutations": {"count": 0}, "output": {"dir": os.path.join(work, "results", name), "model": False}}
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(s, f)
    return path


def run(cli, path):
    """Wall seconds and peak RSS (GB) of one `neuromkl run`, measured in a child of its own."""
    probe = ("import resource, subprocess, sys, time; t = time.time(); subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
             "print(time.time() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, cli, "run", path, "--force", "-q"], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]) / 1024 ** 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--neuromkl", default=os.path.join(ROOT, "build", "pipeline", "neuromkl"))
    ap.add_argument("--subjects", type=int, default=270)
    ap.add_argument("--columns", type=int, default=13)
    ap.add_argument("--work", default="/tmp/neuromkl_tabular_folds")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    raw, z = os.path.join(args.work, "table.csv"), os.path.join(args.work, "table_z.csv")
    write_table(raw, args.subjects, args.columns, True, random.Random(7))
    zscore(raw, z)  # every subject's statistics (and median), as `standardise` computed them before the folds did
    figures = {}
    for name, table, in_folds in (("whole_cohort", z, False), ("in_folds", raw, True)):
        seconds, rss = run(args.neuromkl, study(name, table, in_folds, args.work))
        with open(os.path.join(args.work, "results", name, "results.json")) as f:
            acc = {l["label"]: l["metrics"]["pooled"]["balanced_accuracy"] for l in json.load(f)["learners"]}
        figures[name] = (seconds, rss)
        print(f"{name:>13}: {seconds:7.1f} s, peak RSS {rss:5.2f} GB, balanced accuracy " + ", ".join(f"{k} {v:.3f}" for k, v in acc.items()))
    (a, ra), (b, rb) = figures["whole_cohort"], figures["in_folds"]
    kernels = 13 * (args.columns + 1)
    print(f"in the folds / whole cohort: time {b / a:.2f}x, peak RSS {rb / ra:.2f}x ({args.subjects} subjects, {kernels} kernels)")


if __name__ == "__main__":
    main()
