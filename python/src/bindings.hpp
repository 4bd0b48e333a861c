#pragma once
// Shared by the translation units of neuromkl._core: array types and the functions each unit registers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <string>

#include "neuromkl/io/volume.hpp"

namespace neuromkl::python {

namespace py = pybind11;

using Stack = py::array_t<double, py::array::c_style | py::array::forcecast>;
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// A 3-D image's voxels as numpy holds a nibabel image's data: x fastest (Fortran order), float32.
using VoxelArray = py::array_t<float, py::array::f_style | py::array::forcecast>;
using Affine = py::array_t<double, py::array::c_style | py::array::forcecast>;

/// The grid of a NIfTI voxel-to-RAS affine (4 x 4, as nibabel's img.affine) and its dimensions, in ITK's LPS
/// convention (io::Geometry); the inverse of io::Geometry::RasAffine. InputError for a singular affine.
io::Geometry GeometryFromAffine(const std::array<std::int64_t, 3>& dims, const Affine& affine, const std::string& where);
/// A volume from a 3-D array and its affine (nibabel's dataobj and affine).
io::Volume VolumeFromArray(const VoxelArray& data, const Affine& affine, const std::string& where);
/// A volume as (data, affine): data dims[0] x dims[1] x dims[2] float32 in Fortran order, the RAS affine.
py::tuple VolumeToArrays(const io::Volume& volume);

void BindImages(py::module_& m);  // images.cpp: volumes, atlas regions, region kernels, map weights
void BindModels(py::module_& m);  // models.cpp: exported models (load_model), Platt scaling, CV splits

}  // namespace neuromkl::python
