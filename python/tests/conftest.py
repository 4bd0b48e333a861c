"""Shared fixtures. ctest sets PYTHONPATH to build/python, NEUROMKL_SOURCE_DIR and NEUROMKL_CLI."""
import os
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("NEUROMKL_SOURCE_DIR", Path(__file__).resolve().parents[2]))


@pytest.fixture
def rng():
    return np.random.default_rng(42)


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE_DIR


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("NEUROMKL_CLI", str(SOURCE_DIR / "build" / "pipeline" / "neuromkl"))
    if not Path(path).is_file():
        pytest.fail(f"the neuromkl CLI is not at {path}: build it or set NEUROMKL_CLI")
    return path
