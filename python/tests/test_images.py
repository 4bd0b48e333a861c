"""RegionKernels: nibabel images -> region kernels -> an ENMKL estimator -> coefficient and pattern images, equal to
what `neuromkl run` computes for the same outer folds of the shipped Wager cohort."""
import json
import subprocess

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline

import neuromkl
from studies import read_tsv

nibabel = pytest.importorskip("nibabel")
TIGHT = {"tolerance": 1e-10, "objective_tolerance": 1e-10}


@pytest.fixture(scope="module")
def wager_run(tmp_path_factory, source_dir, cli):
    tmp = tmp_path_factory.mktemp("wager_images")
    cohort = source_dir / "examples" / "wager2008_emoreg"
    study = json.loads((cohort / "study.json").read_text())
    study.pop("$schema", None)
    # Fixed parameters (the fold fit is the one fit), the solver run to 1e-10 on both sides: at the default 1e-6
    # stopping rule the kernel weights are only determined to about 1e-6 themselves.
    study["learners"] = [{"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5, **TIGHT}}]
    study["permutations"] = {"count": 0}
    study["subjects"]["table"] = str(cohort / "participants.tsv")
    (tmp / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(tmp / "study.json"), "-q", "--out", str(tmp / "run")], check=True)
    with open(tmp / "run" / "results.json") as f:
        results = json.load(f)
    rows = read_tsv(cohort / "participants.tsv")
    imgs = [nibabel.load(cohort / r["image"]) for r in rows]
    return tmp / "run", results, [r["subject"] for r in rows], imgs, np.array([float(r["Y_Reappraisal_Success"]) for r in rows])


def _finite_everywhere(imgs):
    """The study's non-finite rule over the whole cohort (drop_voxel: a voxel non-finite in any subject is dropped,
    a rule without targets), as a mask: fold transformers see only their training images."""
    finite = np.all([np.isfinite(img.get_fdata(dtype=np.float32)) for img in imgs], axis=0)
    return nibabel.Nifti1Image(finite.astype(np.uint8), imgs[0].affine)


def _map_gap(made, run, path):
    """|made - CLI map| relative to the CLI map's largest voxel (the maps carry the images' units)."""
    cli_map = nibabel.load(run / path).get_fdata(dtype=np.float64)
    assert made.shape == cli_map.shape
    return np.abs(made.get_fdata() - cli_map).max() / np.abs(cli_map).max()


def _study_way_gaps(run, results, ids, imgs, y, make_estimator):
    """The study's way: one transformer over the cohort's images (the kernel stage sees every image too: its
    non-finite rule and kernels use no target), each outer fold's estimator fitted on its training rows, its maps
    from those rows (train=). Returns the largest differences to the CLI."""
    learner = results["learners"][0]
    rk = neuromkl.RegionKernels(atlas="aal")
    K = np.asarray(rk.fit_transform(imgs))
    names, _, cli_kernels = neuromkl.load_kernels(run)
    assert rk.kernel_names_ == names
    np.testing.assert_array_equal(K, cli_kernels)  # the kernel stage's arithmetic, bit for bit
    diag = np.einsum("kii->ki", K)
    gaps = {"kernel_weights": 0.0, "decision": 0.0, "weights_map": 0.0, "pattern_map": 0.0, "mean_map": 0.0}
    mean_map = 0.0
    for f, fold in enumerate(learner["folds"]):
        te = [ids.index(s) for s in fold["test_subjects"]]
        tr = [i for i in range(len(ids)) if i not in te]
        est = make_estimator().fit(K[:, tr][:, :, tr], y[tr])
        gaps["kernel_weights"] = max(gaps["kernel_weights"], np.abs(est.kernel_weights_ - fold["kernel_weights"]).max())
        decision = (est.decision_function if hasattr(est, "decision_function") else est.predict)(K[:, te][:, :, tr], test_diag=diag[:, te])
        gaps["decision"] = max(gaps["decision"], np.abs(decision - fold["decision_values"]).max())
        coef = rk.coef_img(est, train=tr)
        assert np.allclose(coef.affine, imgs[0].affine)
        gaps["weights_map"] = max(gaps["weights_map"], _map_gap(coef, run, learner["weight_maps"]["folds"][f]))
        gaps["pattern_map"] = max(gaps["pattern_map"], _map_gap(rk.pattern_img(est, train=tr), run, learner["weight_maps"]["pattern"]["folds"][f]))
        mean_map = mean_map + coef.get_fdata() / len(learner["folds"])
    cli_mean = nibabel.load(run / learner["weight_maps"]["mean"]).get_fdata()
    gaps["mean_map"] = np.abs(mean_map - cli_mean).max() / np.abs(cli_mean).max()
    return gaps


def test_cohort_kernels_and_fold_fits_reproduce_the_cli(wager_run):
    """Regression (Wager): kernels, ENMKL-KRR weights, decisions and maps are the CLI's."""
    run, results, ids, imgs, y = wager_run
    gaps = _study_way_gaps(run, results, ids, imgs, y,
                           lambda: neuromkl.EnmklKernelRidge(alpha=1, mu=0.5, **TIGHT, kernel="precomputed", centre=True, normalise=True))
    print("Wager, study's way, largest differences to the CLI:", {k: f"{v:.2e}" for k, v in gaps.items()})
    # 1e-6: the same kernels and C++ fit; what remains is the maps' float32 files (6e-8 of a voxel) and results.json's
    # 17 significant digits
    for key, gap in gaps.items():
        assert gap < 1e-6, (key, gap)


def test_stability_maps_are_those_of_the_fold_maps(wager_run):
    """load_results gives the stability maps; they equal mean / SD and the sign consistency of the fold maps."""
    run, results, ids, imgs, y = wager_run
    maps = neuromkl.load_results(run).weight_maps[results["learners"][0]["label"]]
    folds = np.stack([nibabel.load(p).get_fdata(dtype=np.float32).astype(np.float64) for p in maps["folds"]])
    k = len(folds)
    sd = folds.std(axis=0, ddof=1)
    expected_ratio = np.divide(folds.mean(axis=0), sd, out=np.zeros_like(sd), where=sd > 0)
    balance = np.abs((folds > 0).sum(axis=0) - (folds < 0).sum(axis=0))
    expected_sign = np.where((folds != 0).any(axis=0), balance / k, 0.0)
    ratio = nibabel.load(maps["stability"]).get_fdata(dtype=np.float32)
    sign = nibabel.load(maps["sign_consistency"]).get_fdata(dtype=np.float32)
    # float32 files of values computed in double: float precision relative to each value
    np.testing.assert_allclose(ratio, expected_ratio, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(sign, expected_sign.astype(np.float32))


def _simulated_enmkl_svm_run(tmp_path, cli, simulate_options):
    """A cohort simulated into tmp_path/sim and run by the CLI with a fixed ENMKL-SVM over 3 x 3 stratified folds into
    tmp_path/run: the study, results.json, the subjects' rows and their images."""
    subprocess.run([cli, "simulate", "--out", str(tmp_path / "sim"), *simulate_options, "-q"], check=True)
    study = json.loads((tmp_path / "sim" / "study.json").read_text())
    study["learners"] = [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]
    study["permutations"] = {"count": 0}
    study["cv"] = {"outer": {"scheme": "stratified_kfold", "k": 3}, "inner": {"scheme": "stratified_kfold", "k": 3}}
    (tmp_path / "sim" / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(tmp_path / "sim" / "study.json"), "-q", "--out", str(tmp_path / "run")], check=True)
    with open(tmp_path / "run" / "results.json") as f:
        results = json.load(f)
    rows = read_tsv(tmp_path / "sim" / "participants.tsv")
    return study, results, rows, [nibabel.load(tmp_path / "sim" / r["image"]) for r in rows]


def test_enmkl_svc_on_a_simulated_classification_cohort_reproduces_the_cli(tmp_path, cli):
    """Classification: images -> RegionKernels -> EnmklSVC -> coefficient image, the CLI's weights and maps."""
    _, results, rows, imgs = _simulated_enmkl_svm_run(tmp_path, cli, ["--subjects", "30", "--seed", "4"])
    y = np.array([r["group"] for r in rows])  # "patient" (the positive class) sorts after "control": classes_[1]
    gaps = _study_way_gaps(tmp_path / "run", results, [r["subject"] for r in rows], imgs, y,
                           lambda: neuromkl.EnmklSVC(C=1, mu=0.5, kernel="precomputed", centre=True, normalise=True))
    print("simulated classification, study's way, largest differences to the CLI:", {k: f"{v:.2e}" for k, v in gaps.items()})
    for key, gap in gaps.items():
        assert gap < 1e-6, (key, gap)


def test_fold_pipeline_on_training_images_agrees_with_the_cli(wager_run):
    """The scikit-learn way: per outer fold, transformer -> ENMKL-KRR fitted on the fold's training images only
    (the cohort's non-finite voxels as a mask, the study's target-free rule), then the coefficient image."""
    run, results, ids, imgs, y = wager_run
    learner = results["learners"][0]
    names = [r["name"] for r in results["kernels"]["regions"]]
    mask = _finite_everywhere(imgs)
    gaps = {"kernel_weights": 0.0, "decision": 0.0, "weights_map": 0.0, "pattern_map": 0.0}
    for f, fold in enumerate(learner["folds"]):
        te = [ids.index(s) for s in fold["test_subjects"]]
        tr = [i for i in range(len(ids)) if i not in te]
        pipe = make_pipeline(neuromkl.RegionKernels(atlas="aal", mask_img=mask),
                             neuromkl.EnmklKernelRidge(alpha=1, mu=0.5, **TIGHT, kernel="precomputed", centre=True, normalise=True))
        pipe.fit([imgs[i] for i in tr], y[tr])
        transformer, est = pipe[0], pipe[-1]
        assert transformer.kernel_names_ == names
        gaps["kernel_weights"] = max(gaps["kernel_weights"], np.abs(est.kernel_weights_ - fold["kernel_weights"]).max())
        gaps["decision"] = max(gaps["decision"], np.abs(pipe.predict([imgs[i] for i in te]) - fold["decision_values"]).max())
        gaps["weights_map"] = max(gaps["weights_map"], _map_gap(transformer.coef_img(est), run, learner["weight_maps"]["folds"][f]))
        gaps["pattern_map"] = max(gaps["pattern_map"], _map_gap(transformer.pattern_img(est), run, learner["weight_maps"]["pattern"]["folds"][f]))
    print("fold pipeline, largest differences to the CLI:", {k: f"{v:.2e}" for k, v in gaps.items()})
    # The kernels' float32 products are taken against a reference row (the first image: the fold's here, the
    # cohort's in the study), so the two kernels differ by up to 1e-6 of a kernel's centred spread where the first
    # training images differ (one fold here); weights and decisions follow to 1e-6, the maps to 3e-6 of their
    # largest voxel.
    assert gaps["kernel_weights"] < 1e-6 and gaps["decision"] < 1e-6, gaps
    assert gaps["weights_map"] < 3e-6 and gaps["pattern_map"] < 3e-6, gaps


def test_transform_carries_self_similarities_and_equals_the_training_kernels(wager_run):
    _, _, _, imgs, y = wager_run
    rk = neuromkl.RegionKernels(atlas="aal")
    train = rk.fit_transform(imgs[:20])
    assert isinstance(train, neuromkl.KernelStack) and train.shape == (len(rk.kernel_names_), 20, 20)
    again = rk.transform(imgs[:20])
    assert again.shape == train.shape and again.test_diag.shape == (len(rk.kernel_names_), 20)
    # sgemm (test rows) and ssyrk (training block) sum the same float32 products in another order
    np.testing.assert_allclose(again, train, rtol=1e-6, atol=1e-6 * np.abs(train).max())
    np.testing.assert_allclose(again.test_diag, np.einsum("kii->ki", np.asarray(train)), rtol=1e-6)
    assert train[:, :5].test_diag is None  # a slice is a plain stack: its self-similarities are not the parent's
    new = rk.transform(imgs[20:])
    assert new.shape == (len(rk.kernel_names_), 10, 20)
    # the drop_voxel rule saw only the training images: a voxel non-finite in a new image counts as the training mean
    assert np.isfinite(np.asarray(new)).all()


def test_paths_and_nibabel_images_give_the_same_kernels(wager_run, source_dir):
    _, _, _, imgs, _ = wager_run
    paths = [img.get_filename() for img in imgs[:8]]
    a = neuromkl.RegionKernels().fit_transform(paths)
    b = neuromkl.RegionKernels().fit_transform(imgs[:8])
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_images_on_another_grid_are_refused(wager_run):
    _, _, _, imgs, _ = wager_run
    affine = imgs[1].affine.copy()
    affine[2, 3] += 3.0
    moved = nibabel.Nifti1Image(imgs[1].get_fdata(dtype=np.float32), affine)
    with pytest.raises(neuromkl.GeometryMismatch, match="image 1: its grid differs"):
        neuromkl.RegionKernels().fit([imgs[0], moved])
    rk = neuromkl.RegionKernels().fit(imgs[:5])
    with pytest.raises(neuromkl.GeometryMismatch):
        rk.transform([moved])
    with pytest.raises(ValueError, match="nan_policy"):
        neuromkl.RegionKernels(nan_policy="mean").fit(imgs[:5])


def test_multiclass_coefficient_images_are_the_cli_class_maps(tmp_path, cli):
    """Three classes: coef_img has one volume per class; their mean over the outer folds is the CLI's class mean map."""
    study, results, rows, imgs = _simulated_enmkl_svm_run(tmp_path, cli, ["--subjects", "36", "--classes", "3", "--seed", "6"])
    ids = [r["subject"] for r in rows]
    y = np.array([r[study["target"]["column"]] for r in rows])
    rk = neuromkl.RegionKernels()
    K = np.asarray(rk.fit_transform(imgs))
    folds = results["learners"][0]["folds"]
    mean = 0.0
    for fold in folds:
        te = [ids.index(s) for s in fold["test_subjects"]]
        tr = [i for i in range(len(ids)) if i not in te]
        est = neuromkl.EnmklSVC(C=1, mu=0.5, kernel="precomputed", centre=True, normalise=True).fit(K[:, tr][:, :, tr], y[tr])
        img = rk.coef_img(est, train=tr)
        assert img.shape == imgs[0].shape + (3,)
        mean = mean + img.get_fdata() / len(folds)
    classes = sorted(set(y))
    for c, name in enumerate(classes):
        (path,) = (tmp_path / "run" / "weights").glob(f"*Class{name}Mean_weights.nii.gz")
        cli_map = nibabel.load(path).get_fdata()
        gap = np.abs(mean[..., c] - cli_map).max() / np.abs(cli_map).max()
        print(f"class {name}: largest difference to the CLI's class mean map {gap:.2e}")
        assert gap < 1e-6, (name, gap)  # float32 sums of the fold maps in another order


def test_feature_cache_entry_is_what_numpy_reads(tmp_path, cli):
    """A study on features keeps its matrix in the kernel cache as numpy files: features.npy (one row per subject, the
    regions' voxels in index.json's region_start columns) and raw_diagonals.npy (each region's ||x_ir||^2), which numpy
    computes again from the matrix it loads (float32 values squared and summed in float64 on both sides: to 1e-12)."""
    subprocess.run([cli, "simulate", "--out", str(tmp_path / "sim"), "--subjects", "24", "--downsample", "3", "--seed", "2", "-q"], check=True)
    study = {"name": "cached", "subjects": {"table": str(tmp_path / "sim" / "participants.tsv")},
             "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
             "kernels": {"representation": "features"}, "learners": [{"name": "svm", "params": {"c": 1}}],
             "cv": {"outer": {"scheme": "stratified_kfold", "k": 3}}, "output": {"cache_dir": str(tmp_path / "cache")}, "seed": 1}
    (tmp_path / "study.json").write_text(json.dumps(study))
    subprocess.run([cli, "run", str(tmp_path / "study.json"), "--out", str(tmp_path / "out"), "-q"], check=True)
    (entry,) = list((tmp_path / "cache").iterdir())
    index = json.loads((entry / "index.json").read_text())
    assert index["format"] == "neuromkl-features" and index["storage"] == "float32"
    x = np.load(entry / "features.npy", mmap_mode="r")
    assert x.dtype == np.float32 and x.shape == (len(index["subjects"]), index["voxels"])
    starts = index["region_start"]
    diagonals = np.load(entry / "raw_diagonals.npy")
    assert diagonals.shape == (len(index["kernels"]), x.shape[0]) and len(starts) == len(index["kernels"]) + 1
    for r in range(len(index["kernels"])):
        block = np.asarray(x[:, starts[r]:starts[r + 1]], dtype=np.float64)
        np.testing.assert_allclose(diagonals[r], (block ** 2).sum(axis=1), rtol=1e-12, atol=0)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [k["name"] for k in index["kernels"]] == [k["name"] for k in results["kernels"]["regions"]]
