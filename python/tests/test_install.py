"""`pip install --no-build-isolation .` works offline and gives a working package.

Cheap: NEUROMKL_PIP_BUILD_DIR points setup.py at the existing CMake build (ctest sets
NEUROMKL_BUILD_TREE), so pip only re-runs CMake, finds the module up to date and packages it.
"""
import os
import subprocess
import sys

import pytest


def test_pip_install_offline_into_a_target_folder(tmp_path, source_dir):
    build = os.environ.get("NEUROMKL_BUILD_TREE")
    if not build:
        pytest.skip("run through ctest (NEUROMKL_BUILD_TREE names the CMake build to reuse)")
    env = dict(os.environ, NEUROMKL_PIP_BUILD_DIR=build, PIP_NO_INPUT="1")
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index", "--target", str(target),
                          str(source_dir)], capture_output=True, text=True, env=env, timeout=900)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert sorted(p.name for p in (target / "neuromkl").glob("*.py")) == ["__init__.py", "estimators.py", "study.py"]
    code = (f"import neuromkl, numpy as np; assert neuromkl.__file__.startswith({str(target)!r}), neuromkl.__file__; "
            "X = np.arange(24.0).reshape(8, 3) % 5; y = [0, 1] * 4; "
            "print(neuromkl.EnmklSVC().fit(X, y).kernel_weights_.sum())")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert abs(float(run.stdout) - 1.0) < 1e-12
