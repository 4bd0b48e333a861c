"""Studies from Python against the CLI: same outputs, same numbers (ENMKL weights to 1e-12), same errors."""
import json
import subprocess

import numpy as np
import pytest

import neuromkl

LEARNERS = [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}, {"name": "enmkl_krr", "label": "enmkl_krr_reg", "params": {"lambda": 1, "mu": 0.3}},
            {"name": "simplemkl", "params": {"c": 1}}]


def _precomputed_study(tmp_path, rng, n=42, kernels=5):
    """n subjects, `kernels` precomputed linear kernels of which two carry the class; custom outer folds."""
    y = np.array([1] * (n // 2) + [0] * (n - n // 2))
    rng.shuffle(y)
    names = []
    for k in range(kernels):
        X = rng.normal(size=(n, 3 + 2 * k))
        if k in (1, 3):
            X[:, 0] += 1.5 * (2 * y - 1)
        np.save(tmp_path / f"k{k}.npy", X @ X.T)
        names.append(f"k{k}")
    fold = np.arange(n) % 3
    with open(tmp_path / "participants.tsv", "w") as f:
        f.write("subject\tgroup\tfold\n")
        for i in range(n):
            f.write(f"s{i:02d}\t{'case' if y[i] else 'control'}\t{fold[i]}\n")
    study = {"name": "pre", "subjects": {"table": "participants.tsv"},
             "target": {"column": "group", "task": "classification", "positive_class": "case"},
             "kernels": {"source": "precomputed", "precomputed": [{"name": nm, "file": f"{nm}.npy"} for nm in names]},
             "cv": {"outer": {"scheme": "custom", "fold_column": "fold"}}, "learners": LEARNERS, "seed": 7}
    (tmp_path / "study.json").write_text(json.dumps(study))
    return study, y, fold, names


def _strip_run_details(results):
    """results.json minus what legitimately differs between two runs: timings, date, paths, whether the
    kernel cache was hit, and the input hash (it covers the resolved config, which names the output folder)."""
    r = json.loads(json.dumps(results))
    for key in ("date", "seconds", "threads", "config", "input_hash"):
        r.pop(key, None)
    r["kernels"].pop("cache", None)
    for l in r["learners"]:
        for f in l["folds"]:
            f.get("fit", {}).pop("seconds", None)
    return r


def test_run_study_equals_the_cli_and_enmkl_weights_equal_python_fits(tmp_path, rng, cli):
    study, y, fold, names = _precomputed_study(tmp_path, rng)
    subprocess.run([cli, "run", str(tmp_path / "study.json"), "-q", "--out", str(tmp_path / "cli")], check=True)
    cli_res = neuromkl.load_results(tmp_path / "cli")
    py_res = neuromkl.run_study(tmp_path / "study.json", out_dir=tmp_path / "py")
    from_dict = neuromkl.run_study(study, base_dir=tmp_path, out_dir=tmp_path / "dict")
    # identical numbers and the same files as the CLI
    assert _strip_run_details(py_res.results) == _strip_run_details(cli_res.results)
    assert _strip_run_details(from_dict.results)["learners"] == _strip_run_details(cli_res.results)["learners"]
    cli_files = sorted(p.relative_to(tmp_path / "cli") for p in (tmp_path / "cli").rglob("*"))
    assert sorted(p.relative_to(tmp_path / "py") for p in (tmp_path / "py").rglob("*")) == cli_files
    for name in ("predictions.tsv", "folds.tsv", "regions_enmkl_svm.tsv"):
        assert (tmp_path / "py" / name).read_text() == (tmp_path / "cli" / name).read_text(), name
    assert py_res.summary and py_res.learners == ["enmkl_svm", "enmkl_krr_reg", "simplemkl"]

    # The estimators on the same kernels, fold by fold: the CLI's outer-fold fits (no grid: fixed parameters).
    K = np.stack([np.load(tmp_path / f"{nm}.npy") for nm in names])
    order = [r["name"] for r in cli_res.results["kernels"]["regions"]]
    K = K[[names.index(o) for o in order]]
    labels = y  # 1 = "case", the study's positive class, sorts last: classes_[1] is the +1 class as in the CLI
    estimators = {"enmkl_svm": neuromkl.EnmklSVC(C=1, mu=0.5), "enmkl_krr_reg": neuromkl.EnmklKernelRidgeClassifier(alpha=1, mu=0.3),
                  "simplemkl": neuromkl.SimpleMKLClassifier(C=1)}
    for learner in cli_res.results["learners"]:
        est = estimators[learner["label"]].set_params(kernel="precomputed", centre=True, normalise=True)
        for f in learner["folds"]:
            te = np.flatnonzero(fold == f["index"])
            assert [f"s{i:02d}" for i in te] == f["test_subjects"]
            tr = np.flatnonzero(fold != f["index"])
            est.fit(K[:, tr][:, :, tr], labels[tr])
            # 1e-12: same C++ code on the same doubles; only the JSON round trip (17 significant digits) separates them
            np.testing.assert_allclose(est.kernel_weights_, f["kernel_weights"], rtol=0, atol=1e-12, err_msg=learner["label"])
            dec = est.decision_function(K[:, te][:, :, tr], test_diag=K[:, te, te])
            np.testing.assert_allclose(dec, f["decision_values"], rtol=0, atol=1e-12, err_msg=learner["label"])
            assert est.intercept_ == pytest.approx(f["bias"], abs=1e-12)


def test_results_as_python_objects(tmp_path, rng):
    pd = pytest.importorskip("pandas")
    study, *_ = _precomputed_study(tmp_path, rng)
    res = neuromkl.run_study(study, base_dir=tmp_path)
    assert res.output_dir == str(tmp_path / "results" / "pre")
    assert isinstance(res.metrics, pd.DataFrame) and {"learner", "metric"} <= set(res.metrics.columns)
    table = res.regions["enmkl_svm"]
    assert isinstance(table, pd.DataFrame) and len(table) == 5
    assert set(table["name"].iloc[:2]) == {"k1", "k3"}  # the two kernels that carry the class rank first
    assert len(res.kernel_weights("enmkl_svm")) == 3
    assert res.report and res.report.endswith("report.html")
    assert res.weight_maps == {}  # no images: no voxel maps
    again = neuromkl.load_results(res.output_dir)
    assert again.results == res.results
    # Three learners on the same folds: every pair compared (comparisons.tsv); the pooled metrics carry their intervals.
    assert len(res.learners) == 3 and isinstance(res.comparisons, pd.DataFrame) and len(res.comparisons) > 0
    assert "corrected_resampled_t" in set(res.comparisons["test"]) and set(res.comparisons["learner_a"]) <= set(res.learners)
    ba = res.metrics[res.metrics["metric"] == "balanced_accuracy"].iloc[0]
    assert ba["pooled_ci95_low"] <= ba["pooled"] <= ba["pooled_ci95_high"]
    # Each decision split over the kernels: bias + the parts = the decision value.
    parts = res.attributions
    np.testing.assert_allclose(parts["bias"] + parts[[f"k{k}" for k in range(5)]].sum(axis=1), parts["decision"], rtol=1e-9, atol=1e-12)
    assert res.region_scan is None and res.ablation is None


def test_region_scan_and_ablation_from_python(tmp_path, rng):
    """The opt-in analyses from a study dict: the kernels carrying the class lead the scan, and leaving out the
    strongest costs balanced accuracy."""
    pytest.importorskip("pandas")
    study, *_ = _precomputed_study(tmp_path, rng)
    study["learners"] = [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]
    study["region_scan"] = {"learner": "enmkl_svm"}
    study["ablation"] = {"learner": "enmkl_svm", "top_regions": 2}
    res = neuromkl.run_study(study, base_dir=tmp_path, out_dir=tmp_path / "scan")
    assert set(res.region_scan["name"].iloc[:2]) == {"k1", "k3"}
    assert list(res.ablation["kind"]) == ["region", "region"]
    assert list(res.ablation["removed"]) == list(res.regions["enmkl_svm"]["name"].iloc[:2])
    assert res.results["region_scan"]["metric"] == "balanced_accuracy"


def test_study_errors_match_the_cli(tmp_path, rng, cli):
    study, *_ = _precomputed_study(tmp_path, rng)
    study["learners"][0]["params"]["lamda"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(study))
    cli_run = subprocess.run([cli, "run", str(tmp_path / "bad.json"), "-q"], capture_output=True, text=True)
    assert cli_run.returncode == 2
    with pytest.raises(neuromkl.NeuromklError) as e:
        neuromkl.run_study(tmp_path / "bad.json")
    assert str(e.value) in cli_run.stderr and e.value.code in cli_run.stderr
    with pytest.raises(neuromkl.IoError, match="not a neuromkl results folder"):
        neuromkl.load_results(tmp_path)


def test_thread_count_is_checked_as_the_study_files(tmp_path, rng):
    """run_study's threads is the study's /threads: the same check and message as a value in the file."""
    study, *_ = _precomputed_study(tmp_path, rng)
    study = dict(study, learners=[{"name": "svm"}])
    (tmp_path / "study.json").write_text(json.dumps(study))
    with pytest.raises(neuromkl.ConfigError) as from_argument:
        neuromkl.run_study(tmp_path / "study.json", out_dir=tmp_path / "out", threads=5000)
    assert from_argument.value.code == "config:Value"
    assert "/threads: expected an integer in [0, 4096], found 5000" in str(from_argument.value)
    assert not (tmp_path / "out").exists()
    (tmp_path / "threads.json").write_text(json.dumps(dict(study, threads=5000)))
    with pytest.raises(neuromkl.ConfigError) as from_file:
        neuromkl.run_study(tmp_path / "threads.json", out_dir=tmp_path / "out")
    assert str(from_file.value).replace(str(tmp_path / "threads.json"), "") == str(from_argument.value).replace(str(tmp_path / "study.json"), "")


def test_worked_example_on_the_shipped_cohort(tmp_path, source_dir):
    """examples/python/wager2008_example.py runs end to end on examples/wager2008_emoreg."""
    import os
    import sys

    env = dict(os.environ)
    out = subprocess.run([sys.executable, str(source_dir / "examples" / "python" / "wager2008_example.py"), "--out", str(tmp_path / "wager")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "heaviest regions:" in out.stdout and "ENMKL-KRR on 24 subjects, " in out.stdout
    assert (tmp_path / "wager" / "results.json").is_file() and (tmp_path / "wager" / "report.html").is_file()
    names, subjects, K = neuromkl.load_kernels(tmp_path / "wager")
    assert K.shape == (len(names), 30, 30) and len(subjects) == 30
    np.testing.assert_allclose(K, K.transpose(0, 2, 1), atol=0)


def test_load_kernels_refuses_a_feature_cache_entry(tmp_path):
    """A study on features keeps its voxels in the cache (features.npy), not kernels: load_kernels says so."""
    (tmp_path / "index.json").write_text(json.dumps({"format": "neuromkl-features", "version": 1, "kernels": [{"name": "Precentral_L"}]}))
    with pytest.raises(neuromkl.IoError, match="is a feature cache entry"):
        neuromkl.load_kernels(tmp_path)
