"""neuromkl.load_model: an exported model scores new subjects as `neuromkl predict` does (pipeline::ModelScores),
from image paths, nibabel images, a subjects table or kernel rows."""
import json
import shutil
import subprocess

import numpy as np
import pytest

import neuromkl
from studies import kernels_in_study_order, model_folder, precomputed_study, read_tsv, run_cli

nibabel = pytest.importorskip("nibabel")


def _predict(cli, model_dir, table, out):
    subprocess.run([cli, "predict", str(model_dir), str(table), "--out", str(out), "-q"], check=True)
    return read_tsv(out / "predictions.tsv")


def _column(rows, learner, model, column):
    return np.array([float(r[column]) for r in rows if r["learner"] == learner and r["model"] == model])


@pytest.fixture(scope="module")
def wager(tmp_path_factory, source_dir, cli):
    """The shipped Wager cohort (regression, images, AAL), ENMKL-KRR and KRR with fixed parameters, no permutations."""
    tmp = tmp_path_factory.mktemp("wager_model")
    cohort = source_dir / "examples" / "wager2008_emoreg"
    study = json.loads((cohort / "study.json").read_text())
    study.pop("$schema", None)
    study["learners"] = [{"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5}}, {"name": "krr", "params": {"lambda": 1}}]
    study["permutations"] = {"count": 0}
    study["subjects"]["table"] = str(cohort / "participants.tsv")
    (tmp / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(tmp / "study.json"), "-q", "--out", str(tmp / "run")], check=True)
    table = read_tsv(cohort / "participants.tsv")
    paths = [str(cohort / r["image"]) for r in table]
    return tmp, cohort / "participants.tsv", paths


def test_final_and_fold_models_equal_neuromkl_predict_on_images(wager, cli):
    tmp, table, paths = wager
    cli_rows = _predict(cli, tmp / "run" / "model", table, tmp / "pred")
    largest = 0.0
    for label in ("enmkl_krr", "krr"):
        model = neuromkl.load_model(tmp / "run" / "model", learner=label)
        assert model.task == "regression" and model.learner == label and len(model.kernel_names) > 100
        expected = _column(cli_rows, label, "final", "prediction")
        from_paths = model.decision_function(paths)
        from_nibabel = model.decision_function([nibabel.load(p) for p in paths])  # in-memory images
        from_table = model.predict(table)                                          # the table predict reads
        for values in (from_paths, from_nibabel, from_table):
            largest = max(largest, np.abs(values - expected).max())
            # 1e-9: predict's own arithmetic on the same float32 voxels (observed: 0, bit for bit)
            np.testing.assert_allclose(values, expected, rtol=0, atol=1e-9, err_msg=label)
    fold = model_folder(tmp / "run", "enmkl_krr") / "folds" / "2"
    cli_fold = _predict(cli, fold, table, tmp / "pred_fold")
    from_fold = neuromkl.load_model(fold).decision_function([nibabel.load(p) for p in paths])
    np.testing.assert_allclose(from_fold, _column(cli_fold, "enmkl_krr", "fold2", "prediction"), rtol=0, atol=1e-9)
    print(f"largest |load_model - neuromkl predict| over paths, nibabel images and the table: {largest:.2e}")


def test_a_moved_image_is_refused_with_the_grid_named(wager):
    tmp, _, paths = wager
    img = nibabel.load(paths[0])
    affine = img.affine.copy()
    affine[0, 3] += 5.0  # 5 mm to the side: another grid
    shifted = nibabel.Nifti1Image(np.asanyarray(img.dataobj), affine)
    model = neuromkl.load_model(tmp / "run" / "model", learner="krr")
    with pytest.raises(neuromkl.GeometryMismatch, match="not on the model's grid"):
        model.decision_function([shifted])


def test_binary_probabilities_equal_neuromkl_predict(tmp_path, cli):
    """A simulated classification cohort: predict_proba is the model's Platt scaling, as predict's probability column."""
    subprocess.run([cli, "simulate", "--out", str(tmp_path / "sim"), "--subjects", "30", "--seed", "4", "-q"], check=True)
    study = json.loads((tmp_path / "sim" / "study.json").read_text())
    study.pop("$schema", None)
    study["learners"] = [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]
    study["permutations"] = {"count": 0}
    study["cv"] = {"outer": {"scheme": "stratified_kfold", "k": 3}, "inner": {"scheme": "stratified_kfold", "k": 3}}
    (tmp_path / "sim" / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(tmp_path / "sim" / "study.json"), "-q", "--out", str(tmp_path / "run")], check=True)
    table = tmp_path / "sim" / study["subjects"]["table"]
    rows = _predict(cli, tmp_path / "run" / "model", table, tmp_path / "pred")
    model = neuromkl.load_model(tmp_path / "run" / "model")
    assert model.task == "classification" and model.calibration is not None
    proba = model.predict_proba(table)
    assert list(model.classes_) == [model.card.negative_class, model.card.positive_class]
    np.testing.assert_allclose(proba[:, 1], _column(rows, "enmkl_svm", "final", "probability"), rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.decision_function(table), _column(rows, "enmkl_svm", "final", "decision"), rtol=0, atol=1e-9)
    assert list(model.predict(table)) == [r["predicted"] for r in rows]


def test_missing_covariates_and_unseen_levels_are_handled_as_neuromkl_predict(tmp_path, cli):
    """A study that imputes its covariates: load_model fills a missing age (None, as a DataFrame's missing value) with
    the training median and, with unseen_levels="reference", codes an unseen scanner as the reference level, as
    `neuromkl predict --unseen-levels reference` does; "refuse" (the default) is the CLI's error."""
    subprocess.run([cli, "simulate", "--out", str(tmp_path / "sim"), "--subjects", "30", "--seed", "6", "--age-regions", "Frontal_Sup_L", "-q"],
                   check=True)
    sim = tmp_path / "sim"
    study = json.loads((sim / "study.json").read_text())
    study.pop("$schema", None)
    table = sim / study["subjects"]["table"]
    rows = read_tsv(table)
    for i, r in enumerate(rows):
        r["scanner"] = "S1" if i % 2 else "S2"
        r["image"] = str(sim / r["image"])
    rows[4]["age"] = "n/a"  # one training subject lacks an age: imputed inside the folds
    columns = list(rows[0].keys())

    def write(path, subset):
        path.write_text("\t".join(columns) + "\n" + "".join("\t".join(r[c] for c in columns) + "\n" for r in subset))

    write(sim / "with_scanner.tsv", rows)
    study["subjects"]["table"] = "with_scanner.tsv"
    study["covariates"] = {"columns": ["age"], "categorical": ["scanner"], "impute": "median"}
    study["learners"] = [{"name": "svm", "params": {"c": 1}}]
    study["permutations"] = {"count": 0}
    study["cv"] = {"outer": {"scheme": "stratified_kfold", "k": 3}, "inner": {"scheme": "stratified_kfold", "k": 3}}
    (sim / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(sim / "study.json"), "-q", "--out", str(tmp_path / "run")], check=True)

    new = [dict(r) for r in rows[:3]]
    new[0]["age"], new[1]["scanner"] = "", "S9"
    write(tmp_path / "new.tsv", new)
    model = neuromkl.load_model(tmp_path / "run" / "model")
    with pytest.raises(Exception, match="a level the model was not trained with"):
        model.decision_function(tmp_path / "new.tsv")
    subprocess.run([cli, "predict", str(tmp_path / "run" / "model"), str(tmp_path / "new.tsv"), "--unseen-levels", "reference",
                    "--out", str(tmp_path / "pred"), "-q"], check=True)
    expected = _column(read_tsv(tmp_path / "pred" / "predictions.tsv"), "svm", "final", "decision")
    from_path = model.decision_function(tmp_path / "new.tsv", unseen_levels="reference")
    as_table = {c: [r[c] for r in new] for c in columns}
    as_table["age"] = [None] + [float(r["age"]) for r in new[1:]]
    from_table = model.decision_function(as_table, unseen_levels="reference")
    for values in (from_path, from_table):
        np.testing.assert_allclose(values, expected, rtol=0, atol=1e-9)  # predict's own arithmetic, as above
    warnings = " ".join(model.warnings_)
    assert "covariate column \"age\" is missing; imputed with the training subjects' median" in warnings
    assert "holds \"S9\", a level the model was not trained with; coded as the reference level \"S1\"" in warnings
    with pytest.raises(ValueError, match="unseen_levels"):
        model.decision_function(as_table, unseen_levels="guess")


def test_a_tabular_source_imputed_harmonised_and_standardised_in_the_folds_equals_neuromkl_predict(tmp_path, cli):
    """A tabular source with fold statistics (impute, standardise) harmonised by site: load_model fills a missing
    feature (None) with the model's training median, harmonises each row by its site (a new site estimated from its
    subjects) and standardises it, as `neuromkl predict` does; harmonisation_columns names the site column."""
    subprocess.run([cli, "simulate", "--out", str(tmp_path / "sim"), "--subjects", "48", "--seed", "9", "--sites", "2", "--clinical-effect", "1",
                    "-q"], check=True)
    sim = tmp_path / "sim"
    study = json.loads((sim / "study.json").read_text())
    study.pop("$schema", None)
    rows = read_tsv(sim / study["subjects"]["table"])
    for i, r in enumerate(rows):
        r["image"] = str(sim / r["image"])
        shift = 4.0 if r["site"] == "site2" else 0.0
        r["f1"] = "n/a" if i % 9 == 2 else repr(shift + float(r["clinical"]))
        r["f2"] = repr(10.0 + shift + np.sin(1.3 * i))
    columns = list(rows[0].keys())

    def write(path, subset):
        path.write_text("\t".join(columns) + "\n" + "".join("\t".join(r[c] for c in columns) + "\n" for r in subset))

    write(sim / "features.tsv", rows)
    study["subjects"]["table"] = "features.tsv"
    study["kernels"] = {"sources": [{"name": "mri", "kind": "images"},
                                    {"name": "clin", "kind": "tabular", "tabular": {"table": "features.tsv", "groups": {"feat": ["f1", "f2"]},
                                                                                   "standardise": True, "impute": "median"}}]}
    study["harmonisation"] = {"site_column": "site", "sources": ["clin"]}
    study["learners"] = [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]
    study["permutations"] = {"count": 0}
    study["cv"] = {"outer": {"scheme": "stratified_kfold", "k": 3}, "inner": {"scheme": "stratified_kfold", "k": 3}}
    (sim / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(sim / "study.json"), "-q", "--out", str(tmp_path / "run")], check=True)

    new = [dict(r) for r in rows[:12]]
    new[0]["f1"] = ""
    for r in new[6:]:
        r["site"] = "site9"  # a site the model never saw: estimated from these six subjects
    write(tmp_path / "new.tsv", new)
    subprocess.run([cli, "predict", str(tmp_path / "run" / "model"), str(tmp_path / "new.tsv"), "--new-site-min", "6", "--out", str(tmp_path / "pred"),
                    "-q"], check=True)
    expected = _column(read_tsv(tmp_path / "pred" / "predictions.tsv"), "enmkl_svm", "final", "decision")
    model = neuromkl.load_model(tmp_path / "run" / "model")
    assert "site" in model.harmonisation_columns
    as_table = {c: [r[c] for r in new] for c in columns}
    as_table["f1"] = [None] + as_table["f1"][1:]
    np.testing.assert_allclose(model.decision_function(as_table, new_site_min=6), expected, rtol=0, atol=1e-9)  # the same arithmetic
    warnings = " ".join(model.warnings_)
    assert "feature column \"f1\" is missing; imputed with the training subjects' median" in warnings
    assert "source clin: site \"site9\" is not among the model's training sites" in warnings


def test_a_harmonised_model_at_a_new_site_equals_neuromkl_predict(tmp_path, cli):
    """A study harmonised by site, trained on two sites: load_model scores subjects of a third site (nibabel images in a
    table) with that site's ComBat effects estimated from its own subjects, as `neuromkl predict` does, and refuses them
    with new_sites="refuse" or below new_site_min."""
    subprocess.run([cli, "simulate", "--out", str(tmp_path / "sim"), "--subjects", "48", "--seed", "8", "--sites", "3", "--downsample", "3",
                    "--age-regions", "Frontal_Sup_L", "-q"], check=True)
    sim = tmp_path / "sim"
    study = json.loads((sim / "study.json").read_text())
    study.pop("$schema", None)
    rows = read_tsv(sim / study["subjects"]["table"])
    for r in rows:
        r["image"] = str(sim / r["image"])
    columns = list(rows[0].keys())

    def write(path, subset):
        path.write_text("\t".join(columns) + "\n" + "".join("\t".join(r[c] for c in columns) + "\n" for r in subset))

    write(sim / "train.tsv", [r for r in rows if r["site"] != "site3"])
    new = [r for r in rows if r["site"] == "site3"]
    write(tmp_path / "new.tsv", new)
    study["subjects"]["table"] = "train.tsv"
    study["harmonisation"] = {"site_column": "site", "covariates": ["age"]}
    study["learners"] = [{"name": "svm", "params": {"c": 1}}]
    study["permutations"] = {"count": 0}
    study["cv"] = {"outer": {"scheme": "stratified_kfold", "k": 3}, "inner": {"scheme": "stratified_kfold", "k": 3}}
    (sim / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(sim / "study.json"), "-q", "--out", str(tmp_path / "run")], check=True)

    expected = _column(_predict(cli, tmp_path / "run" / "model", tmp_path / "new.tsv", tmp_path / "pred"), "svm", "final", "decision")
    model = neuromkl.load_model(tmp_path / "run" / "model")
    assert model.harmonisation_columns == ["site", "age"]
    table = {"subject": [r["subject"] for r in new], "image": [nibabel.load(r["image"]) for r in new],
             "site": [r["site"] for r in new], "age": [float(r["age"]) for r in new]}
    np.testing.assert_allclose(model.decision_function(table), expected, rtol=0, atol=1e-9)  # predict's own arithmetic
    assert f"site \"site3\" is not among the model's training sites (site1, site2); its ComBat effects were estimated from its {len(new)} subjects" \
        in " ".join(model.warnings_)
    with pytest.raises(Exception, match="that the model was not trained on"):
        model.decision_function(table, new_sites="refuse")
    with pytest.raises(Exception, match="at least 100 needed"):
        model.decision_function(tmp_path / "new.tsv", new_site_min=100)
    with pytest.raises(ValueError, match="new_site_reference"):
        model.decision_function(table, new_site_reference="group")


def test_a_connectivity_model_scores_matrix_files_as_neuromkl_predict(tmp_path, cli):
    """A study of connectomes: load_model reads each new subject's matrix file from the table's connectivity column and
    scores it as `neuromkl predict` does."""
    subprocess.run([cli, "simulate", "--out", str(tmp_path / "sim"), "--subjects", "30", "--seed", "3", "--downsample", "4", "--connectivity", "8",
                    "--connectivity-signal", "node02", "-q"], check=True)
    sim = tmp_path / "sim"
    study = json.loads((sim / "study.json").read_text())
    study.pop("$schema", None)
    study["kernels"] = {"sources": [{"name": "fc", "kind": "connectivity",
                                     "connectivity": {"column": "connectome", "kernels": "node", "nodes": "nodes.tsv"}}]}
    study["learners"] = [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]
    study["permutations"] = {"count": 0}
    (sim / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(sim / "study.json"), "-q", "--out", str(tmp_path / "run")], check=True)
    rows = read_tsv(sim / study["subjects"]["table"])
    expected = _column(_predict(cli, tmp_path / "run" / "model", sim / study["subjects"]["table"], tmp_path / "pred"), "enmkl_svm", "final", "decision")
    model = neuromkl.load_model(tmp_path / "run" / "model")
    assert model.connectivity_columns == ["connectome"]
    table = {"subject": [r["subject"] for r in rows], "connectome": [sim / r["connectome"] for r in rows]}
    np.testing.assert_allclose(model.decision_function(table), expected, rtol=0, atol=1e-9)  # predict's own arithmetic


def test_precomputed_fold_models_reproduce_the_study_decision_values(tmp_path, rng, cli):
    """`neuromkl predict` cannot score precomputed kernels from a table; load_model takes the kernel rows and
    gives each fold model's decision values on its held-out subjects as the nested CV computed them."""
    study, labels, fold, names = precomputed_study(tmp_path, rng, learners=[{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])
    results = run_cli(cli, tmp_path / "study.json", tmp_path / "cli")
    K, _ = kernels_in_study_order(tmp_path, names, results)
    ids = [f"s{i:02d}" for i in range(len(labels))]
    largest = 0.0
    for f in results["learners"][0]["folds"]:
        model = neuromkl.load_model(model_folder(tmp_path / "cli", "enmkl_svm") / "folds" / str(f["index"]))
        tr = [ids.index(s) for s in model.training_ids]
        te = [ids.index(s) for s in f["test_subjects"]]
        d = model.decision_function(kernels=K[:, te][:, :, tr], train_kernels=K[:, tr][:, :, tr], test_diag=np.einsum("kii->ki", K)[:, te])
        largest = max(largest, np.abs(d - f["decision_values"]).max())
        # 1e-9: the fold preprocessing of predict (CentreFold, NormaliseFold) against nested CV's in-place preparation
        np.testing.assert_allclose(d, f["decision_values"], rtol=0, atol=1e-9)
    print(f"largest |load_model - nested CV| on precomputed kernels: {largest:.2e}")
    with pytest.raises(ValueError, match="train_kernels"):
        model.decision_function(kernels=K[:, te][:, :, tr])


def test_bad_model_folders_are_the_cli_errors(tmp_path, wager):
    tmp, _, _ = wager
    with pytest.raises(neuromkl.InputError, match="no model.json"):
        neuromkl.load_model(tmp_path)
    with pytest.raises(ValueError, match="holds the models of 2 learners"):
        neuromkl.load_model(tmp / "run" / "model")
    damaged = tmp_path / "damaged"
    shutil.copytree(model_folder(tmp / "run", "krr"), damaged)
    array = next(damaged.glob("*.npy"))
    data = bytearray(array.read_bytes())
    data[-1] ^= 0xFF
    array.write_bytes(bytes(data))
    with pytest.raises(neuromkl.InputError) as e:
        neuromkl.load_model(damaged)
    assert e.value.code == "model:Corrupt"


def test_a_model_of_a_confound_adjusted_target_keeps_the_least_squares_coefficients(tmp_path, cli):
    """A score adjusted for age (/target/confounds): the final model predicts the score minus its age effect, and keeps
    the coefficients of the score on (1, age) over its training subjects, which numpy's least squares gives again."""
    subprocess.run([cli, "simulate", "--task", "regression", "--out", str(tmp_path / "sim"), "--subjects", "40", "--seed", "5", "--downsample", "4",
                    "--age-regions", "Frontal_Sup_L", "--age-target-correlation", "0.6", "-q"], check=True)
    sim = tmp_path / "sim"
    study = json.loads((sim / "study.json").read_text())
    study.pop("$schema", None)
    study["target"]["confounds"] = ["age"]
    study["learners"] = [{"name": "krr", "params": {"lambda": 1}}]
    study["permutations"] = {"count": 0}
    (sim / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(sim / "study.json"), "-q", "--out", str(tmp_path / "run")], check=True)
    model = neuromkl.load_model(tmp_path / "run" / "model")
    assert model.target_confounds["numeric"] == ["age"]
    assert model.target_confounds["categorical"] == []
    rows = read_tsv(sim / study["subjects"]["table"])
    design = np.column_stack([np.ones(len(rows)), [float(r["age"]) for r in rows]])
    expected, *_ = np.linalg.lstsq(design, np.array([float(r["score"]) for r in rows]), rcond=None)
    # Both solve a well-conditioned 2-column problem (age ~ 70 beside the intercept): agreement to rounding.
    np.testing.assert_allclose(model.target_confounds["coefficients"], expected, rtol=1e-9, atol=1e-12)
    # A study without confounds has none.
    study["target"].pop("confounds")
    (sim / "plain.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(sim / "plain.json"), "-q", "--out", str(tmp_path / "plain")], check=True)
    assert neuromkl.load_model(tmp_path / "plain" / "model").target_confounds is None
