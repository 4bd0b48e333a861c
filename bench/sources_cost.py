#!/usr/bin/env python3
"""What a second image source costs: the kernel stage of a study with one image source against the same
study with two (kernels.sources), on a simulated cohort with a second modality, kernel cache off.

    python3 bench/sources_cost.py NEUROMKL_BINARY [--subjects 80] [--downsample 1] [--repeats 3] [--workdir DIR]

Prints the median wall time of the kernel stage (results.json seconds.kernels) and of the whole run for
one source, two sources, and their ratio. Expected: about 2x the kernel stage (each source is one pass
over its images, with the same Gram products), not more.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--subjects", type=int, default=80)
    ap.add_argument("--downsample", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir")
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="neuromkl-sources-")
    cohort = os.path.join(work, "cohort")
    if not os.path.exists(os.path.join(cohort, "participants.tsv")):
        subprocess.run([a.binary, "simulate", "--out", cohort, "--subjects", str(a.subjects), "--downsample", str(a.downsample),
                        "--second-modality", "--signal-b", "Hippocampus_L,Precuneus_R", "--seed", "3", "-q"], check=True, stdout=subprocess.DEVNULL)
    sources = {
        "one": [{"name": "mri", "kind": "images"}],
        "two": [{"name": "mri", "kind": "images"}, {"name": "pet", "kind": "images", "image_column": "image_b"}],
    }
    paths = {}
    for name, src in sources.items():
        study = {"name": "sources_" + name, "subjects": {"table": "cohort/participants.tsv"},
                 "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
                 "kernels": {"sources": src, "cache": False},
                 "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 1.0}}],
                 "output": {"weight_maps": False, "save_kernels": False}, "threads": a.threads}
        paths[name] = os.path.join(work, name + ".json")
        with open(paths[name], "w") as f:
            json.dump(study, f)
    # Interleaved (one, two, one, two, ...) so that a change of machine load hits both alike.
    kern = {name: [] for name in sources}
    total = {name: [] for name in sources}
    for _ in range(a.repeats):
        for name in sources:
            subprocess.run([a.binary, "run", paths[name], "--force", "-q"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(os.path.join(work, "results", "sources_" + name, "results.json")) as f:
                sec = json.load(f)["seconds"]
            kern[name].append(sec["kernels"])
            total[name].append(sec["total"])
    times = {name: (statistics.median(kern[name]), statistics.median(total[name])) for name in sources}
    print(f"cohort: {a.subjects} subjects, downsample {a.downsample}, threads {a.threads}, median of {a.repeats}")
    for name, (k, t) in times.items():
        print(f"{name} image source(s): kernel stage {k:.2f} s, whole run {t:.2f} s")
    print(f"ratio two/one: kernel stage {times['two'][0] / times['one'][0]:.2f}, whole run {times['two'][1] / times['one'][1]:.2f}")
    if not a.workdir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
