#!/usr/bin/env python3
"""ComBat inside the folds (docs/harmonisation.md) on simulated multi-site cohorts: what the sites leak, and what the
diagnosis keeps.

Each replicate simulates one cohort three times from the same seed (same targets, same unscanned images, same site
assignment): without site effects (every site's shift 0 and gain 1), and with site effects (per site and region an
offset and a gain); the sites are confounded with the diagnosis (--site-imbalance). Printed per design, as the mean over
replicates with its standard error:
  - site predictability: a 4-class SVM predicting the site from the images (chance 0.25), with and without harmonisation;
  - the diagnosis: balanced accuracy without site effects, with site effects and no harmonisation (inflated by the
    confound when the sites are imbalanced), and with site effects harmonised inside the folds;
  - the cost: the nested CV's seconds with and without harmonisation;
  - a site the model never saw: trained on sites 1-3 (harmonised, model exported), applied with `neuromkl predict` at
    site 4 with that site's ComBat effects estimated from all its subjects and from --calibration of them, against the
    nested CV's in-site estimate, a model with the site as a covariate (--unseen-levels reference and estimate) and the
    unharmonised model at site 4.

Usage: bench/harmonisation_sites.py [--cli build/pipeline/neuromkl] [--replicates 5] [--subjects 300] [--imbalances 0,0.5] [--effect 0.5]
                                   [--new-site-only] [--calibration 20]
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

LEARNERS = [{"name": "svm", "label": "svm", "params": {"c": 1.0}}, {"name": "enmkl_svm", "label": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}]


def simulate(cli, folder, seed, subjects, imbalance, site_effects, effect):
    cmd = [cli, "simulate", "--out", folder, "--subjects", str(subjects), "--downsample", "3", "--seed", str(seed), "--effect", str(effect),
           "--sites", "4", "--site-imbalance", str(imbalance), "-q"]
    if not site_effects:
        cmd += ["--site-shift", "0", "--site-scale", "0"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    # The site again under another name, as a target: a study cannot harmonise on its own target.
    path = os.path.join(folder, "participants.tsv")
    with open(path) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) + ["scanner"], delimiter="\t")
        writer.writeheader()
        for r in rows:
            writer.writerow({**r, "scanner": r["site"]})


def run(cli, folder, name, target, task, harmonise, seed):
    study = {"name": name, "subjects": {"table": "participants.tsv"}, "target": {"column": target, "task": task}, "atlas": "aal",
             "learners": LEARNERS if task == "classification" else LEARNERS[:1], "cv": {"outer": {"k": 5}, "inner": {"k": 3}},
             "output": {"dir": f"out/{name}"}, "seed": seed}
    if task == "classification":
        study["target"]["positive_class"] = "patient"
    else:
        study["output"].update({"weight_maps": False, "model": False})
    if harmonise:
        study["harmonisation"] = {"site_column": "site"}
        if harmonise == "controls":
            study["harmonisation"]["fit_on"] = {"column": "group", "value": "control"}
        if harmonise == "no_eb":
            study["harmonisation"]["empirical_bayes"] = False
    path = os.path.join(folder, name + ".json")
    with open(path, "w") as f:
        json.dump(study, f)
    done = subprocess.run([cli, "run", path, "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=folder)
    if done.returncode == 2:  # refused (e.g. a site with fewer than 2 reference subjects in a training set): counted
        print(f"  {name} (seed {seed}) refused: {done.stderr.strip().splitlines()[-1][:200]}", file=sys.stderr)
        return None, None
    done.check_returncode()
    with open(os.path.join(folder, "out", name, "results.json")) as f:
        results = json.load(f)
    metrics = {l["label"]: l["metrics"]["pooled"]["balanced_accuracy"] for l in results["learners"]}
    return metrics, results["seconds"]["nested_cv"]


def new_site(cli, tmp, seed, subjects, effect, calibration):
    """A model trained on sites 1-3 and applied at site 4, which it never saw. Returns the balanced accuracies per
    learner: the nested CV over sites 1-3 (the in-site estimate), site 4 with its ComBat effects estimated from all its
    subjects and from `calibration` of them (--new-site-reference), site 4 with the site as a categorical covariate
    instead (coded as the reference site, or its mean estimated from its subjects: --unseen-levels), site 4 without
    either, and whether predict refuses site 4 with --new-sites refuse."""
    folder = os.path.join(tmp, f"newsite{seed}")
    simulate(cli, folder, seed, subjects, 0.0, True, effect)
    path = os.path.join(folder, "participants.tsv")
    with open(path) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    fields = list(rows[0]) + ["calibration"]
    new = [r for r in rows if r["site"] == "site4"]
    for i, r in enumerate(new):
        r["calibration"] = "yes" if i < calibration else "no"
    for name, subset in (("train.tsv", [r for r in rows if r["site"] != "site4"]), ("new.tsv", new)):
        with open(os.path.join(folder, name), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields, delimiter="\t")
            writer.writeheader()
            for r in subset:
                writer.writerow({"calibration": "n/a", **r})
    out = {}
    for design in ("harmonised", "covariate", "raw"):
        name = f"trained_on_three_sites_{design}"
        study = {"name": name, "subjects": {"table": "train.tsv"}, "target": {"column": "group", "task": "classification", "positive_class": "patient"},
                 "atlas": "aal", "learners": LEARNERS, "cv": {"outer": {"k": 5}, "inner": {"k": 3}}, "output": {"dir": f"out/{name}", "weight_maps": False},
                 "seed": seed}
        if design == "harmonised":
            study["harmonisation"] = {"site_column": "site"}
        if design == "covariate":
            study["covariates"] = {"categorical": ["site"]}
        with open(os.path.join(folder, name + ".json"), "w") as f:
            json.dump(study, f)
        subprocess.run([cli, "run", name + ".json", "-q"], check=True, stdout=subprocess.DEVNULL, cwd=folder)
        with open(os.path.join(folder, "out", name, "results.json")) as f:
            results = json.load(f)
        if design == "harmonised":
            for l in results["learners"]:
                out[("in-site nested CV (sites 1-3, harmonised)", l["label"])] = l["metrics"]["pooled"]["balanced_accuracy"]
        cases = {"harmonised": [("site 4, effects estimated from all its subjects", []),
                                (f"site 4, effects estimated from {calibration} of its subjects", ["--new-site-reference", "calibration=yes"])],
                 "covariate": [("site 4, site as a covariate, coded as the reference site", ["--unseen-levels", "reference"]),
                               ("site 4, site as a covariate, its mean from its subjects", ["--unseen-levels", "estimate"])],
                 "raw": [("site 4, not harmonised", [])]}[design]
        for what, options in cases:
            pred = os.path.join(folder, "pred_" + "".join(c for c in what if c.isalnum()))
            subprocess.run([cli, "predict", os.path.join("out", name, "model"), "new.tsv", "--out", pred, "-q"] + options, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
            with open(os.path.join(pred, "summary.json")) as f:
                performance = json.load(f)["performance"]
            for l in LEARNERS:
                out[(what, l["label"])] = performance[l["label"]]["balanced_accuracy"]
        if design == "harmonised":
            refused = subprocess.run([cli, "predict", os.path.join("out", name, "model"), "new.tsv", "--out", "refused", "--new-sites", "refuse", "-q"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
            out[("site 4 with --new-sites refuse: exit code", "")] = refused.returncode
    return out


def mean_se(values):
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, float("nan")
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default="build/pipeline/neuromkl")
    parser.add_argument("--replicates", type=int, default=5)
    parser.add_argument("--subjects", type=int, default=300)
    parser.add_argument("--imbalances", default="0,0.5", help="site imbalances to simulate (comma-separated; 0 is needed for the site rows)")
    parser.add_argument("--effect", type=float, default=0.5)
    parser.add_argument("--new-site-only", action="store_true", help="only the model applied at a site it never saw")
    parser.add_argument("--calibration", type=int, default=20, help="site-4 subjects its effects are estimated from, in the second estimate")
    args = parser.parse_args()
    cli = os.path.abspath(args.cli)
    figures = {}
    imbalances = [float(x) for x in args.imbalances.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.replicates):
            seed = 100 + r
            runs = {}
            for (what, label), value in new_site(cli, tmp, seed, args.subjects, args.effect, args.calibration).items():
                figures.setdefault(("new site: " + what, label), []).append(value)
            for imbalance in ([] if args.new_site_only else imbalances):
                clean, scanned = os.path.join(tmp, f"clean{seed}_{imbalance}"), os.path.join(tmp, f"sites{seed}_{imbalance}")
                simulate(cli, clean, seed, args.subjects, imbalance, False, args.effect)
                simulate(cli, scanned, seed, args.subjects, imbalance, True, args.effect)
                if imbalance == 0:  # what the scanners alone leak (with imbalance, the diagnosis signal also tells the sites apart)
                    runs["site from images, no harmonisation"] = (scanned, "scanner", "multiclass", False)
                    runs["site from images, harmonised"] = (scanned, "scanner", "multiclass", True)
                    runs["site from images, harmonised without EB"] = (scanned, "scanner", "multiclass", "no_eb")
                at = f" (imbalance {imbalance})"
                runs["diagnosis, no site effects" + at] = (clean, "group", "classification", False)
                runs["diagnosis, site effects, no harmonisation" + at] = (scanned, "group", "classification", False)
                runs["diagnosis, site effects, harmonised" + at] = (scanned, "group", "classification", True)
                runs["diagnosis, site effects, harmonised on controls" + at] = (scanned, "group", "classification", "controls")
            for what, (folder, target, task, harmonise) in runs.items():
                name = "".join(c for c in what if c.isalnum())
                metrics, seconds = run(cli, folder, name, target, task, harmonise, seed)
                if metrics is None:
                    figures.setdefault((what, "refused"), []).append(1)
                    continue
                for label, value in metrics.items():
                    figures.setdefault((what, label), []).append(value)
                figures.setdefault((what, "seconds"), []).append(seconds)
            print(f"replicate {r + 1}/{args.replicates} done", file=sys.stderr)
    chance_se = math.sqrt(0.25 * 0.75 / args.subjects)
    print(f"{args.replicates} replicates, {args.subjects} subjects, 4 sites, effect {args.effect}; "
          f"site chance 0.25, 2 SE of one cohort's accuracy at chance = {2 * chance_se:.3f}")
    for (what, label), values in figures.items():
        if label == "refused":
            print(f"  {what:62s} refused in {len(values)} of {args.replicates} replicates")
            continue
        m, se = mean_se(values)
        unit = "s" if label == "seconds" else "" if label == "" else "balanced accuracy"
        print(f"  {what:62s} {label:10s} {unit:18s} {m:.3f} +- {se:.3f}")


if __name__ == "__main__":
    main()
