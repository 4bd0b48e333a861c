"""Exported models from Python: ``load_model(dir)`` scores new subjects with `neuromkl predict`'s own code.

A study's ``model/`` folder (docs/predict.md) holds per learner the final model and each outer fold's model.
``load_model`` reads one of them (exporting::ReadModel: checksums and shapes checked) and its
``decision_function`` / ``predict`` / ``predict_proba`` call pipeline::ModelScores, the function behind
`neuromkl predict`, on new images (paths, or nibabel images held in memory), a subjects table or study file, or
kernel rows for precomputed kernels.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from . import _core
from ._volumes import as_volume, is_path

__all__ = ["load_model", "ExportedModel"]


def _input_error(code, where, message):
    err = _core.InputError(message)
    err.code, err.where = code, where
    return err


def _cell(value):
    if value is None:
        return ""  # a missing value, as an empty cell of a table
    if isinstance(value, (float, np.floating)):
        return format(float(value), ".17g")  # every digit: strtod reads back the same double
    return str(value)


def _columns(table):
    """A mapping of column -> values (dict or pandas DataFrame) as plain lists."""
    if hasattr(table, "columns") and hasattr(table, "__getitem__") and not isinstance(table, Mapping):
        return {str(c): list(table[c]) for c in table.columns}
    return {str(k): list(v) for k, v in table.items()}


class ExportedModel:
    """A model exported by a study, ready to score new subjects.

    Attributes: ``learner`` (label), ``learner_name``, ``task`` ("classification", "regression", "multiclass"),
    ``classes_`` (binary: [negative, positive]; multiclass: the class names), ``kernel_names``,
    ``kernel_weights_`` (n_kernels x C), ``intercept_``, ``calibration`` ((A, B) or None), ``bias_correction``
    ((slope, intercept) or None), ``target_confounds`` (a target adjusted for confounds: {"numeric", "categorical",
    "coefficients"}, intercept first; the model predicts the target minus their fitted effect; else None), ``image_sources`` (name, image column, grid), ``covariate_columns``,
    ``harmonisation_columns`` (a harmonised model's site column and preserved covariates), ``connectivity_columns`` (the
    columns of the connectivity matrix files), ``feature_columns``, ``training_ids``, ``expected_performance`` (the nested-CV metrics), ``card`` (the
    underlying C++ model card), ``folder``.
    """

    def __init__(self, card, folder):
        self.card = card
        self.folder = folder
        self.learner = card.learner
        self.learner_name = card.learner_name
        self.task = card.task
        if card.task == "classification":
            self.classes_ = np.array([card.negative_class, card.positive_class])
        elif card.task == "multiclass":
            self.classes_ = np.array(card.class_names)
        self.kernel_names = list(card.kernel_names)
        self.kernel_weights_ = np.asarray(card.beta)
        self.intercept_ = np.asarray(card.bias)
        self.calibration = card.calibration
        self.bias_correction = card.bias_correction
        self.target_confounds = card.target_confounds
        self.image_sources = card.image_sources
        self.covariate_columns = list(card.covariate_columns) + list(card.categorical_covariates)
        self.feature_columns = list(card.feature_columns)
        # Harmonised image sources: the site column and the covariates ComBat preserves.
        self.harmonisation_columns = [c for c in dict.fromkeys(card.harmonisation_columns) if c not in self.covariate_columns]
        # Connectivity sources: the column of each subject's matrix file.
        self.connectivity_columns = list(card.connectivity_columns)
        self.training_ids = list(card.training_ids)
        self.expected_performance = dict(card.expected)

    def __repr__(self):
        return f"<neuromkl.ExportedModel {self.learner} ({self.task}, {self.card.which.split(':')[0]}) from {self.folder}>"

    # ---- scoring ----
    def _scores(self, X, kernels, train_kernels, test_diag, options):
        """Class scores (m x C) of new subjects: pipeline::ModelScores, the arithmetic of `neuromkl predict`."""
        if isinstance(X, (str, os.PathLike)) and not self._looks_like_image(X):
            scores, warnings, ids = _core.model_scores_of_input(self.card, os.fspath(X), **options)
            self.warnings_ = list(warnings)
            return scores
        sources = self.card.image_sources
        images, volumes, cells, ids = {}, {}, {}, None
        if X is None:
            pass
        elif isinstance(X, Mapping) or hasattr(X, "columns"):
            columns = _columns(X)
            ids = [str(v) for v in columns.get(self.card.id_column, [])] or None
            by_column = {s["image_column"]: s["name"] for s in sources}
            for column, values in columns.items():
                if column in by_column:
                    self._add_images(by_column[column], values, images, volumes)
                elif column in self._table_columns():
                    cells[column] = [os.fspath(v) if column in self.connectivity_columns else _cell(v) for v in values]
            missing = [c for c in by_column if c not in columns] + [c for c in self._table_columns() if c not in cells]
            if missing:
                raise _input_error("table:MissingColumn", "python", f"the new subjects lack column(s) the model needs: {', '.join(missing)} "
                                   f"(found: {', '.join(columns)})")
        elif isinstance(X, Sequence) or isinstance(X, np.ndarray):
            if len(sources) != 1:
                raise ValueError(f"a list of images needs a model with one image source; this one has {len(sources)}: pass a table "
                                 "(a dict or DataFrame of columns) instead")
            if self._table_columns():
                raise ValueError(f"the model also needs the columns {self._table_columns()}: pass a table "
                                 "(a dict or DataFrame of columns) instead of a list of images")
            self._add_images(sources[0]["name"], list(X), images, volumes)
        else:
            raise TypeError(f"expected images (a list), a table (dict or DataFrame) or a table/study path, got {type(X).__name__}")
        m = self._count(images, volumes, cells, kernels)
        ids = ids or [str(i + 1) for i in range(m)]
        rows = self._kernel_rows(kernels, train_kernels, test_diag, m)
        scores, warnings = _core.model_scores(self.card, ids, images, volumes, cells, rows, **options)
        self.warnings_ = list(warnings)
        return scores

    def _table_columns(self):
        """The table columns scoring needs besides ids and images."""
        return self.covariate_columns + self.harmonisation_columns + self.feature_columns + self.connectivity_columns

    @staticmethod
    def _looks_like_image(path):
        name = os.fspath(path).lower()
        return name.endswith((".nii", ".nii.gz", ".hdr", ".img", ".hdr.gz", ".img.gz"))

    @staticmethod
    def _add_images(source, values, images, volumes):
        if all(is_path(v) for v in values):
            images[source] = [os.fspath(v) for v in values]  # read by predict itself, exactly as the CLI reads them
        else:
            volumes[source] = [as_volume(v, f"image {i}") for i, v in enumerate(values)]

    def _count(self, images, volumes, cells, kernels):
        counts = {len(v) for v in list(images.values()) + list(volumes.values()) + list(cells.values())}
        if kernels is not None:
            counts.add(np.shape(kernels)[1])
        if not counts:
            raise ValueError("no new subjects: give images, a table or kernel rows")
        if len(counts) != 1:
            raise ValueError(f"the new subjects' inputs disagree on the number of subjects: {sorted(counts)}")
        return counts.pop()

    def _kernel_rows(self, kernels, train_kernels, test_diag, m):
        """Precomputed kernels: per kernel of kind precomputed/connectivity, (training block l x l in training_ids
        order, new rows m x l, self-similarities m)."""
        names = [n for n, kind in zip(self.card.kernel_names, self.card.kernel_kinds) if kind in ("precomputed", "connectivity")]
        if kernels is None:
            return {}
        if train_kernels is None or test_diag is None:
            raise ValueError("kernels= needs train_kernels= (the training block, n_kernels x l x l) and test_diag= (n_kernels x m)")
        K, T, D = (np.asarray(a, dtype=np.float64) for a in (kernels, train_kernels, test_diag))
        if K.ndim != 3 or K.shape[0] != len(names) or T.shape[0] != len(names) or D.shape[0] != len(names):
            raise ValueError(f"the model has {len(names)} precomputed kernel(s) ({', '.join(names)}): kernels must be {len(names)} x m x l, "
                             f"got {K.shape}, train_kernels {T.shape}, test_diag {D.shape}")
        return {n: (np.asfortranarray(T[j]), np.asfortranarray(K[j]), np.ascontiguousarray(D[j])) for j, n in enumerate(names)}

    def decision_function(self, X=None, *, kernels=None, train_kernels=None, test_diag=None, unseen_levels="refuse", new_sites="estimate",
                          new_site_min=10, new_site_reference=None):
        """Decision values (binary, regression: shape (m,)) or class scores (multiclass: (m, C)) of new subjects.

        X: a list of images (file paths or nibabel images) for a model with one image source and no covariates;
        a table (dict of columns or DataFrame) with the model's image column(s), covariate and feature columns;
        or the path of a subjects table (.tsv/.csv) or study file, read as `neuromkl predict` reads it.
        kernels: for precomputed kernels, the new subjects' rows against the training subjects (n_kernels x m x
        l, columns in training_ids order), with train_kernels (n_kernels x l x l) and test_diag (n_kernels x m).
        unseen_levels: a categorical covariate's level the model was not trained with is an error ("refuse"), coded as
        the reference level with a warning in ``warnings_`` ("reference"), or estimated from its own subjects
        ("estimate": at least ``new_site_min`` of them), as `neuromkl predict --unseen-levels`.
        A missing covariate value (None, NaN, "n/a") is imputed with the training value when the study imputed them.
        new_sites, new_site_min, new_site_reference: a harmonised model's subjects from a site it was not trained on have
        that site's ComBat effects estimated from their own subjects ("estimate", at least ``new_site_min`` of them; with
        ``new_site_reference="column=value"`` only that group's) or are refused ("refuse"), as `neuromkl predict
        --new-sites`; each such site is named in ``warnings_``.
        """
        options = {"unseen_levels": unseen_levels, "new_sites": new_sites, "new_site_min": new_site_min,
                   "new_site_reference": new_site_reference or ""}
        scores = self._scores(X, kernels, train_kernels, test_diag, options)
        return scores if self.task == "multiclass" else scores[:, 0]

    def predict(self, X=None, **kw):
        """Predicted class (binary: positive when the decision value is >= 0, as the study) or value."""
        d = self.decision_function(X, **kw)
        if self.task == "multiclass":
            return self.classes_[np.argmax(d, axis=1)]
        if self.task == "classification":
            return np.where(d >= 0, self.classes_[1], self.classes_[0])
        return d

    def predict_proba(self, X=None, **kw):
        """(m, 2) probabilities [negative, positive] with the model's Platt scaling (binary models with a calibration)."""
        if self.task != "classification" or self.calibration is None:
            raise AttributeError(f"model {self.learner} has no probability calibration (binary classification models carry one)")
        a, b = self.calibration
        p = _core.platt_probabilities(a, b, 1, np.ascontiguousarray(self.decision_function(X, **kw)))
        return np.column_stack([1.0 - p, p])

    def predict_corrected(self, X=None, **kw):
        """Regression with a bias correction: (prediction - intercept) / slope, as `predict`'s prediction_corrected."""
        if self.bias_correction is None:
            raise AttributeError(f"model {self.learner} has no bias correction")
        slope, intercept = self.bias_correction
        return (self.decision_function(X, **kw) - intercept) / slope


def load_model(path, learner=None):
    """Reads an exported model: ``results/<study>/model`` (with ``learner`` = its label when it holds several),
    ``model/<Learner>`` or ``model/<Learner>/folds/<k>``. Errors are the CLI's (model:Missing, model:Corrupt)."""
    folders = _core.model_folders(os.fspath(path))
    cards = [(_core.read_model(f), f) for f in folders]
    if learner is not None:
        cards = [c for c in cards if learner in (c[0].learner, c[0].learner_name, os.path.basename(c[1]))]
        if not cards:
            raise _input_error("model:Missing", os.fspath(path), f"no model of learner {learner!r} in {path}")
    if len(cards) > 1:
        raise ValueError(f"{path} holds the models of {len(cards)} learners ({', '.join(c[0].learner for c in cards)}): "
                         "choose one with learner=")
    return ExportedModel(*cards[0])
