#pragma once
// Internal to the io module: our own reader of NIfTI-1, NIfTI-2 and Analyze 7.5 headers (single
// files and .hdr/.img pairs, gzip or not) and the voxel decoder all formats share. No ITK here.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "neuromkl/io/nifti.hpp"
#include "neuromkl/io/volume.hpp"

namespace neuromkl::io::detail {

/// Where the header and the voxels of an image live. For a single file both are the same path.
struct ImageFiles {
  std::string header, data;
  bool pair = false;
};

/// Maps a path (.nii, .nii.gz, .hdr, .hdr.gz, .img, .img.gz, any letter case) to its files.
/// A pair given by either half needs the other half: InputError io:MissingPairFile otherwise.
ImageFiles ResolveImageFiles(const std::string& path);

struct ImageHeader {
  ImageFormat format = ImageFormat::Nifti1;
  ImageFiles files;
  bool swapBytes = false;
  std::array<std::int64_t, 8> dim{};
  std::array<double, 8> pixdim{};
  int datatype = 0;
  double voxOffset = 0;          ///< byte offset of the voxels in files.data
  double slope = 0, inter = 0;   ///< NIfTI scl_slope/scl_inter; Analyze: SPM's funused1 (scale)
  int qformCode = 0, sformCode = 0;
  std::array<double, 3> quatern{}, qoffset{};
  std::array<double, 12> srow{};  ///< srow_x, srow_y, srow_z
  std::array<int, 3> originator{};  ///< Analyze (SPM): 1-based voxel at world (0, 0, 0); 0 = unset

  std::size_t BytesPerVoxel() const;
  std::int64_t VoxelsPerVolume() const { return dim[1] * dim[2] * dim[3]; }
  std::int64_t Volumes() const;  ///< product of dim[4..7]
};

/// Reads and validates a header: size and magic, dimensions, datatype, vox_offset, and that the
/// data file is long enough for every voxel the header announces (checked before any allocation).
ImageHeader ReadImageHeader(const std::string& path);

/// Geometry in LPS: sform if sform_code > 0, else qform if qform_code > 0 (NIfTI's rule, ITK's choice);
/// Analyze 7.5 files follow SPM (see docs/inputs.md); a NIfTI file with neither gets diag(pixdim).
Geometry GeometryFromHeader(const ImageHeader& header);

/// Decodes volumes [first, first + count) as float32 with scaling applied, into `out`.
void DecodeVolumes(const ImageHeader& header, std::int64_t first, std::int64_t count, std::vector<float>& out);

/// Decodes the first volume as exact integer labels (see LabelVolume).
void DecodeLabels(const ImageHeader& header, LabelVolume& out);

/// Whether the file starts with the gzip magic (its name does not decide: a gzipped file named .nii is read too).
bool IsGzipFile(const std::string& path);

/// f(T{}) with T the C++ type a NIfTI datatype code stores (uint8 ... float64); false, f not called, for a code that
/// is not decoded (ReadImageHeader refuses those).
template <typename F>
bool VisitDatatype(int datatype, F&& f) {
  switch (datatype) {
    case 2: f(std::uint8_t{}); return true;
    case 256: f(std::int8_t{}); return true;
    case 4: f(std::int16_t{}); return true;
    case 512: f(std::uint16_t{}); return true;
    case 8: f(std::int32_t{}); return true;
    case 768: f(std::uint32_t{}); return true;
    case 16: f(float{}); return true;
    case 64: f(double{}); return true;
    case 1024: f(std::int64_t{}); return true;
    case 1280: f(std::uint64_t{}); return true;
    default: return false;
  }
}

/// Whether decoding applies scl_slope/scl_inter (a finite slope that is neither 0 nor, with inter 0, the identity).
bool Scaled(const ImageHeader& h);

/// "uint8", "int16", ..., "float64" for a NIfTI datatype code.
std::string DatatypeName(int datatype);

/// Snaps near-axis direction cosines (float32 rounding) to 0 / +-1.
void SnapDirection(Geometry& g);

}  // namespace neuromkl::io::detail
