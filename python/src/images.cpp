// neuromkl._core, images: the pieces of the kernel stage and of the voxel maps that the Python transformer
// neuromkl.RegionKernels (python/neuromkl/images.py) assembles: reading a volume as the CLI reads it, the atlas
// regions on an image grid (as a study builds them), the region kernels of subject rows with the kernel stage's
// arithmetic, and the subject weights of weight and pattern maps.
#include <pybind11/eigen.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "bindings.hpp"
#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::python {

using Shape = std::array<std::int64_t, 3>;
using Rows = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Indices = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

io::Geometry GeometryFromAffine(const Shape& dims, const Affine& affine, const std::string& where) {
  if (affine.ndim() != 2 || affine.shape(0) != 4 || affine.shape(1) != 4)
    throw InputError("python:Affine", where, "expected a 4 x 4 voxel-to-world affine");
  const auto a = affine.unchecked<2>();
  io::Geometry g;
  g.dims = dims;
  for (int c = 0; c < 3; ++c) {
    const double s = std::sqrt(a(0, c) * a(0, c) + a(1, c) * a(1, c) + a(2, c) * a(2, c));
    if (!(s > 0) || !std::isfinite(s)) throw InputError("python:Affine", where, fmt::format("the affine's column {} has length {}: not an image grid", c, s));
    g.spacing[static_cast<std::size_t>(c)] = s;
    for (int r = 0; r < 3; ++r) g.direction[static_cast<std::size_t>(r * 3 + c)] = (r < 2 ? -1.0 : 1.0) * a(r, c) / s;  // RAS -> LPS
  }
  for (int r = 0; r < 3; ++r) g.origin[static_cast<std::size_t>(r)] = (r < 2 ? -1.0 : 1.0) * a(r, 3);
  return g;
}

io::Volume VolumeFromArray(const VoxelArray& data, const Affine& affine, const std::string& where) {
  if (data.ndim() != 3) throw InputError("python:Not3D", where, fmt::format("expected a 3-D image, found {} dimension(s)", data.ndim()));
  io::Volume v;
  v.geometry = GeometryFromAffine({data.shape(0), data.shape(1), data.shape(2)}, affine, where);
  v.data.assign(data.data(), data.data() + data.size());  // Fortran order = x fastest, as io::Volume
  return v;
}

py::tuple VolumeToArrays(const io::Volume& volume) {
  const auto& d = volume.geometry.dims;
  VoxelArray data({static_cast<py::ssize_t>(d[0]), static_cast<py::ssize_t>(d[1]), static_cast<py::ssize_t>(d[2])});
  std::memcpy(data.mutable_data(), volume.data.data(), volume.data.size() * sizeof(float));
  py::array_t<double> affine({4, 4});
  const auto a = volume.geometry.RasAffine();
  std::memcpy(affine.mutable_data(), a.data(), sizeof(double) * 16);
  return py::make_tuple(data, affine);
}

namespace {

/// The atlas (built-in name, or label images with their tables) as a study file gives it.
config::StudyConfig AtlasStudy(const std::string& builtin, const std::vector<py::dict>& parts) {
  config::StudyConfig study;
  study.atlas.builtin = builtin;
  for (const auto& p : parts) {
    config::AtlasPart part;
    part.image = p["image"].cast<std::string>();
    part.labels = p["labels"].cast<std::string>();
    if (p.contains("prefix")) part.prefix = p["prefix"].cast<std::string>();
    if (p.contains("probabilistic")) part.probabilistic = p["probabilistic"].cast<bool>();
    if (p.contains("threshold")) part.threshold = p["threshold"].cast<double>();
    study.atlas.parts.push_back(std::move(part));
  }
  if (!parts.empty()) {
    study.atlas.image = study.atlas.parts[0].image;
    study.atlas.labels = study.atlas.parts[0].labels;
  }
  return study;
}

/// The regions of the atlas on an image grid (pipeline::StudyRegions for a given grid and mask): names, labels
/// and the column layout of the subject rows (region after region, as the kernel stage lays them out).
py::dict RegionLayout(const std::string& builtin, const std::vector<py::dict>& parts, const Shape& dims, const Affine& affine,
                      const std::optional<VoxelArray>& maskData, const std::optional<Affine>& maskAffine) {
  const io::Geometry grid = GeometryFromAffine(dims, affine, "images");
  const config::StudyConfig study = AtlasStudy(builtin, parts);
  std::unique_ptr<io::Volume> mask;
  if (maskData) mask = std::make_unique<io::Volume>(VolumeFromArray(*maskData, *maskAffine, "mask"));
  std::vector<std::string> warnings;
  std::vector<atlas::RegionIndex> indices;
  std::vector<std::string> prefixes;
  for (const auto& a : pipeline::LoadStudyAtlases(study)) {
    for (const auto& w : a.warnings) warnings.push_back("atlas: " + w);
    indices.push_back(atlas::BuildRegionIndex(a, grid, mask.get(), mask ? "mask" : ""));
  }
  for (const auto& part : study.atlas.parts) prefixes.push_back(part.prefix);
  atlas::RegionIndex index = indices.size() == 1 && (prefixes.empty() || prefixes[0].empty()) ? std::move(indices[0])
                                                                                              : atlas::CombineRegionIndices(std::move(indices), prefixes);
  for (const auto& w : index.warnings) warnings.push_back("atlas: " + w);
  const std::vector<std::int64_t> offsets = kernels::RegionColumnOffsets(index);
  const auto V = offsets.back();
  py::array_t<std::int64_t> columnVoxel(V), labels(static_cast<py::ssize_t>(index.regions.size())), atlasVoxels(labels.size());
  py::array_t<float> columnScale(V);
  std::vector<std::string> names, empty;
  for (std::size_t r = 0; r < index.regions.size(); ++r) {
    const auto& region = index.regions[r];
    names.push_back(region.name);
    labels.mutable_at(static_cast<py::ssize_t>(r)) = region.label;
    atlasVoxels.mutable_at(static_cast<py::ssize_t>(r)) = region.atlasVoxels;
    for (std::size_t k = 0; k < region.voxels.size(); ++k) {
      const auto c = static_cast<py::ssize_t>(offsets[r] + static_cast<std::int64_t>(k));
      columnVoxel.mutable_at(c) = region.voxels[k];
      // As the kernel stage: probabilistic regions' features are sqrt(p) x (kernel X diag(p) X').
      columnScale.mutable_at(c) = region.weights.empty() ? 1.0f : std::sqrt(region.weights[k]);
    }
  }
  for (const auto& r : index.emptyRegions) empty.push_back(r.name);
  py::dict out;
  out["names"] = names;
  out["labels"] = labels;
  out["atlas_voxels"] = atlasVoxels;
  out["offsets"] = py::array_t<std::int64_t>(static_cast<py::ssize_t>(offsets.size()), offsets.data());
  out["column_voxel"] = columnVoxel;
  out["column_scale"] = columnScale;
  out["empty_regions"] = empty;
  out["warnings"] = warnings;
  out["grid"] = grid.Describe();
  return out;
}

std::vector<std::int64_t> CheckedOffsets(const Indices& offsets, std::int64_t columns) {
  std::vector<std::int64_t> o(offsets.data(), offsets.data() + offsets.size());
  if (o.size() < 2 || o.front() != 0 || o.back() != columns)
    throw InputError("python:Offsets", "region kernels", fmt::format("the region offsets must run from 0 to the {} columns of the rows", columns));
  for (std::size_t r = 1; r < o.size(); ++r)
    if (o[r] < o[r - 1]) throw InputError("python:Offsets", "region kernels", "the region offsets must not decrease");
  return o;
}

/// X_a,r X_b,r' for every region r (kernels::RegionKernelBlocks: float32 products of the differences to a
/// reference row, summed in double): R x na x nb. `same`: xa is xb (a symmetric training block).
py::array_t<double> RegionKernelBlocks(const Rows& xa, const Rows& xb, const Rows& reference, const Indices& offsetArray, bool same) {
  if (xa.ndim() != 2 || xb.ndim() != 2 || xa.shape(1) != xb.shape(1) || reference.size() != xa.shape(1))
    throw InputError("python:RowsShape", "region kernels", "expected rows of equal length (subjects x columns) and a reference row of that length");
  const std::int64_t columns = xa.shape(1), na = xa.shape(0), nb = xb.shape(0);
  const auto offsets = CheckedOffsets(offsetArray, columns);
  std::vector<Eigen::MatrixXd> out;
  {
    py::gil_scoped_release release;
    kernels::RegionKernelBlocks(xa.data(), na, same ? xa.data() : xb.data(), same ? na : nb, columns, reference.data(), offsets, same, out);
  }
  py::array_t<double> stack({static_cast<py::ssize_t>(out.size()), static_cast<py::ssize_t>(na), static_cast<py::ssize_t>(same ? na : nb)});
  for (std::size_t r = 0; r < out.size(); ++r)
    Eigen::Map<RowMatrix>(stack.mutable_data() + static_cast<std::int64_t>(r) * out[r].size(), out[r].rows(), out[r].cols()) = out[r];
  return stack;
}

/// Each subject's self-similarity k(x, x) per region (R x m), with the arithmetic of the kernel stage's diagonal.
py::array_t<double> RegionSelfSimilarities(const Rows& x, const Rows& reference, const Indices& offsetArray) {
  if (x.ndim() != 2 || reference.size() != x.shape(1))
    throw InputError("python:RowsShape", "region kernels", "expected rows (subjects x columns) and a reference row of that length");
  const std::int64_t columns = x.shape(1), m = x.shape(0);
  const auto offsets = CheckedOffsets(offsetArray, columns);
  const auto R = static_cast<py::ssize_t>(offsets.size() - 1);
  py::array_t<double> out({R, static_cast<py::ssize_t>(m)});
  auto o = out.mutable_unchecked<2>();
  {
    py::gil_scoped_release release;
    std::vector<Eigen::MatrixXd> block;
    for (std::int64_t i = 0; i < m; ++i) {
      const float* row = x.data() + i * columns;
      kernels::RegionKernelBlocks(row, 1, row, 1, columns, reference.data(), offsets, true, block);
      for (py::ssize_t r = 0; r < R; ++r) o(r, i) = block[static_cast<std::size_t>(r)](0, 0);
    }
  }
  return out;
}

/// gram::KernelStore::SubjectWeights: D (n x kernels) with map_r = sum_i D(i, r) x_i on region r, for a model fitted on the
/// kernels' `train` subjects with the fold preprocessing (centre, normalise) of the learner.
Eigen::MatrixXd SubjectWeights(const Stack& kernelStack, const std::vector<int>& train, const std::vector<int>& test, const Eigen::VectorXd& coef,
                               const Eigen::VectorXd& beta, bool centre, bool normalise) {
  if (kernelStack.ndim() != 3 || kernelStack.shape(1) != kernelStack.shape(2))
    throw InputError("python:KernelStackShape", "subject weights", "expected a stack of square kernels (n_kernels x n x n)");
  const auto k = kernelStack.shape(0), n = kernelStack.shape(1);
  if (beta.size() != k || coef.size() != static_cast<Eigen::Index>(train.size()))
    throw InputError("python:WeightsShape", "subject weights",
                     fmt::format("{} kernel weights for {} kernels, {} coefficients for {} training subjects", beta.size(), k, coef.size(), train.size()));
  for (const auto* idx : {&train, &test})
    for (int i : *idx)
      if (i < 0 || i >= n) throw InputError("python:SubjectIndex", "subject weights", fmt::format("subject index {} outside 0..{}", i, n - 1));
  std::vector<Eigen::MatrixXd> list;
  for (py::ssize_t j = 0; j < k; ++j) list.emplace_back(Eigen::Map<const RowMatrix>(kernelStack.data() + j * n * n, n, n));
  py::gil_scoped_release release;
  return gram::MemoryKernels(list).SubjectWeights(gram::FoldModel{train, test, coef, beta}, gram::Preprocessing{centre, normalise, nullptr, {}});
}

}  // namespace

void BindImages(py::module_& m) {
  m.def("read_volume", [](const std::string& path) { return VolumeToArrays(io::ReadVolume(path)); }, py::arg("path"),
        "Reads a 3-D image as the CLI does (io::ReadVolume): (data float32 in Fortran order, RAS affine).");
  m.def(
      "grid_difference",
      [](const Shape& dims, const Affine& affine, const Shape& refDims, const Affine& refAffine) {
        return GeometryFromAffine(dims, affine, "image").DifferenceFrom(GeometryFromAffine(refDims, refAffine, "reference"));
      },
      py::arg("shape"), py::arg("affine"), py::arg("reference_shape"), py::arg("reference_affine"),
      "Empty when two grids agree (io::Geometry::DifferenceFrom, 1e-4 of a voxel), else what differs.");
  m.def(
      "describe_grid", [](const Shape& dims, const Affine& affine) { return GeometryFromAffine(dims, affine, "image").Describe(); }, py::arg("shape"),
      py::arg("affine"));
  m.def("region_layout", &RegionLayout, py::arg("builtin"), py::arg("parts"), py::arg("shape"), py::arg("affine"), py::arg("mask_data") = py::none(),
        py::arg("mask_affine") = py::none(), "The atlas regions on an image grid and the column layout of the subject rows.");
  m.def("region_kernel_blocks", &RegionKernelBlocks, py::arg("xa"), py::arg("xb"), py::arg("reference"), py::arg("offsets"), py::arg("same"),
        "Region kernels of float32 subject rows (kernels::RegionKernelBlocks): n_regions x na x nb.");
  m.def("region_self_similarities", &RegionSelfSimilarities, py::arg("x"), py::arg("reference"), py::arg("offsets"),
        "k(x, x) per region and subject (n_regions x m), with the kernel stage's arithmetic.");
  m.def("subject_weights", &SubjectWeights, py::arg("kernels"), py::arg("train"), py::arg("test"), py::arg("coef"), py::arg("beta"), py::arg("centre"),
        py::arg("normalise"), "The subject weights of a voxel map (n x n_kernels).");
}

}  // namespace neuromkl::python
