"""Builds neuromkl._core with the project's CMake (see pyproject.toml). Offline: Debian packages only.

Environment: NEUROMKL_PIP_BUILD_DIR reuses a CMake build folder (default: a folder under setuptools'
build_temp, configured with tests and benchmarks off); NEUROMKL_JOBS sets the parallel build jobs;
NEUROMKL_COMPILER_LAUNCHER (e.g. ccache) compiles through a compiler cache, as scripts/build.sh.

The package carries the built-in atlases (neuromkl/data/atlases): the module finds them beside itself
(atlas::FindDataDir), so an installed package needs no clone.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        build = Path(os.environ.get("NEUROMKL_PIP_BUILD_DIR") or Path(self.build_temp).resolve() / "cmake")
        build.mkdir(parents=True, exist_ok=True)
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), f"-DPython3_EXECUTABLE={sys.executable}", "-DNEUROMKL_BUILD_PYTHON=ON"]
        if not (build / "CMakeCache.txt").exists():
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            configure += generator + ["-DCMAKE_BUILD_TYPE=Release", "-DNEUROMKL_BUILD_TESTS=OFF", "-DNEUROMKL_BUILD_BENCH=OFF"]
            launcher = os.environ.get("NEUROMKL_COMPILER_LAUNCHER")
            if launcher:
                configure += [f"-DCMAKE_C_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}"]
        subprocess.run(configure, check=True)
        jobs = os.environ.get("NEUROMKL_JOBS", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build), "--target", "neuromkl_python", "-j", jobs], check=True)
        built = sorted((build / "python" / "neuromkl").glob("_core*.so"))
        if not built:
            raise RuntimeError(f"the CMake build in {build} produced no python/neuromkl/_core*.so (pybind11-dev and python3-dev installed?)")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], target)
        # The built-in atlases and the report's template travel with the module (found beside it at run time).
        shutil.copytree(ROOT / "atlases", target.parent / "data" / "atlases", dirs_exist_ok=True)


setup(ext_modules=[Extension("neuromkl._core", sources=[])], cmdclass={"build_ext": CMakeBuild})
