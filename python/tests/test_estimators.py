"""Behaviour of the estimators: parameters, the two input forms, preprocessing, errors, GIL, sklearn tools."""
import inspect
import threading
import time

import numpy as np
import pytest
from sklearn.base import clone, is_classifier
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import neuromkl
from neuromkl import (DKELMClassifier, DKELMRegressor, EnmklKernelRidge, EnmklSVC, KELMClassifier, SimpleMKLClassifier, SumKernelRidge,
                      SumKernelSVC)
from neuromkl.estimators import _RENAMED, ESTIMATOR_PARAMS


def _signal_data(rng, n=60, p=8, informative=(0, 3), task="classification"):
    """Columns `informative` carry the target; the others are noise (non-cubic sizes on purpose)."""
    X = rng.normal(size=(n, p))
    s = X[:, list(informative)].sum(axis=1)
    if task == "classification":
        return X, np.where(s + 0.3 * rng.normal(size=n) > 0, "patient", "control")
    return X, s + 0.1 * rng.normal(size=n)


def test_python_defaults_equal_the_cpp_catalogue():
    catalog = {l["name"]: {p["name"]: p["default"] for p in l["params"]} for l in neuromkl.learner_catalog()}
    covered = set()
    for cls in neuromkl.ESTIMATORS:
        cpp = catalog[cls._learner]
        covered.add(cls._learner)
        sig = inspect.signature(cls.__init__).parameters
        py = {_RENAMED.get(k, k): float(v.default) for k, v in sig.items() if k != "self" and k not in ESTIMATOR_PARAMS}
        assert py == cpp, cls.__name__
    assert covered == set(catalog), "every catalogue learner has an estimator"


def test_precomputed_stack_equals_feature_groups(rng):
    """A precomputed linear kernel per group gives the same model and predictions as the feature form."""
    X, y = _signal_data(rng)
    groups = [[0, 1], [2, 3, 4], [5, 6, 7]]
    tr, te = np.arange(45), np.arange(45, 60)
    K = np.stack([X[:, g] @ X[:, g].T for g in groups])
    diag = np.stack([np.einsum("ij,ij->i", X[te][:, g], X[te][:, g]) for g in groups])
    for normalise in (False, True):
        a = EnmklSVC(C=10, groups=groups, normalise=normalise).fit(X[tr], y[tr])
        b = EnmklSVC(C=10, kernel="precomputed", normalise=normalise).fit(K[:, tr][:, :, tr], y[tr])
        np.testing.assert_allclose(a.kernel_weights_, b.kernel_weights_, rtol=0, atol=1e-12)
        # identical kernels up to BLAS summation order (1e-15 relative): decisions agree to 1e-9
        np.testing.assert_allclose(a.decision_function(X[te]), b.decision_function(K[:, te][:, :, tr], test_diag=diag), atol=1e-9)
    with pytest.raises(neuromkl.InputError, match="test_diag"):
        b.predict(K[:, te][:, :, tr])  # normalise=True needs the test self-similarities


def test_preprocessing_is_training_statistics_centring_and_cosine_normalisation(rng):
    """preprocess_fold (the C++ CentreFold/NormaliseFold) equals explicit centring of the features with the training mean."""
    X = rng.normal(size=(12, 5)) + 3.0
    tr, te = np.arange(9), np.arange(9, 12)
    K = (X @ X.T)[None]
    train, test = neuromkl.preprocess_fold(K[:, tr][:, :, tr], K[:, te][:, :, tr], K[:, te, te], centre=True, normalise=True)
    Xc = X - X[tr].mean(axis=0)
    Xn = Xc / np.linalg.norm(Xc, axis=1, keepdims=True)
    np.testing.assert_allclose(train[0], Xn[tr] @ Xn[tr].T, atol=1e-12)
    np.testing.assert_allclose(test[0], Xn[te] @ Xn[tr].T, atol=1e-12)


def test_mkl_weights_find_the_informative_columns(rng):
    X, y = _signal_data(rng, n=80)
    clf = EnmklSVC(C=1, mu=1.0).fit(X, y)
    assert clf.kernel_weights_.shape == (8,)
    assert clf.kernel_weights_.sum() == pytest.approx(1.0, abs=1e-12)
    assert set(np.argsort(clf.kernel_weights_)[-2:]) == {0, 3}
    assert clf.fit_status_ == "converged" and clf.n_iter_ >= 1
    assert list(clf.classes_) == ["control", "patient"]
    assert clf.score(X, y) > 0.9
    Xr, yr = _signal_data(rng, n=80, task="regression")
    reg = EnmklKernelRidge(alpha=0.1, mu=1.0).fit(Xr, yr)
    assert set(np.argsort(reg.kernel_weights_)[-2:]) == {0, 3}
    assert reg.score(Xr, yr) > 0.9


def test_decision_function_matches_the_fitted_coefficients(rng):
    """f(x) = sum_j beta_j sum_i coef_i K~_j(x, x_i) + b, with K~ the centred training kernels (normalise=False)."""
    X, y = _signal_data(rng)
    clf = SimpleMKLClassifier(C=1).fit(X, y)
    mean = X.mean(axis=0)
    Xc = X - mean
    f = sum(b * (Xc[:, [j]] @ Xc[:, [j]].T) @ clf.dual_coef_ for j, b in enumerate(clf.kernel_weights_)) + clf.intercept_
    np.testing.assert_allclose(clf.decision_function(X), f, atol=1e-9)


def test_every_classifier_is_multiclass(rng):
    centres = np.array([[3, 0, 0], [0, 3, 0], [0, 0, 3]])
    labels = rng.integers(0, 3, size=90)
    X = centres[labels] + rng.normal(size=(90, 3))
    y = np.array(["a", "b", "c"])[labels]
    for cls in neuromkl.ESTIMATORS:
        if not is_classifier(cls()):
            continue
        clf = cls(C=10) if "C" in cls().get_params() else cls()
        clf.fit(X, y)
        assert clf.decision_function(X).shape == (90, 3), cls.__name__
        assert clf.dual_coef_.shape == (90, 3) and clf.intercept_.shape == (3,), cls.__name__
        assert clf.score(X, y) > 0.9, cls.__name__
        assert not clf._get_tags()["binary_only"]
    # MKL learners: one kernel weight vector for all classes, or one per class (their mean is kernel_weights_)
    shared = EnmklSVC(C=10, groups=[[0], [1], [2]]).fit(X, y)
    assert not hasattr(shared, "class_kernel_weights_")
    per_class = EnmklSVC(C=10, groups=[[0], [1], [2]], multiclass_weights="per_class").fit(X, y)
    assert per_class.class_kernel_weights_.shape == (3, 3)
    np.testing.assert_allclose(per_class.kernel_weights_, per_class.class_kernel_weights_.mean(axis=1), atol=1e-15)
    # each class's own column carries its one-vs-rest problem: the class's weights favour it
    assert list(np.argmax(per_class.class_kernel_weights_, axis=0)) == [0, 1, 2]
    with pytest.raises(neuromkl.InvalidParameter, match="multiclass_weights"):
        EnmklSVC(multiclass_weights="each").fit(X, y)


def test_dkelm_uses_unlabelled_samples(rng):
    X, y = _signal_data(rng, n=60)
    Xu = rng.normal(size=(20, 8))
    clf = DKELMClassifier(neighbours=5, deformation=0.1).fit(X, y, X_unlabelled=Xu)
    assert clf.X_fit_.shape == (80, 8) and clf.dual_coef_.shape == (80,)
    plain = DKELMClassifier(neighbours=5, deformation=0.1).fit(X, y)
    assert not np.allclose(clf.decision_function(X), plain.decision_function(X))  # the unlabelled samples deform the kernel
    assert clf.score(X, y) > 0.85
    # the precomputed form takes the unlabelled samples as the last rows/columns of the stack
    Xall = np.vstack([X, Xu])
    K = np.stack([Xall[:, [j]] @ Xall[:, [j]].T for j in range(8)])
    pre = DKELMClassifier(neighbours=5, deformation=0.1, kernel="precomputed").fit(K, y, n_unlabelled=20)
    np.testing.assert_allclose(pre.dual_coef_, clf.dual_coef_, atol=1e-9)
    np.testing.assert_allclose(pre.decision_function(K[:, :60]), clf.decision_function(X), atol=1e-9)
    # deformation 0 is plain KELM (docs/learners.md)
    np.testing.assert_allclose(DKELMClassifier(deformation=0, neighbours=5).fit(X, y).decision_function(X),
                               KELMClassifier().fit(X, y).decision_function(X), atol=1e-10)
    Xr, yr = _signal_data(rng, n=60, task="regression")
    assert DKELMRegressor(neighbours=5, deformation=0.1).fit(Xr, yr, X_unlabelled=Xu).score(Xr, yr) > 0.8
    with pytest.raises(ValueError, match="supervised"):
        EnmklSVC().fit(X, y, X_unlabelled=Xu)


def test_cpp_errors_become_python_exceptions_with_the_same_message(rng):
    X, y = _signal_data(rng)
    with pytest.raises(neuromkl.InvalidParameter) as e:
        EnmklSVC(C=-1).fit(X, y)
    assert str(e.value) == "enmkl_svm.c: expected a value in (0, inf), found -1"  # what() of the C++ error, as the CLI prints it
    assert e.value.code == "learners:ParamRange" and e.value.where == "enmkl_svm.c"
    assert isinstance(e.value, ValueError) and isinstance(e.value, neuromkl.NeuromklError)
    with pytest.raises(neuromkl.InvalidParameter, match="parameter mu must be a number, got 'half'") as e:
        EnmklSVC(mu="half").fit(X, y)
    assert e.value.code == "python:ParamType"
    with pytest.raises(neuromkl.InputError, match=r"test kernel 0 is 5x7, expected 5x60"):
        EnmklSVC(kernel="precomputed").fit(np.stack([X @ X.T]), y).decision_function(np.zeros((1, 5, 7)))
    with pytest.raises(neuromkl.InputError, match="classification needs both classes"):
        EnmklSVC(kernel="precomputed").fit(np.stack([X @ X.T]), np.ones(60))


def test_precomputed_kernels_and_groups_are_checked_as_the_cli_checks_them(rng):
    """A non-symmetric or indefinite stack (the CLI refuses both) and fractional column indices were accepted."""
    X, y = _signal_data(rng)
    K = X @ X.T
    asymmetric = K.copy()
    asymmetric[0, 1] += 1.0
    with pytest.raises(neuromkl.InputError, match=r"kernel 0 is not symmetric") as e:
        EnmklSVC(kernel="precomputed").fit(np.stack([asymmetric]), y)
    assert e.value.code == "kernels:NotSymmetric"
    with pytest.raises(neuromkl.InputError, match=r"kernel 1 is not positive semi-definite: its smallest eigenvalue is -") as e:
        EnmklSVC(kernel="precomputed").fit(np.stack([K, -K]), y)
    assert e.value.code == "kernels:NotPsd"
    with pytest.raises(ValueError, match=r"column group 0 holds \[0.5, 1.0\]; expected column indices \(whole numbers\)"):
        EnmklSVC(groups=[[0.5, 1]]).fit(X, y)
    assert EnmklSVC(groups=[[0.0, 1.0]]).fit(X, y).n_kernels_ == 1  # whole numbers stored as floats are indices


def test_fit_releases_the_gil(rng):
    """Another Python thread keeps running while a fit runs in C++: its longest pause is far below the
    time the fit spent in C++ (with the GIL held, the pause would be at least that long)."""
    X, y = _signal_data(rng, n=200, p=40)
    est = EnmklSVC(C=1, mu=0.3)  # ~0.3 s in C++
    done = threading.Event()
    worker = threading.Thread(target=lambda: (est.fit(X, y), done.set()))
    stamps = [time.perf_counter()]
    worker.start()
    while not done.is_set():
        stamps.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    core = est.fit_info_["core_seconds"]
    assert core > 0.05, "the fit must be long enough to measure"
    assert np.diff(stamps).max() < 0.5 * core, (np.diff(stamps).max(), core)


def test_pipeline_grid_search_and_nested_cross_validation(rng):
    """The example from docs/python.md: scaler + MKL in a Pipeline, GridSearchCV inside cross_val_score (nested CV)."""
    X, y = _signal_data(rng, n=60)
    pipe = make_pipeline(StandardScaler(), EnmklSVC())
    search = GridSearchCV(pipe, {"enmklsvc__C": [0.1, 1, 10], "enmklsvc__mu": [0.2, 0.8]}, cv=StratifiedKFold(3, shuffle=True, random_state=0))
    scores = cross_val_score(search, X, y, cv=StratifiedKFold(4, shuffle=True, random_state=1))
    assert scores.shape == (4,) and scores.mean() > 0.8
    search.fit(X, y)
    assert search.best_params_["enmklsvc__C"] in (0.1, 1, 10)
    w = search.best_estimator_[-1].kernel_weights_
    assert set(np.argsort(w)[-2:]) == {0, 3}
    # regression, all estimators on a shared column-group layout
    Xr, yr = _signal_data(rng, n=60, task="regression")
    for est in (SumKernelRidge(groups="all"), EnmklKernelRidge(groups=[[0, 1, 2, 3], [4, 5, 6, 7]])):
        assert cross_val_score(est, Xr, yr, cv=3).mean() > 0.5


def test_every_estimator_fits_both_forms(rng):
    for cls in neuromkl.ESTIMATORS:
        X, y = _signal_data(rng, n=50, task="classification" if is_classifier(cls()) else "regression")
        groups = [[0, 1, 2], [3, 4], [5, 6, 7]]
        K = np.stack([X[:, g] @ X[:, g].T for g in groups])
        extra = {"neighbours": 5, "deformation": 0.1} if "DKELM" in cls.__name__ else {}
        a = cls(groups=groups, **extra).fit(X, y)
        b = cls(kernel="precomputed", **extra).fit(K, y)
        np.testing.assert_allclose(a.kernel_weights_, b.kernel_weights_, atol=1e-9, err_msg=cls.__name__)
        np.testing.assert_allclose(a.predict(X) if not is_classifier(a) else a.decision_function(X),
                                   b.predict(K) if not is_classifier(b) else b.decision_function(K), atol=1e-7, err_msg=cls.__name__)
        assert a.score(X, y) > 0.6, cls.__name__
    X, y = _signal_data(rng, n=50)
    assert SumKernelSVC().fit(X, y).kernel_weights_.tolist() == [0.125] * 8  # single-kernel learners: uniform weights, sum 1
