#pragma once
// Plain image containers shared by every stage. No ITK types here.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace neuromkl::io {

/// Voxel grid in ITK's physical space, which is LPS (x to the patient's left, y posterior,
/// z superior). NIfTI world space is RAS: (x, y) flip sign. Voxels are x-fastest.
struct Geometry {
  std::array<std::int64_t, 3> dims{0, 0, 0};
  std::array<double, 3> spacing{1, 1, 1};
  std::array<double, 3> origin{0, 0, 0};                    ///< LPS position of voxel (0,0,0)
  std::array<double, 9> direction{1, 0, 0, 0, 1, 0, 0, 0, 1};  ///< row-major 3x3, columns = axis directions
  /// false for a NIfTI header with neither a qform nor an sform (both codes 0): the grid above is then NIfTI's
  /// fallback (voxel sizes at the origin, no rotation), so where the image lies in world space is unknown.
  bool worldKnown = true;

  std::int64_t VoxelCount() const { return dims[0] * dims[1] * dims[2]; }
  std::int64_t Linear(std::int64_t i, std::int64_t j, std::int64_t k) const { return i + dims[0] * (j + dims[1] * k); }
  /// LPS world point of a (possibly fractional) voxel index.
  std::array<double, 3> IndexToLps(const std::array<double, 3>& index) const;
  /// Continuous voxel index of an LPS world point.
  std::array<double, 3> LpsToIndex(const std::array<double, 3>& lps) const;
  /// The NIfTI-style 4x4 voxel-to-RAS affine (row-major), for reports and comparisons with nibabel.
  std::array<double, 16> RasAffine() const;
  /// Empty when the grids agree within `tolerance` (relative to voxel size), else a sentence
  /// naming each difference, e.g. "spacing [2, 2, 2] vs [3, 3, 3]".
  std::string DifferenceFrom(const Geometry& other, double tolerance = 1e-4) const;
  std::string Describe() const;  ///< "91x109x91, 2x2x2 mm"
};

/// A 3-D scalar image read as float32 (scl_slope/scl_inter applied by the reader).
struct Volume {
  Geometry geometry;
  std::vector<float> data;  ///< VoxelCount() values, x fastest
};

}  // namespace neuromkl::io
