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
    shipped = sorted(p.name for p in (source_dir / "python" / "neuromkl").glob("*.py"))
    assert sorted(p.name for p in (target / "neuromkl").glob("*.py")) == shipped
    # the built-in atlases travel with the package: the module reads them beside itself, not from the clone
    assert (target / "neuromkl" / "data" / "atlases" / "aal" / "ROI_MNI_V4.nii.gz").is_file()
    code = (f"import neuromkl, numpy as np; assert neuromkl.__file__.startswith({str(target)!r}), neuromkl.__file__; "
            f"d, how = neuromkl.data_dir(); assert d == {str(target / 'neuromkl' / 'data')!r} and how.startswith('beside'), (d, how); "
            "X = np.arange(24.0).reshape(8, 3) % 5; y = [0, 1] * 4; "
            "print(neuromkl.EnmklSVC().fit(X, y).kernel_weights_.sum())")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NEUROMKL_DATA_DIR")}
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert abs(float(run.stdout) - 1.0) < 1e-12


def test_the_package_under_test_is_where_it_should_be(source_dir):
    """Through ctest the build tree's package is tested; with NEUROMKL_TEST_INSTALLED=1 (CI's run in a fresh venv)
    the installed one, in the environment's site-packages (wherever the venv lives, the clone included), not the
    clone's python/ folder, with its atlases beside it."""
    import neuromkl

    location = os.path.realpath(neuromkl.__file__)
    data, how = neuromkl.data_dir()
    if os.environ.get("NEUROMKL_TEST_INSTALLED") == "1":
        assert not location.startswith(os.path.realpath(source_dir / "python") + os.sep), location
        assert location.startswith(os.path.realpath(sys.prefix) + os.sep) and "site-packages" in location, (location, sys.prefix)
        assert how.startswith("beside the binary") and os.path.isdir(os.path.join(data, "atlases", "aal")), (data, how)
    elif os.environ.get("NEUROMKL_BUILD_TREE"):
        assert location.startswith(os.path.realpath(os.environ["NEUROMKL_BUILD_TREE"]) + os.sep), location
