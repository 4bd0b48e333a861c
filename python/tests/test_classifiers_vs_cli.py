"""Every classifier is multiclass as its C++ learner, and predict_proba is the study's Platt scaling: the
estimators fitted on an outer fold's kernels give the CLI's class scores, kernel weights and probabilities."""
import numpy as np
import pytest

import neuromkl
from studies import kernels_in_study_order, model_folder, precomputed_study, read_tsv, run_cli

# learner entry -> estimator with the same fixed parameters (no grid search: the fold fit is the one fit)
MULTICLASS = [
    ({"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}, neuromkl.EnmklSVC(C=1, mu=0.5)),
    ({"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.3}}, neuromkl.EnmklKernelRidgeClassifier(alpha=1, mu=0.3)),
    ({"name": "simplemkl", "params": {"c": 1}}, neuromkl.SimpleMKLClassifier(C=1)),
    ({"name": "mkl_bp", "params": {"c": 1}}, neuromkl.MKLBPClassifier(C=1)),
    ({"name": "svm", "params": {"c": 1}}, neuromkl.SumKernelSVC(C=1)),
    ({"name": "kelm", "params": {"c": 1}}, neuromkl.KELMClassifier(C=1)),
    ({"name": "mkelm", "params": {"c": 1}}, neuromkl.MKELMClassifier(C=1)),
    ({"name": "bsadmm_kelm", "params": {"c": 1}}, neuromkl.BSADMMKELMClassifier(C=1)),
    ({"name": "dkelm", "params": {"c": 1, "neighbours": 5}}, neuromkl.DKELMClassifier(C=1, neighbours=5)),
]


@pytest.mark.parametrize("weights", ["shared", "per_class"])
def test_multiclass_scores_equal_the_cli_for_every_classifier(tmp_path, rng, cli, weights):
    classes = ("a", "b", "c")
    study, labels, fold, names = precomputed_study(tmp_path, rng, classes=classes, n=45, kernels=4, learners=[l for l, _ in MULTICLASS],
                                                   target_extra={"multiclass_weights": weights})
    results = run_cli(cli, tmp_path / "study.json", tmp_path / "cli")
    K, _ = kernels_in_study_order(tmp_path, names, results)
    rows = read_tsv(tmp_path / "cli" / "predictions.tsv")
    y = np.array(classes)[labels]
    largest = {"scores": 0.0, "kernel_weights": 0.0}
    assert [l["label"] for l in results["learners"]] == [l["name"] for l, _ in MULTICLASS]
    for (entry, template), learner in zip(MULTICLASS, results["learners"]):
        est = template.set_params(kernel="precomputed", centre=True, normalise=True)
        if "multiclass_weights" in est.get_params():
            est.set_params(multiclass_weights=weights)
        for f in learner["folds"]:
            tr, te = np.flatnonzero(fold != f["index"]), np.flatnonzero(fold == f["index"])
            est.fit(K[:, tr][:, :, tr], y[tr])
            assert list(est.classes_) == list(classes)
            scores = est.decision_function(K[:, te][:, :, tr], test_diag=np.einsum("kii->ki", K)[:, te])
            cli_scores = np.array([[float(r[f"score_{c}"]) for c in classes] for r in rows
                                   if r["learner"] == learner["label"] and r["fold"] == str(f["index"])])
            # 1e-10: the same C++ fit on the same doubles (predictions.tsv round-trips every digit); the two
            # differ only in how the fold's kernels were sliced and prepared (in place vs copies)
            largest["scores"] = max(largest["scores"], np.abs(scores - cli_scores).max())
            np.testing.assert_allclose(scores, cli_scores, rtol=0, atol=1e-10, err_msg=f"{learner['label']} fold {f['index']}")
            assert list(est.predict(K[:, te][:, :, tr], test_diag=np.einsum("kii->ki", K)[:, te])) == \
                [classes[int(v)] for v in f["decision_values"]]
            card = neuromkl.load_model(model_folder(tmp_path / "cli", learner["label"]) / "folds" / str(f["index"])).card
            beta = est.class_kernel_weights_ if (weights == "per_class" and hasattr(est, "class_kernel_weights_")) else est.kernel_weights_
            beta = np.broadcast_to(np.asarray(beta).reshape(len(beta), -1), card.beta.shape)
            largest["kernel_weights"] = max(largest["kernel_weights"], np.abs(beta - card.beta).max())
            np.testing.assert_allclose(beta, card.beta, rtol=0, atol=1e-10, err_msg=learner["label"])
    print(f"multiclass ({weights}), largest differences to the CLI:", {k: f"{v:.2e}" for k, v in largest.items()})


def test_binary_probabilities_equal_the_cli_platt_scaling(tmp_path, rng, cli):
    """probability=True with the inner folds of a study (same scheme, k and seed) gives the fold's Platt A, B and
    probabilities; the seed is the one the study derives for outer fold f: DeriveSeed(cv seed, 1000 + f)."""
    learners = [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}, {"name": "svm", "params": {"c": 1}},
                {"name": "kelm", "params": {"c": 1}}]
    study, labels, fold, names = precomputed_study(tmp_path, rng, n=60, learners=learners, inner={"scheme": "stratified_kfold", "k": 4})
    results = run_cli(cli, tmp_path / "study.json", tmp_path / "cli")
    K, _ = kernels_in_study_order(tmp_path, names, results)
    y = labels  # 1 = "case", the study's positive class, sorts last: classes_[1] is its +1 class
    diag = np.einsum("kii->ki", K)
    estimators = [neuromkl.EnmklSVC(C=1, mu=0.5), neuromkl.SumKernelSVC(C=1), neuromkl.KELMClassifier(C=1)]
    largest = 0.0
    for est, learner in zip(estimators, results["learners"]):
        for f in learner["folds"]:
            tr, te = np.flatnonzero(fold != f["index"]), np.flatnonzero(fold == f["index"])
            est.set_params(kernel="precomputed", centre=True, normalise=True, probability=True, probability_cv=4,
                           random_state=neuromkl._core.derive_seed(study["seed"], 1000 + f["index"]))
            est.fit(K[:, tr][:, :, tr], y[tr])
            platt = est.calibration_["classes"][0]
            assert platt["samples"] == f["platt"]["samples"] == len(tr)
            # A, B: 1e-9 relative; the out-of-fold decision values agree to ~1e-12 and Newton's method maps them smoothly
            np.testing.assert_allclose([platt["a"], platt["b"]], [f["platt"]["a"], f["platt"]["b"]], rtol=1e-9, err_msg=learner["label"])
            proba = est.predict_proba(K[:, te][:, :, tr], test_diag=diag[:, te])
            assert list(est.classes_) == [0, 1]
            largest = max(largest, np.abs(proba[:, 1] - np.asarray(f["probabilities"])).max())
            np.testing.assert_allclose(proba[:, 1], f["probabilities"], rtol=0, atol=1e-10, err_msg=learner["label"])
            np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-15)
    print(f"largest |probability - CLI probability|: {largest:.2e}")


def test_probability_is_declared_only_when_fitted_for_it(rng):
    X = rng.normal(size=(40, 4))
    y = np.where(X[:, 0] > 0, "p", "n")
    plain = neuromkl.EnmklSVC().fit(X, y)
    assert not hasattr(plain, "predict_proba") and plain._get_tags()["neuromkl_probability"] is None
    calibrated = neuromkl.EnmklSVC(probability=True).fit(X, y)
    assert hasattr(calibrated, "predict_proba") and calibrated._get_tags()["neuromkl_probability"] == "platt_inner_cv"
    p = calibrated.predict_proba(X)
    assert p.shape == (40, 2) and np.all((p >= 0) & (p <= 1))
    # a monotone map of the learner's decision value: the ranking is the decision values' ranking
    d = calibrated.raw_decision_function(X)
    assert np.all(np.diff(p[np.argsort(d), 1]) >= 0)
    np.testing.assert_array_equal(d, plain.decision_function(X))  # calibration does not change the fit
    # decision_function is then the calibrated log-odds: predict, predict_proba and decision_function agree
    c = calibrated.calibration_["classes"][0]
    np.testing.assert_allclose(calibrated.decision_function(X), -(c["a"] * d + c["b"]), rtol=0, atol=1e-12)
    assert list(calibrated.predict(X)) == list(calibrated.classes_[np.argmax(p, axis=1)])


def test_multiclass_probabilities_are_normalised_one_vs_rest_platt(rng):
    centres = np.array([[3, 0, 0], [0, 3, 0], [0, 0, 3]])
    labels = rng.integers(0, 3, size=90)
    X = centres[labels] + rng.normal(size=(90, 3))
    y = np.array(["a", "b", "c"])[labels]
    est = neuromkl.EnmklSVC(C=1, probability=True, probability_cv=3, random_state=5).fit(X, y)
    scores = est.raw_decision_function(X)
    p = est.predict_proba(X)
    raw = np.column_stack([neuromkl._core.platt_probabilities(c["a"], c["b"], c["samples"], np.ascontiguousarray(scores[:, k]))
                           for k, c in enumerate(est.calibration_["classes"])])
    np.testing.assert_allclose(p, raw / raw.sum(axis=1, keepdims=True), atol=1e-15)
    assert (np.argmax(p, axis=1) == labels).mean() > 0.9
    assert all(c["a"] < 0 for c in est.calibration_["classes"])  # a larger class score means that class
