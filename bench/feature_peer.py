#!/usr/bin/env python3
"""The feature path's svm and krr against scikit-learn's LinearSVC (liblinear) and Ridge, side by side in one run.

    python3 bench/feature_peer.py [build dir (default build)] [subjects 10000] [voxels 55000] [C 1] [tolerance 1e-4] [lambda 1] [enmkl 1]

bench_feature_learners peer writes one simulated cohort (116 regions of grey-matter-like voxels, float32) and neuromkl's
fits on it (svm: C-SVC with an unregularised bias, dual coordinate descent; krr: conjugate gradients; both on the whole
mask, centred, not normalised); this script fits LinearSVC(loss="hinge", dual=True) and Ridge(alpha=lambda) on the same
matrix and prints the fit times and how far the training decisions are apart. LinearSVC regularises its bias
(liblinear's bias feature, intercept_scaling 10 here): its optimum differs from the C-SVC's by that much, so its gap is
stated, not asserted. Ridge with an intercept is KRR on the centred linear kernel: the same optimum.
"""
import os
import sys
import tempfile
import time
import subprocess

import numpy as np
from sklearn.linear_model import Ridge
from sklearn.svm import LinearSVC


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    subjects, voxels = int(sys.argv[2]) if len(sys.argv) > 2 else 10000, int(sys.argv[3]) if len(sys.argv) > 3 else 55000
    c, tol, lam = (float(sys.argv[i]) if len(sys.argv) > i else d for i, d in ((4, 1.0), (5, 1e-4), (6, 1.0)))
    enmkl = sys.argv[7] if len(sys.argv) > 7 else "1"
    with tempfile.TemporaryDirectory(prefix="neuromkl_peer_") as work:
        subprocess.run([os.path.join(build, "bench", "bench_feature_learners"), "peer", work, str(subjects), str(voxels), str(c), str(tol), str(lam), enmkl], check=True)
        ours = {}
        for line in open(os.path.join(work, "neuromkl_times.txt")):
            name, *values = line.split()
            ours[name] = values
        x = np.load(os.path.join(work, "features.npy"))
        y = np.load(os.path.join(work, "labels.npy")).ravel()
        svm_ours = np.load(os.path.join(work, "svm_decisions.npy")).ravel()
        krr_ours = np.load(os.path.join(work, "krr_decisions.npy")).ravel()
    print(f"{subjects} subjects x {x.shape[1]} voxels (float32, {x.nbytes / 1e9:.2f} GB); C = {c}, tolerance {tol}, lambda {lam}; {os.cpu_count()} cores")
    print(f"neuromkl fold vectors (training mean, norms): {float(ours['fold_vectors'][0]):.2f} s")
    start = time.perf_counter()
    linear = LinearSVC(C=c, loss="hinge", dual=True, tol=tol, intercept_scaling=10.0, max_iter=100000).fit(x, y)
    svc_seconds = time.perf_counter() - start
    svc = linear.decision_function(x)
    start = time.perf_counter()
    ridge = Ridge(alpha=lam).fit(x, y)
    ridge_seconds = time.perf_counter() - start
    rid = ridge.predict(x)
    gap = lambda a, b: np.max(np.abs(a - b)) / np.max(np.abs(b))
    print(f"svm : neuromkl {float(ours['svm'][0]):8.2f} s ({ours['svm'][1]} coordinate steps)   LinearSVC {svc_seconds:8.2f} s   "
          f"ratio {float(ours['svm'][0]) / svc_seconds:.2f}x   decisions apart {gap(svm_ours, svc):.2e} (LinearSVC's bias is regularised)   "
          f"same sign {np.mean(np.sign(svm_ours) == np.sign(svc)) * 100:.1f} %")
    print(f"krr : neuromkl {float(ours['krr'][0]):8.2f} s ({ours['krr'][1]} CG steps)           Ridge     {ridge_seconds:8.2f} s   "
          f"ratio {float(ours['krr'][0]) / ridge_seconds:.2f}x   decisions apart {gap(krr_ours, rid):.2e}")
    if "enmkl_svm" in ours:
        seconds, iterations, status, support = ours["enmkl_svm"]
        print(f"enmkl_svm over 116 regions (mu 0.5, default tolerances): {float(seconds):.2f} s, {iterations} iterations, {status}, "
              f"{support} regions kept: {float(seconds) / svc_seconds:.2f}x LinearSVC's fit (goal <= 10x)")


if __name__ == "__main__":
    main()
