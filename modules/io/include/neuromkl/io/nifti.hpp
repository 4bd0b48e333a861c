#pragma once
// NIfTI-1/-2 input and output (.nii, .nii.gz) through ITK; ITK stays inside this module.
#include <string>

#include "neuromkl/io/volume.hpp"

namespace neuromkl::io {

/// Reads only the header: geometry of a 3-D image. Same errors as ReadVolume.
Geometry ReadGeometry(const std::string& path);

/// Reads a 3-D image as float32. Errors (InputError, code in brackets):
/// missing/unreadable file [io:Missing], not a NIfTI file [io:NotNifti], a 4-D image with
/// more than one volume [io:Not3D] (ITK would silently return volume 0), corrupt or
/// truncated data [io:Corrupt]. Every message names the file.
Volume ReadVolume(const std::string& path);

/// Same, decoding into `out` and reusing its buffer: no allocation per image when one Volume is
/// reused for a whole cohort (fresh multi-megabyte buffers cost page faults and address-space locks
/// that slow parallel decoding by ~25 %).
void ReadVolume(const std::string& path, Volume& out);

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
