"""neuromkl for Python: multiple kernel learning estimators (scikit-learn API) and studies.

>>> from neuromkl import EnmklSVC
>>> clf = EnmklSVC(C=1.0, mu=0.5).fit(X, y)          # one linear kernel per column
>>> clf.kernel_weights_                               # which columns (kernels) carry the prediction
>>> res = neuromkl.run_study("study.json")            # the CLI's `neuromkl run`, results as Python objects
>>> pipe = make_pipeline(RegionKernels(atlas="aal"), EnmklKernelRidge(kernel="precomputed", normalise=True))
>>> pipe.fit(imgs, y); pipe[0].coef_img(pipe[-1])     # NIfTI paths or nibabel images -> a nibabel weight map
>>> model = neuromkl.load_model("results/study/model", learner="enmkl_svm"); model.predict(new_imgs)

See python/README.md (docs/python.md) for the two input forms and the study API.
"""
from . import _core
from ._core import ConfigError, GeometryMismatch, InputError, InvalidParameter, IoError, NeuromklError, NumericalError
from .estimators import (ESTIMATORS, BSADMMKELMClassifier, DKELMClassifier, DKELMRegressor, EnmklKernelRidge,
                         EnmklKernelRidgeClassifier, EnmklSVC, KELMClassifier, KELMRegressor, MKELMClassifier, MKELMRegressor,
                         MKLBPClassifier, SimpleMKLClassifier, SimpleMKLRegressor, SumKernelRidge, SumKernelSVC)
from .images import KernelStack, RegionKernels
from .model import ExportedModel, load_model
from .study import StudyResults, load_kernels, load_results, run_study

__version__ = _core.version()


def learner_catalog():
    """Every C++ learner with its tasks and parameter table (names, defaults, bounds, docs)."""
    return _core.learner_catalog()


def data_dir():
    """Where the built-in atlases are read from: (folder, how it was found) -- beside the installed module
    (a pip-installed package's data/, an installation's share/neuromkl), NEUROMKL_DATA_DIR, or the source tree of
    a build tree."""
    return _core.data_dir()


def preprocess_fold(train_kernels, test_kernels, test_diag=None, centre=True, normalise=True):
    """Centres/normalises a fold's kernel stacks with training statistics (kernels::CentreFold/NormaliseFold).

    train_kernels: n_kernels x n x n; test_kernels: n_kernels x m x n; test_diag: n_kernels x m (needed to normalise).
    Returns (train, test) stacks.
    """
    import numpy as np
    diag = np.empty((0, 0)) if test_diag is None else test_diag
    return _core.preprocess_fold(train_kernels, test_kernels, diag, centre, normalise)


__all__ = ["run_study", "load_results", "load_kernels", "StudyResults", "learner_catalog", "preprocess_fold", "data_dir", "RegionKernels",
           "KernelStack", "load_model", "ExportedModel", "NeuromklError", "ConfigError",
           "InvalidParameter", "InputError", "GeometryMismatch", "NumericalError", "IoError", *[c.__name__ for c in ESTIMATORS],
           "ESTIMATORS"]
