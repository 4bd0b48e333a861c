#pragma once
// Test fixtures written byte by byte (no ITK, no external tools): NIfTI-1 and NIfTI-2 single files
// and .hdr/.img pairs, Analyze 7.5 pairs, optionally gzipped, with chosen datatype and scaling.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace neuromkl::testing {

enum class FixtureFormat { Nifti1, Nifti1Pair, Nifti2, Nifti2Pair, Analyze };

struct FixtureImage {
  std::array<std::int64_t, 3> dims{1, 1, 1};
  std::int64_t volumes = 1;                 ///< > 1: a 4-D image
  std::array<double, 3> spacing{1, 1, 1};
  std::array<double, 3> rasOrigin{0, 0, 0};  ///< RAS world position of voxel (0, 0, 0)
  bool flipX = false;                       ///< x axis runs right to left (LAS, as SPM's MNI images)
  std::vector<double> stored;               ///< values as stored (before scl_slope/scl_inter), x fastest
  int datatype = 16;                        ///< NIfTI code (16 float32, 4 int16, 2 uint8, ...)
  double slope = 0, inter = 0;
  bool bigEndian = false;
  // Header fields a test may corrupt on purpose:
  double voxOffset = -1;                    ///< -1: the standard value (352 / 544 / 0 for pairs)
  std::string magicOverride;                ///< non-empty: written instead of the right magic
  std::array<std::int16_t, 3> analyzeOriginator{0, 0, 0};  ///< SPM's origin voxel (1-based), Analyze only
  bool negativeAnalyzeX = false;            ///< Analyze: pixdim[1] < 0 (FSL's unflipped marker)
};

/// Writes `image` at `path` (.nii/.nii.gz, or for pairs the .hdr/.hdr.gz name; the .img/.img.gz
/// name is derived with the same case and compression). Returns the header path.
std::string WriteFixtureImage(const std::string& path, FixtureFormat format, const FixtureImage& image);

/// Bytes of a file (to truncate or compare).
std::vector<char> ReadBytes(const std::string& path);
void WriteBytes(const std::string& path, const std::vector<char>& bytes);

}  // namespace neuromkl::testing
