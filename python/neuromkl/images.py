"""From images to region kernels and back to voxel maps: ``RegionKernels``, the nilearn-style transformer.

    pipe = make_pipeline(RegionKernels(atlas="aal"), EnmklKernelRidge(kernel="precomputed", normalise=True))
    pipe.fit(train_imgs, y)                  # NIfTI paths or nibabel images
    pipe.predict(new_imgs)
    pipe[0].coef_img(pipe[-1])               # the voxel weight map, a nibabel image (pattern_img: Haufe et al. 2014)

The transformer does what a study's kernel stage does, with the same C++ pieces: the atlas regions on the images'
grid (atlas::BuildRegionIndex, masked by ``mask_img``), each image's region columns (non-finite values as 0), the
non-finite rule (``drop_voxel``: a voxel non-finite in any training image is dropped for everyone; ``zero``), the
region kernels K_r = X_r X_r' with the kernel stage's arithmetic (kernels::RegionKernelBlocks, float32 products of
the differences to the first subject's row, summed in double), and the exclusion of regions left without a voxel or
with an all-zero kernel. Its output is a kernel stack (n_regions x n x n when fitting, n_regions x m x n for new
images) that carries the new images' self-similarities, so the estimators' precomputed form normalises them
without a test_diag argument. The maps use weights::SubjectWeights, as the study's weight and pattern maps.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._volumes import as_volume, to_nifti

__all__ = ["RegionKernels", "KernelStack"]


class KernelStack(np.ndarray):
    """A stack of region kernels (n_kernels x rows x training samples) with the rows' self-similarities
    ``test_diag`` (n_kernels x rows) and the kernels' ``names``. Slicing gives a plain stack (no test_diag)."""

    def __new__(cls, kernels, test_diag=None, names=None):
        obj = np.asarray(kernels, dtype=np.float64).view(cls)
        obj.test_diag = test_diag
        obj.names = names
        return obj

    def __array_finalize__(self, obj):
        # A slice or a computed array is another stack: the self-similarities belong to this one only.
        self.test_diag = None
        self.names = None

    def __reduce__(self):
        state = super().__reduce__()
        return state[0], state[1], (state[2], self.test_diag, self.names)

    def __setstate__(self, state):
        super().__setstate__(state[0])
        self.test_diag, self.names = state[1], state[2]


class RegionKernels(TransformerMixin, BaseEstimator):
    """One linear kernel per atlas region from 3-D images, as a study's kernel stage computes them.

    Parameters
    ----------
    atlas : str, default="aal"
        A built-in atlas name, or the path of a label image (with ``labels``, its table: BIDS dseg.tsv, FSL XML,
        FreeSurfer LUT or AAL text), or a list of dicts {"image", "labels", "prefix", "probabilistic",
        "threshold"} for several atlases (as a study's /atlas/images).
    labels : str, optional
        The label table of an atlas image.
    probabilistic, threshold : bool, float
        A 4-D probabilistic atlas image (one volume per region; voxels with p > threshold, kernels X diag(p) X').
    mask_img : path or nibabel image, optional
        Only voxels where the mask is non-zero (resampled by nearest neighbour onto the images' grid).
    nan_policy : {"drop_voxel", "zero"}, default="drop_voxel"
        Non-finite training values: drop the voxel for everyone, or count them as 0. In new images a non-finite
        value at a kept voxel counts as the training mean (no contribution after centring), as `neuromkl predict`.

    Attributes
    ----------
    kernel_names_ : list of str   the regions with a kernel (table order), the estimators' kernels
    kernels_ : ndarray (n_kernels, n, n)   the training kernels (raw: the estimators centre and normalise)
    X_ : ndarray (n, columns) float32   the training images' region columns (after the non-finite rule)
    excluded_ : dict   regions without a kernel and why; warnings_ : list of str
    shape_, affine_ : the images' grid
    """

    def __init__(self, atlas="aal", labels=None, probabilistic=False, threshold=0.0, mask_img=None, nan_policy="drop_voxel"):
        self.atlas = atlas
        self.labels = labels
        self.probabilistic = probabilistic
        self.threshold = threshold
        self.mask_img = mask_img
        self.nan_policy = nan_policy

    # ---- helpers ----
    def _atlas_parts(self):
        if isinstance(self.atlas, (list, tuple)):
            return "", [dict(p) for p in self.atlas]
        if self.labels is None:
            if str(self.atlas).lower().endswith((".nii", ".nii.gz", ".hdr", ".img", ".hdr.gz", ".img.gz")):
                raise ValueError(f"atlas {self.atlas!r} is an image: give its label table as labels= (or a built-in atlas name such as \"aal\")")
            return str(self.atlas), []
        return "", [{"image": str(self.atlas), "labels": str(self.labels), "probabilistic": bool(self.probabilistic),
                     "threshold": float(self.threshold)}]

    def _volumes(self, imgs):
        if isinstance(imgs, (str, bytes)) or not hasattr(imgs, "__len__"):
            raise TypeError(f"expected a list of images (file paths or nibabel images), got {type(imgs).__name__}")
        volumes = [as_volume(img, f"image {i}") for i, img in enumerate(imgs)]
        if not volumes:
            raise ValueError("no image: the transformer needs at least one")
        return volumes

    def _check_grid(self, volumes, shape, affine):
        for i, (data, aff) in enumerate(volumes):
            diff = _core.grid_difference(data.shape, aff, shape, affine)
            if diff:
                err = _core.GeometryMismatch(f"image {i}: its grid differs from the training images' grid "
                                             f"({_core.describe_grid(shape, affine)}): {diff}; resample it to that grid first")
                err.code, err.where = "input:GridMismatch", f"image {i}"
                raise err

    def _rows(self, volumes):
        """Region columns of each image (float32, x * sqrt(p)) and where they were non-finite."""
        voxel, scale = self.layout_["column_voxel"], self.layout_["column_scale"]
        X = np.empty((len(volumes), len(voxel)), dtype=np.float32)
        bad = np.zeros(X.shape, dtype=bool)
        for i, (data, _) in enumerate(volumes):
            values = data.ravel(order="F")[voxel]
            bad[i] = ~np.isfinite(values)
            X[i] = np.where(bad[i], np.float32(0), values * scale)
        return X, bad

    # ---- fit / transform ----
    def fit(self, imgs, y=None):
        """Reads the training images, lays out the atlas regions on their grid, applies the non-finite rule and
        computes the region kernels."""
        if self.nan_policy not in ("drop_voxel", "zero"):
            raise ValueError(f"nan_policy must be \"drop_voxel\" or \"zero\", got {self.nan_policy!r}")
        volumes = self._volumes(imgs)
        self.shape_, self.affine_ = volumes[0][0].shape, volumes[0][1]
        self._check_grid(volumes, self.shape_, self.affine_)
        builtin, parts = self._atlas_parts()
        mask = None if self.mask_img is None else as_volume(self.mask_img, "mask_img")
        self.layout_ = _core.region_layout(builtin, parts, self.shape_, self.affine_, *(mask if mask else (None, None)))
        X, bad = self._rows(volumes)
        offsets = self.layout_["offsets"]
        self.dropped_ = bad.any(axis=0) if self.nan_policy == "drop_voxel" else np.zeros(X.shape[1], dtype=bool)
        X[:, self.dropped_] = 0
        self.X_ = X
        kernels = _core.region_kernel_blocks(X, X, X[0], offsets, True)
        names = list(self.layout_["names"])
        kept_columns = np.add.reduceat((~self.dropped_).astype(np.int64), offsets[:-1]) if len(names) else np.zeros(0, dtype=np.int64)
        self.excluded_ = {n: "no region voxel on the image grid" + (" inside the mask" if mask else "") for n in self.layout_["empty_regions"]}
        keep = []
        for r, name in enumerate(names):
            if offsets[r + 1] == offsets[r] or kept_columns[r] == 0:
                self.excluded_[name] = "no voxel left: every voxel is non-finite in at least one image"
            elif not np.any(kernels[r]):
                self.excluded_[name] = "zero kernel (every image's values are 0 in this region)"
            else:
                keep.append(r)
        if not keep:
            err = _core.InputError("no region has a kernel: " + "; ".join(f"{k}: {v}" for k, v in self.excluded_.items()))
            err.code, err.where = "kernels:NoRegion", "images"
            raise err
        self.kept_ = np.asarray(keep, dtype=np.intp)
        self.kernel_names_ = [names[r] for r in keep]
        self.kernels_ = np.ascontiguousarray(kernels[self.kept_])
        self.column_mean_ = X.mean(axis=0, dtype=np.float64).astype(np.float32)
        self.warnings_ = list(self.layout_["warnings"]) + [f"region {k} excluded: {v}" for k, v in self.excluded_.items()]
        self.n_features_per_kernel_ = np.asarray([kept_columns[r] for r in keep])
        return self

    def fit_transform(self, imgs, y=None):
        """The training kernels (n_kernels x n x n), with their diagonals as test_diag."""
        self.fit(imgs, y)
        return KernelStack(self.kernels_, np.einsum("kii->ki", self.kernels_), self.kernel_names_)

    def transform(self, imgs):
        """New images' kernels against the training images (n_kernels x m x n) with their self-similarities."""
        check_is_fitted(self, "kernels_")
        volumes = self._volumes(imgs)
        self._check_grid(volumes, self.shape_, self.affine_)
        X, bad = self._rows(volumes)
        X = np.where(bad & ~self.dropped_, self.column_mean_, X)  # as predict: a non-finite value adds nothing after centring
        X[:, self.dropped_] = 0
        X = np.ascontiguousarray(X, dtype=np.float32)
        offsets = self.layout_["offsets"]
        rows = _core.region_kernel_blocks(X, self.X_, self.X_[0], offsets, False)[self.kept_]
        diag = _core.region_self_similarities(X, self.X_[0], offsets)[self.kept_]
        return KernelStack(rows, diag, self.kernel_names_)

    # ---- maps ----
    def _training_samples(self, estimator, train):
        """The transformer's samples the estimator was fitted on (all, or the rows `train` of its kernels)."""
        check_is_fitted(estimator, "kernel_weights_")
        n = self.kernels_.shape[1]
        if getattr(estimator, "kernel", None) != "precomputed" or getattr(estimator, "n_kernels_", None) != len(self.kernel_names_):
            raise ValueError(f"the estimator must be fitted on this transformer's kernels (kernel=\"precomputed\", {len(self.kernel_names_)} kernels)")
        train = np.arange(n) if train is None else np.asarray(train, dtype=np.intp).ravel()
        if train.size and (train.min() < 0 or train.max() >= n or len(np.unique(train)) != train.size):
            raise ValueError(f"train must list distinct samples of the {n} this transformer was fitted on")
        if np.shape(estimator.dual_coef_)[0] != train.size:
            raise ValueError(f"the estimator was fitted on {np.shape(estimator.dual_coef_)[0]} samples, train names {train.size} "
                             f"(of the transformer's {n}): pass train= the rows of the kernels it was fitted on")
        return train

    def _map(self, D):
        """Voxel map sum_i D(i, r) x_i over each region's voxels (times p for probabilistic regions), as
        weights::VoxelMaps, on the images' grid (float32)."""
        offsets, voxel, scale = self.layout_["offsets"], self.layout_["column_voxel"], self.layout_["column_scale"]
        flat = np.zeros(int(np.prod(self.shape_)), dtype=np.float64)
        for j, r in enumerate(self.kept_):
            cols = slice(offsets[r], offsets[r + 1])
            values = (D[:, j] @ self.X_[:, cols].astype(np.float64)) * scale[cols]
            np.add.at(flat, voxel[cols], values)
        return flat.reshape(self.shape_, order="F").astype(np.float32)

    def _class_columns(self, estimator):
        coef = np.asarray(estimator.dual_coef_)
        if coef.ndim == 1:
            return [(coef, np.asarray(estimator.kernel_weights_))]
        betas = getattr(estimator, "class_kernel_weights_", None)
        return [(coef[:, c], np.asarray(estimator.kernel_weights_) if betas is None else betas[:, c]) for c in range(coef.shape[1])]

    def coef_img(self, estimator, train=None):
        """The voxel weight map w = sum_i coef_i x~_i (per region, times its kernel weight) of an estimator fitted on
        this transformer's output: <w, x~> + intercept is the decision value. A nibabel image on the images' grid,
        0 outside the regions and at dropped voxels; multiclass: 4-D, one volume per class.

        train: the rows of this transformer's kernels the estimator was fitted on, when it was fitted on a part of
        them (a study's way: kernels of the whole cohort, each outer fold fitted on its training rows); default all.
        """
        train = self._training_samples(estimator, train)
        maps = [self._map(_core.subject_weights(self.kernels_, train.tolist(), [], coef, beta, bool(estimator.centre), bool(estimator.normalise)))
                for coef, beta in self._class_columns(estimator)]
        return to_nifti(maps[0] if len(maps) == 1 else np.stack(maps, axis=-1), self.affine_)

    def pattern_img(self, estimator, train=None):
        """The activation pattern a = Cov(x~, f) / Var(f) over the training images (Haufe et al. 2014), as the
        study's pattern maps: how the images covary with the decision value (binary and regression). train: as
        for coef_img."""
        train = self._training_samples(estimator, train)
        if np.ndim(estimator.dual_coef_) != 1:
            raise ValueError("activation patterns are defined for binary and regression models (one decision value)")
        block = np.ascontiguousarray(self.kernels_[:, train][:, :, train])
        stack = KernelStack(block, np.einsum("kii->ki", block))
        f = estimator.raw_decision_function(stack) if hasattr(estimator, "raw_decision_function") else estimator.predict(stack)
        centred = f - f.mean()
        ss = centred @ centred
        c = centred / ss if ss > 0 else np.zeros(train.size)
        D = _core.subject_weights(self.kernels_, train.tolist(), [], c, np.ones(len(self.kernel_names_)), bool(estimator.centre),
                                  bool(estimator.normalise))
        return to_nifti(self._map(D), self.affine_)

    def _more_tags(self):
        return {"X_types": ["string"], "requires_y": False}
