"""Small precomputed-kernel studies shared by the tests that compare the Python package with the CLI."""
import csv
import json
import subprocess

import numpy as np


def precomputed_study(tmp_path, rng, classes=("control", "case"), n=42, kernels=5, learners=(), target_extra=None, inner=None, seed=7):
    """n subjects with `classes` (the last is a binary study's positive class), `kernels` precomputed linear
    kernels of which kernels 1 and 3 carry the class, three custom outer folds. Returns (study, labels as class
    indices, fold of each subject, kernel names); the kernels are tmp_path/k<j>.npy."""
    labels = np.arange(n) % len(classes)
    rng.shuffle(labels)
    names = []
    for k in range(kernels):
        X = rng.normal(size=(n, 3 + 2 * k))
        if k in (1, 3):
            for c in range(len(classes)):
                X[labels == c, c % X.shape[1]] += 1.5  # each class moves its own column
        np.save(tmp_path / f"k{k}.npy", X @ X.T)
        names.append(f"k{k}")
    fold = np.arange(n) % 3
    with open(tmp_path / "participants.tsv", "w") as f:
        f.write("subject\tgroup\tfold\n")
        for i in range(n):
            f.write(f"s{i:02d}\t{classes[labels[i]]}\t{fold[i]}\n")
    task = "classification" if len(classes) == 2 else "multiclass"
    target = {"column": "group", "task": task, **(target_extra or {})}
    if task == "classification":
        target["positive_class"] = classes[-1]
    study = {"name": "pre", "subjects": {"table": "participants.tsv"}, "target": target,
             "kernels": {"source": "precomputed", "precomputed": [{"name": nm, "file": f"{nm}.npy"} for nm in names]},
             "cv": {"outer": {"scheme": "custom", "fold_column": "fold"}, **({"inner": inner} if inner else {})},
             "learners": list(learners), "seed": seed}
    (tmp_path / "study.json").write_text(json.dumps(study))
    return study, labels, fold, names


def run_cli(cli, study_path, out):
    subprocess.run([cli, "run", str(study_path), "-q", "--out", str(out)], check=True)
    with open(out / "results.json") as f:
        return json.load(f)


def read_tsv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def kernels_in_study_order(tmp_path, names, results):
    """The study's kernels (n_kernels x n x n) in the order of results.json's kernel list."""
    K = np.stack([np.load(tmp_path / f"{nm}.npy") for nm in names])
    order = [r["name"] for r in results["kernels"]["regions"]]
    return K[[names.index(o) for o in order]], order


def model_folder(out, label):
    """The model folder of a learner in a run's model/ (its index model/model.json)."""
    with open(out / "model" / "model.json") as f:
        index = json.load(f)
    return out / "model" / next(l["folder"] for l in index["learners"] if l["label"] == label)
