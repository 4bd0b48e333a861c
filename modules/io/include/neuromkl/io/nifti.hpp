#pragma once
// Image input (NIfTI-1 and NIfTI-2 single files and .hdr/.img pairs, Analyze 7.5 pairs, each
// optionally gzipped) and NIfTI output (.nii, .nii.gz) through ITK; ITK stays inside this module.
#include <cstdint>
#include <string>
#include <vector>

#include "neuromkl/io/volume.hpp"

namespace neuromkl::io {

/// How an image is stored, detected from its header (sizeof_hdr, magic), not from its name.
enum class ImageFormat { Nifti1, Nifti1Pair, Nifti2, Nifti2Pair, Analyze75 };
/// "NIfTI-1", "NIfTI-1 pair", "NIfTI-2", "NIfTI-2 pair", "Analyze 7.5".
std::string ToString(ImageFormat format);
/// Reads and checks the header only (same errors as ReadVolume).
ImageFormat ReadImageFormat(const std::string& path);
/// The orientation convention neuromkl applies to Analyze 7.5 files (SPM's), one sentence for warnings.
std::string AnalyzeConventionNote();

/// The files that hold an image: the path itself, plus the other half of a .hdr/.img pair (header
/// first). Content hashes (kernel cache keys) must cover both halves of a pair.
std::vector<std::string> ImageFilePaths(const std::string& path);

/// Reads only the header: geometry of a 3-D image. Same errors as ReadVolume.
Geometry ReadGeometry(const std::string& path);

/// How an image stores its voxel values, from its header alone: the datatype, and for an integer datatype the codes'
/// range and the scaling that makes them values (value = slope x code + inter; slope 1, inter 0 when unscaled).
/// Lets a reader keep an integer image's voxels as codes (exact) instead of float32.
struct StoredForm {
  std::string datatype;  ///< "uint8", "int16", ..., "float32", "float64"
  bool integer = false;  ///< an integer datatype
  std::int64_t lowest = 0, highest = 0;  ///< the datatype's range (integer datatypes up to 32 bits; 0, 0 otherwise)
  double slope = 1, inter = 0;
};
/// Reads and checks the header only (same errors as ReadVolume).
StoredForm ReadStoredForm(const std::string& path);

/// Reads a 3-D image as float32. Accepts .nii, .nii.gz, .hdr/.img pairs (either half named,
/// .hdr.gz/.img.gz too), any letter case of the extension. Errors (InputError, code in brackets):
/// missing/unreadable file [io:Missing], the other half of a pair missing [io:MissingPairFile],
/// not an image name or header [io:NotNifti], a bad magic [io:BadMagic], a vox_offset that is NaN,
/// fractional or inside the header [io:BadVoxOffset], an unsupported datatype [io:UnsupportedType],
/// a data file shorter than the header announces [io:Truncated] (checked before allocating),
/// a 4-D image with more than one volume [io:Not3D], corrupt data [io:Corrupt]. Every message names
/// the file.
Volume ReadVolume(const std::string& path);

/// Same, decoding into `out` and reusing its buffer: no allocation per image when one Volume is
/// reused for a whole cohort (fresh multi-megabyte buffers cost page faults and address-space locks
/// that slow parallel decoding by ~25 %).
void ReadVolume(const std::string& path, Volume& out);

/// A 3-D image of integer codes (an atlas), decoded from the file's own datatype, never through float32
/// (whose 24-bit mantissa makes 16777216 and 16777217 one value). Codes are 32-bit: a voxel beyond that
/// range, or not a finite integer (a float image, or scl_slope/scl_inter), is counted, left 0, and the
/// caller refuses the image with the reason.
struct LabelVolume {
  Geometry geometry;
  std::vector<std::int32_t> labels;  ///< VoxelCount() codes, x fastest
  std::string datatype;              ///< the file's voxel type: "uint8", ..., "uint64", "float32", "float64"
  std::int64_t nonInteger = 0;       ///< voxels whose value is not a finite integer
  std::int64_t outOfRange = 0;       ///< integer voxels outside [-2^31, 2^31 - 1]
  std::string firstOutOfRange;       ///< the first of them, exact, in decimal
};
/// Reads a 3-D label image. Same errors as ReadVolume.
LabelVolume ReadLabelVolume(const std::string& path);

/// A 4-D image (e.g. a probabilistic atlas: one volume per region), volume after volume.
struct Volume4D {
  Geometry geometry;                ///< of each 3-D volume
  std::int64_t volumes = 0;
  std::vector<float> data;          ///< volumes x VoxelCount() values, volume-major, x fastest
};
/// Reads every volume of a 3-D or 4-D image (a 3-D image is one volume). Same errors as ReadVolume.
Volume4D ReadVolume4D(const std::string& path);

/// Writes a float32 image; the extension (.nii or .nii.gz) decides compression. IoError on failure.
void WriteVolume(const std::string& path, const Volume& volume);

/// Version of the ITK this program was built with, e.g. "5.2.1".
std::string ItkVersion();

/// Number of NIfTI decodes since start (benchmarks and tests check "each image read once").
std::size_t VolumeReadCount();

/// While one is alive, ReadVolume keeps decoded volumes in memory (up to `budgetBytes` in all;
/// beyond it, images are decoded again) and serves repeated reads of an unchanged file (same
/// path, size and modification time) from memory. A batch uses it so that the studies of one
/// cohort (kernels, then each study's voxel weight maps) decode its images once.
class VolumeCacheScope {
 public:
  explicit VolumeCacheScope(std::size_t budgetBytes);
  ~VolumeCacheScope();
  VolumeCacheScope(const VolumeCacheScope&) = delete;
  VolumeCacheScope& operator=(const VolumeCacheScope&) = delete;
};

}  // namespace neuromkl::io
