"""Studies from Python: run one through the C++ pipeline (same outputs as `neuromkl run`) and read results."""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import _core

try:  # pandas is optional: tables are DataFrames when it is installed, lists of dicts otherwise
    import pandas as _pd
except ImportError:  # pragma: no cover - exercised only without python3-pandas
    _pd = None

__all__ = ["run_study", "load_results", "load_kernels", "StudyResults"]


def _number(text):
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and text.lstrip("-").isdigit() else value


def _read_table(path):
    """A TSV written by neuromkl: a pandas DataFrame if pandas is present, else a list of dicts."""
    if _pd is not None:
        return _pd.read_csv(path, sep="\t")
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f, delimiter="\t")]


@dataclass
class StudyResults:
    """Everything a run wrote, as Python objects.

    Attributes: ``output_dir``; ``results`` (results.json as a dict); ``metrics`` (metrics.tsv);
    ``regions`` ({learner label: regions_<label>.tsv}); ``predictions`` (predictions.tsv); ``folds``
    (folds.tsv); ``weight_maps`` ({learner label: {"mean": path, "folds": [paths], "stability": path,
    "sign_consistency": path}}: the stability maps are None with fewer than two folds); ``report``
    (report.html path); ``summary`` (the CLI's one line per learner, for a run; empty when loaded);
    ``comparisons`` (comparisons.tsv: every pair of learners compared; None with one learner);
    ``attributions`` (attributions.tsv: every out-of-fold decision value split over the kernels; None for multiclass);
    ``region_scan`` and ``ablation`` (their tables when the study asked for them, else None).
    """

    output_dir: str
    results: dict
    metrics: object
    regions: dict
    predictions: object
    folds: object
    weight_maps: dict
    report: str | None
    summary: list = field(default_factory=list)
    comparisons: object = None
    attributions: object = None
    region_scan: object = None
    ablation: object = None

    @property
    def learners(self):
        return [l["label"] for l in self.results.get("learners", [])]

    def kernel_weights(self, learner):
        """Kernel weights per outer fold of a learner (list of lists, order of results['kernels']['regions'])."""
        for l in self.results.get("learners", []):
            if l["label"] == learner or l["name"] == learner:
                return [f.get("kernel_weights") for f in l["folds"]]
        raise KeyError(f"no learner {learner!r} in {self.output_dir}; learners: {', '.join(self.learners)}")


def load_results(output_dir) -> StudyResults:
    """Reads the output folder of `neuromkl run` (or run_study) into a StudyResults."""
    d = Path(output_dir)
    rj = d / "results.json"
    if not rj.is_file():
        raise _core.IoError(f"{rj} not found: not a neuromkl results folder")
    with open(rj) as f:
        results = json.load(f)
    regions = {}
    weight_maps = {}
    for learner in results.get("learners", []):
        label = learner["label"]
        table = d / f"regions_{label}.tsv"
        if table.is_file():
            regions[label] = _read_table(table)
        maps = learner.get("weight_maps") or {}
        if maps:
            stability = maps.get("stability") or {}
            weight_maps[label] = {"mean": str(d / maps["mean"]) if maps.get("mean") else None,
                                  "folds": [str(d / p) for p in maps.get("folds", [])],
                                  "stability": str(d / stability["mean_over_sd"]) if stability.get("mean_over_sd") else None,
                                  "sign_consistency": str(d / stability["sign_consistency"]) if stability.get("sign_consistency") else None}

    def optional(name):
        return _read_table(d / name) if (d / name).is_file() else None

    report = d / "report.html"
    def named(key):
        return optional(results[key]["table"]) if key in results else None

    return StudyResults(output_dir=str(d), results=results, metrics=optional("metrics.tsv"), regions=regions,
                        predictions=optional("predictions.tsv"), folds=optional("folds.tsv"), weight_maps=weight_maps,
                        report=str(report) if report.is_file() else None, comparisons=optional("comparisons.tsv"),
                        attributions=named("attributions"), region_scan=named("region_scan"), ablation=named("ablation"))


def load_kernels(path):
    """The raw region kernels a run saved (`<output>/kernels`, or that folder itself).

    Returns (names, subjects, K) with K of shape n_kernels x n x n (float64, not centred or
    normalised; rows and columns in `subjects` order): the input of the estimators' precomputed form.
    """
    import numpy as np

    d = Path(path)
    if (d / "kernels" / "index.json").is_file():
        d = d / "kernels"
    index_path = d / "index.json"
    if not index_path.is_file():
        raise _core.IoError(f"{index_path} not found: not a neuromkl kernel folder")
    with open(index_path) as f:
        index = json.load(f)
    if index.get("format") == "neuromkl-features":
        raise _core.IoError(f"{d} is a feature cache entry (a study on features keeps its voxels, not kernels): "
                            "numpy.load(features.npy, mmap_mode='r') reads them, index.json says how (docs/learners.md)")
    names = [k["name"] for k in index["kernels"]]
    K = np.stack([np.load(d / k["file"]) for k in index["kernels"]]) if names else np.empty((0, 0, 0))
    return names, list(index["subjects"]), K


def run_study(study, out_dir=None, threads=None, force=False, base_dir=None, verbose=False) -> StudyResults:
    """Runs a study like `neuromkl run STUDY.json [--out DIR] [--threads N] [--force]`.

    ``study`` is a path to a study file or a dict with the same content (relative paths then resolve
    against ``base_dir``, default the current folder). Writes exactly the CLI's output folder and
    returns its contents (see load_results). Errors are the CLI's, as neuromkl exceptions
    (ConfigError, InputError, IoError, ...). The GIL is released while the study runs. ``verbose``:
    the CLI's progress and info log on stderr (default: warnings only, like `neuromkl run -q`).
    """
    if isinstance(study, dict):
        text = json.dumps(study)
        base = os.path.abspath(base_dir if base_dir is not None else os.getcwd())
        outcome = _core.run_study(text, True, base, "" if out_dir is None else os.fspath(out_dir), -1 if threads is None else int(threads),
                                  bool(force), bool(verbose))
    else:
        outcome = _core.run_study(os.fspath(study), False, "", "" if out_dir is None else os.fspath(out_dir),
                                  -1 if threads is None else int(threads), bool(force), bool(verbose))
    res = load_results(outcome["output_dir"])
    res.summary = list(outcome["summary"])
    return res
