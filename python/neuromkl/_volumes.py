"""Images given to neuromkl from Python: file paths (read by neuromkl's own reader, as the CLI reads them) or
in-memory images with a ``get_fdata``/``dataobj`` and an ``affine`` (nibabel's SpatialImage)."""
import os

import numpy as np

from . import _core


def is_path(img):
    return isinstance(img, (str, os.PathLike))


def as_volume(img, what="image"):
    """(data float32 x-fastest 3-D array, 4 x 4 RAS affine) of a path or a nibabel-like image.

    Paths are read by neuromkl's reader (io::ReadVolume: any NIfTI/Analyze flavour, scl_slope applied), so their
    voxels are the CLI's to the bit; an in-memory image's voxels are taken as float32 (img.get_fdata(dtype=float32)).
    A 4-D image with one volume counts as 3-D, as in the CLI.
    """
    if is_path(img):
        data, affine = _core.read_volume(os.fspath(img))
        return data, affine
    if not hasattr(img, "affine") or not (hasattr(img, "get_fdata") or hasattr(img, "dataobj")):
        raise TypeError(f"{what}: expected a file path or a nibabel image (with get_fdata and affine), got {type(img).__name__}")
    data = img.get_fdata(dtype=np.float32) if hasattr(img, "get_fdata") else np.asarray(img.dataobj, dtype=np.float32)
    while data.ndim > 3 and data.shape[-1] == 1:
        data = data[..., 0]
    if data.ndim != 3:
        raise ValueError(f"{what}: expected a 3-D image (or 4-D with one volume), found shape {data.shape}")
    return np.asfortranarray(data, dtype=np.float32), np.asarray(img.affine, dtype=np.float64)


def to_nifti(data, affine):
    """A nibabel Nifti1Image of float32 data on a grid (the maps neuromkl returns)."""
    import nibabel

    img = nibabel.Nifti1Image(np.asarray(data, dtype=np.float32), np.asarray(affine, dtype=np.float64))
    img.header.set_xyzt_units("mm")
    return img
