#!/usr/bin/env python3
"""Python overhead of the neuromkl estimators at n = 200 subjects, m = 116 kernels (one per AAL region).

For each learner: wall time of `est.fit(K, y)` (precomputed stack, the input form of a study) and the
time the C++ side spent (kernel preprocessing + fit, measured in C++ without the GIL, fit_info_
["core_seconds"]). Overhead = wall - core: input validation, the numpy -> Eigen copy of the stack,
building the fitted attributes (median over runs of wall - C++). The feature form (kernel="linear") is timed too; its extra time is
building the 116 group kernels with numpy, reported separately (not overhead: the CLI builds kernels
too). Medians of --repeats runs. Usage: PYTHONPATH=build/python python3 bench/python_overhead.py
"""
import argparse
import statistics
import time

import numpy as np

import neuromkl


def cohort(n, m, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 400, size=m)  # voxels per region
    y = rng.permutation(np.repeat([0, 1], n // 2))
    X = rng.normal(size=(n, int(sizes.sum())))
    edges = np.concatenate([[0], np.cumsum(sizes)])
    groups = [np.arange(edges[r], edges[r + 1]) for r in range(m)]
    for r in (5, 40, 77):  # three regions carry the class
        X[:, groups[r][:10]] += 0.8 * (2 * y - 1)[:, None]
    K = np.stack([X[:, g] @ X[:, g].T for g in groups])
    return X, groups, K, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=200)
    ap.add_argument("--kernels", type=int, default=116)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-overhead", type=float, default=None, help="exit 1 if any precomputed-form overhead (percent) exceeds this")
    a = ap.parse_args()
    X, groups, K, y = cohort(a.subjects, a.kernels, a.seed)
    estimators = [neuromkl.EnmklSVC(C=1, mu=0.5), neuromkl.EnmklKernelRidgeClassifier(alpha=1, mu=0.5), neuromkl.SimpleMKLClassifier(C=1),
                  neuromkl.MKELMClassifier(C=1)]
    print(f"n = {a.subjects}, m = {a.kernels} kernels, {X.shape[1]} features, median of {a.repeats}")
    print(f"{'estimator':28s} {'wall s':>9s} {'C++ s':>9s} {'overhead ms':>12s} {'overhead':>9s} {'feature form s':>15s}")
    worst = 0.0
    for est in estimators:
        wall, core, feat = [], [], []
        for _ in range(a.repeats):
            e = est.set_params(kernel="precomputed", normalise=True)
            t = time.perf_counter()
            e.fit(K, y)
            wall.append(time.perf_counter() - t)
            core.append(e.fit_info_["core_seconds"])
            f = est.set_params(kernel="linear", groups=groups, normalise=True)
            t = time.perf_counter()
            f.fit(X, y)
            feat.append(time.perf_counter() - t)
        w, c = statistics.median(wall), statistics.median(core)
        extra = statistics.median(a - b for a, b in zip(wall, core))  # per-run Python time, median (robust to load spikes)
        overhead = 100.0 * extra / w
        worst = max(worst, overhead)
        print(f"{type(est).__name__:28s} {w:9.4f} {c:9.4f} {1000 * extra:12.2f} {overhead:8.2f}% {statistics.median(feat):15.4f}")
    if a.max_overhead is not None and worst > a.max_overhead:
        raise SystemExit(f"Python overhead {worst:.2f} % exceeds {a.max_overhead} %")


if __name__ == "__main__":
    main()
