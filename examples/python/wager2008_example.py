#!/usr/bin/env python3
"""neuromkl from Python on the shipped cohort (examples/wager2008_emoreg: 30 fMRI contrast maps, AAL).

1. Run the study through the C++ pipeline (what `neuromkl run` does) and read its results as Python
   objects: metrics and the region table of ENMKL-KRR (pandas DataFrames when pandas is installed).
2. Take the 116 region kernels the run saved and use them with the scikit-learn estimator in its
   precomputed form: fit ENMKL-KRR on 24 subjects, predict the other 6, list the heaviest regions.

Usage (from the repository, after building):
    PYTHONPATH=build/python python3 examples/python/wager2008_example.py --out /tmp/wager_py
"""
import argparse
import json
from pathlib import Path

import numpy as np

import neuromkl

HERE = Path(__file__).resolve().parent
COHORT = HERE.parent / "wager2008_emoreg"


def main():
    ap = argparse.ArgumentParser(description="neuromkl Python example on the Wager 2008 cohort")
    ap.add_argument("--out", default=str(HERE / "results"), help="output folder of the study run (replaced if it exists)")
    ap.add_argument("--permutations", type=int, default=0, help="permutation count (the shipped study uses 49)")
    args = ap.parse_args()

    # ---- 1. the study, from a dict (a path to study.json works the same) ----
    study = json.loads((COHORT / "study.json").read_text())
    study.pop("$schema", None)
    study["permutations"] = {"count": args.permutations}
    res = neuromkl.run_study(study, base_dir=COHORT, out_dir=args.out, force=True)
    print("\n".join(res.summary))
    metrics = res.metrics
    if hasattr(metrics, "query"):  # pandas
        print(metrics.query("metric in ['pearson_r', 'mse']").to_string(index=False))
        print(res.regions["enmkl_krr"][["name", "mean_percent", "folds_selected"]].head(5).to_string(index=False))
    print("report:", res.report)

    # ---- 2. the saved region kernels with the scikit-learn estimator ----
    names, subjects, K = neuromkl.load_kernels(res.output_dir)
    table = np.genfromtxt(COHORT / "participants.tsv", delimiter="\t", names=True, dtype=None, encoding="utf-8")
    y_of = {row["subject"]: float(row["Y_Reappraisal_Success"]) for row in table}
    y = np.array([y_of[s] for s in subjects])
    rng = np.random.default_rng(0)
    test = np.sort(rng.choice(len(subjects), size=6, replace=False))
    train = np.setdiff1d(np.arange(len(subjects)), test)
    est = neuromkl.EnmklKernelRidge(alpha=1.0, mu=0.5, kernel="precomputed", centre=True, normalise=True)
    est.fit(K[:, train][:, :, train], y[train])
    pred = est.predict(K[:, test][:, :, train], test_diag=K[:, test, test])
    print(f"ENMKL-KRR on {len(train)} subjects, {K.shape[0]} region kernels: {est.n_iter_} iterations, {est.fit_status_}")
    for s, p, t in zip(np.array(subjects)[test], pred, y[test]):
        print(f"  {s}: predicted {p:+.3f}, true {t:+.3f}")
    top = np.argsort(est.kernel_weights_)[::-1][:5]
    print("heaviest regions:", ", ".join(f"{names[i]} {100 * est.kernel_weights_[i]:.1f}%" for i in top))


if __name__ == "__main__":
    main()
