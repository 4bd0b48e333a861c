"""Platt scaling for the classifiers' predict_proba, fitted as a study fits it (cv::RunNestedCv).

A study fits P(positive | f) = 1 / (1 + exp(A f + B)) (Platt 1999; Lin, Lin & Weng 2007) per outer fold on the
out-of-fold decision values of its inner cross-validation: every inner training set fitted with the chosen
parameters, its held-out subjects' decision values collected, metrics::FitPlatt on those pairs. The estimators do
the same on their training set with stratified folds from the study's splitter (cv::MakeFolds), so with the
seed a study derives for an outer fold (cv::DeriveSeed(cv seed, 1000 + fold)) they reproduce that fold's scaling.
"""
import warnings

import numpy as np

from . import _core


def _out_of_fold(estimator, K, target, task, classes):
    """Out-of-fold decision values (n_labelled,) or class scores (n_labelled, classes) over the inner folds; NaN
    where an inner fit failed (the study counts such a fold's values as missing: they are left out of the fit)."""
    labelled = np.flatnonzero(~np.isnan(target))
    unlabelled = np.flatnonzero(np.isnan(target))
    y = target[labelled]
    k = int(estimator.probability_cv)
    smallest = int(np.unique(y, return_counts=True)[1].min())
    if smallest < 2:
        raise ValueError(f"probability=True: a class has {smallest} sample(s); the inner cross-validation of the Platt scaling needs at "
                         "least 2 per class")
    if smallest < k:  # a study refuses such a split; an estimator inside scikit-learn's tools uses fewer folds and says so
        warnings.warn(f"probability_cv={k}: the smallest class has {smallest} samples, so the Platt scaling is fitted on "
                      f"{smallest} stratified folds", UserWarning, stacklevel=4)
        k = smallest
    folds = _core.make_folds("stratified_kfold", k, task, y, int(estimator.random_state or 0))
    oof = np.full((len(labelled), classes) if task == "multiclass" else len(labelled), np.nan)
    params = estimator._learner_params()
    diagonals = np.einsum("kii->ki", K)
    for train, test in folds:
        tr = np.concatenate([labelled[train], unlabelled])  # semi-supervised learners keep every unlabelled sample
        te = labelled[test]
        try:
            info = _core.fit(estimator._learner, params, np.ascontiguousarray(K[:, tr][:, :, tr]), np.ascontiguousarray(target[tr]), task,
                             classes if task == "multiclass" else 0, bool(estimator.centre), bool(estimator.normalise),
                             estimator._multiclass_weights())
            oof[test] = _core.decision(info["beta"], info["coef"], info["bias"], info["coefs"], info["biases"], info["betas"],
                                       np.ascontiguousarray(K[:, tr][:, :, tr]), np.ascontiguousarray(K[:, te][:, :, tr]),
                                       np.ascontiguousarray(diagonals[:, te]), bool(estimator.centre), bool(estimator.normalise))
        except _core.NeuromklError:
            pass  # NaN: this fold's values are missing, as in a study
    return y, oof, k


def fit_platt_inner_cv(estimator, K, target, task, classes):
    """The calibration_ of a classifier: {"folds": k, "seed": s, "classes": [per class (binary: one entry) {"a",
    "b", "samples", "iterations", "converged"}]} from the inner-CV out-of-fold values."""
    y, oof, folds_used = _out_of_fold(estimator, K, target, task, classes)
    columns = [(oof, y)] if task != "multiclass" else [(oof[:, c], np.where(y == c, 1.0, -1.0)) for c in range(classes)]
    fitted = []
    for decision, labels in columns:
        a, b, samples, iterations, converged = _core.fit_platt(np.ascontiguousarray(decision), np.ascontiguousarray(labels))
        fitted.append({"a": a, "b": b, "samples": samples, "iterations": iterations, "converged": converged})
    return {"folds": folds_used, "seed": int(estimator.random_state or 0), "classes": fitted}


def probabilities(calibration, decision):
    """predict_proba from decision values (binary) or class scores (multiclass)."""
    scaled = [calibration["classes"][c] for c in range(len(calibration["classes"]))]
    if decision.ndim == 1:
        c = scaled[0]
        p = _core.platt_probabilities(c["a"], c["b"], c["samples"], np.ascontiguousarray(decision))
        return np.column_stack([1.0 - p, p])
    P = np.column_stack([_core.platt_probabilities(c["a"], c["b"], c["samples"], np.ascontiguousarray(decision[:, k])) for k, c in enumerate(scaled)])
    total = P.sum(axis=1, keepdims=True)
    # scikit-learn's one-vs-rest normalisation; a row whose scaled scores are all 0 gets uniform probabilities
    return np.where(total > 0, P / np.where(total > 0, total, 1.0), 1.0 / P.shape[1])


def calibrated_decision(calibration, decision):
    """Binary: the calibrated log-odds -(A f + B) (> 0 exactly where P(classes_[1]) > 1/2); multiclass: the log of the
    calibrated probabilities (their arg max is predict_proba's)."""
    if decision.ndim == 1:
        c = calibration["classes"][0]
        return -(c["a"] * decision + c["b"])
    return np.log(np.maximum(probabilities(calibration, decision), np.finfo(float).tiny))
