// NIfTI-1 / NIfTI-2 / Analyze 7.5 headers and voxels, read by us. ITK 5.2 refuses NIfTI-2, gives
// Analyze files an orientation SPM users would not expect, and its niftilib turns NaN into 0; one
// decoder for every format also guarantees that the same image stored in any of them reads the same.
#include "image_header.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <utility>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::io {

// Here rather than in nifti.cpp: the fuzz target builds this file without ITK (tests/fuzz).
std::string ToString(ImageFormat format) {
  switch (format) {
    case ImageFormat::Nifti1: return "NIfTI-1";
    case ImageFormat::Nifti1Pair: return "NIfTI-1 pair";
    case ImageFormat::Nifti2: return "NIfTI-2";
    case ImageFormat::Nifti2Pair: return "NIfTI-2 pair";
    case ImageFormat::Analyze75: return "Analyze 7.5";
  }
  return "?";
}

}  // namespace neuromkl::io

namespace neuromkl::io::detail {

namespace fs = std::filesystem;

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Same case as `like` (".IMG" for ".HDR"): a pair's two halves are named alike.
std::string MatchCase(const std::string& ext, const std::string& like) {
  const bool upper = std::any_of(like.begin(), like.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
  std::string out = ext;
  if (upper)
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool IsFile(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool IsGzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char m[2] = {0, 0};
  in.read(reinterpret_cast<char*>(m), 2);
  return in.gcount() == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

}  // namespace

bool IsGzipFile(const std::string& path) { return IsGzip(path); }

namespace {

struct GzFile {
  gzFile f = nullptr;
  explicit GzFile(const std::string& path) : f(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (f) gzclose(f);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
};

/// Reads up to `bytes`; returns how many were read (fewer at end of file). Throws on a gzip error.
std::size_t ReadUpTo(gzFile f, const std::string& path, void* dst, std::size_t bytes) {
  std::size_t done = 0;
  auto* p = static_cast<unsigned char*>(dst);
  while (done < bytes) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(bytes - done, 1u << 30));
    const int got = gzread(f, p + done, chunk);
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw InputError("io:Corrupt", path, std::string("the image cannot be decoded (corrupt gzip stream?): ") + msg);
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

/// Bytes as readable text for messages: printable ASCII as is, others as \0 or \xNN.
std::string EscapeBytes(const unsigned char* bytes, std::size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char b = bytes[i];
    if (b >= 32 && b < 127) s += static_cast<char>(b);
    else if (b == 0) s += "\\0";
    else s += std::string("\\x") + hex[b >> 4] + hex[b & 15];
  }
  return s;
}

}  // namespace

ImageFiles ResolveImageFiles(const std::string& path) {
  const std::string lower = ToLower(path);
  ImageFiles files;
  if (EndsWith(lower, ".nii") || EndsWith(lower, ".nii.gz")) {
    files.header = files.data = path;
    if (!IsFile(path)) throw InputError("io:Missing", path, "expected a NIfTI .nii or .nii.gz image file, but " + WhyNotAFile(path));
    return files;
  }
  // A pair: find the other half, same compression first, then the other one.
  const bool isHeader = EndsWith(lower, ".hdr") || EndsWith(lower, ".hdr.gz");
  const bool isData = EndsWith(lower, ".img") || EndsWith(lower, ".img.gz");
  if (!isHeader && !isData)
    throw InputError("io:NotNifti", path,
                     "not a NIfTI image (expected a .nii or .nii.gz file, or a .hdr/.img pair of NIfTI or Analyze 7.5, optionally gzipped)");
  const bool gz = EndsWith(lower, ".gz");
  const std::size_t extLen = gz ? 7 : 4;
  const std::string stem = path.substr(0, path.size() - extLen);
  const std::string ext = path.substr(path.size() - extLen);
  const std::string otherExt = isHeader ? ".img" : ".hdr";
  const std::vector<std::string> candidates = {stem + MatchCase(otherExt + (gz ? ".gz" : ""), ext),
                                               stem + MatchCase(otherExt + (gz ? "" : ".gz"), ext)};
  if (!IsFile(path))
    throw InputError("io:Missing", path, std::string("expected the ") + (isHeader ? "header" : "data") + " half of a .hdr/.img pair, but " +
                                             WhyNotAFile(path));
  files.pair = true;
  (isHeader ? files.header : files.data) = path;
  for (const auto& c : candidates)
    if (IsFile(c)) {
      (isHeader ? files.data : files.header) = c;
      return files;
    }
  throw InputError("io:MissingPairFile", path,
                   std::string("a .hdr/.img pair needs both files: the ") + (isHeader ? "voxel data file " : "header file ") +
                       candidates[0] + " (or " + candidates[1] + ") was not found");
}

std::string DatatypeName(int datatype) {
  switch (datatype) {
    case 2: return "uint8";
    case 256: return "int8";
    case 4: return "int16";
    case 512: return "uint16";
    case 8: return "int32";
    case 768: return "uint32";
    case 16: return "float32";
    case 64: return "float64";
    case 1024: return "int64";
    case 1280: return "uint64";
    default: return "datatype " + std::to_string(datatype);
  }
}

std::size_t ImageHeader::BytesPerVoxel() const {
  std::size_t bytes = 0;  // 0 for a datatype that is not decoded
  VisitDatatype(datatype, [&](auto sample) { bytes = sizeof(sample); });
  return bytes;
}

std::int64_t ImageHeader::Volumes() const {
  // In double: NIfTI-2 dims are int64, and their product must not overflow into a small or negative
  // count that would pass the size checks; anything beyond int64 saturates (and is refused there).
  double v = 1;
  for (int d = 4; d <= 7 && d <= dim[0]; ++d) v *= static_cast<double>(dim[static_cast<std::size_t>(d)]);
  return v >= 9.0e18 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(v);
}

namespace {
/// NIfTI allows a qform and an sform side by side; the sform takes precedence (ITK, nibabel and this
/// reader), but other tools (and older ones) take the qform. When both are set
/// (codes > 0) they must place the volume alike: the largest distance between where they put the
/// eight corner voxels must stay within kQformSformToleranceMm, otherwise the image is refused
/// (io:QformSformMismatch) rather than guessed at: a silent choice could shift or flip the atlas
/// against the images. 1 mm tolerates float32 rounding of the quaternion and small shears the qform
/// cannot express; it is far below a voxel of a typical (1.5-2 mm) morphometry grid shift.
constexpr double kQformSformToleranceMm = 1.0;

/// The header fields the geometry is made from, when they cannot give one: the voxel sizes (pixdim) of a qform or of
/// a header without forms, and the qform's quaternion (b, c, d), whose squared norm is at most 1 (a = sqrt(1 - b^2 -
/// c^2 - d^2)); beyond rounding (1e-4) it is no rotation, and readers would each make a different one of it.
void CheckOrientationFields(const ImageHeader& h, const std::string& where, const std::string& kind) {
  if (h.format == ImageFormat::Analyze75 || h.sformCode > 0) return;  // the sform alone places the image
  for (std::size_t i = 1; i <= 3; ++i)
    if (!std::isfinite(h.pixdim[i]) || h.pixdim[i] == 0.0)
      throw InputError("io:BadVoxelSize", where,
                       kind + " header: pixdim[" + std::to_string(i) + "] (the voxel size along axis " + std::to_string(i) + ") is " +
                           FormatDouble(h.pixdim[i]) + ", expected a positive size in mm; the " +
                           (h.qformCode > 0 ? "qform" : "grid") + " is made from it (the header has no sform)");
  if (h.qformCode <= 0) return;
  const double norm2 = h.quatern[0] * h.quatern[0] + h.quatern[1] * h.quatern[1] + h.quatern[2] * h.quatern[2];
  if (!std::isfinite(norm2) || norm2 > 1.0 + 1e-4)
    throw InputError("io:BadQuaternion", where,
                     kind + " header: the qform quaternion (b, c, d) = (" + FormatDouble(h.quatern[0]) + ", " + FormatDouble(h.quatern[1]) + ", " +
                         FormatDouble(h.quatern[2]) + ") has b^2 + c^2 + d^2 = " + FormatDouble(norm2) +
                         ", expected at most 1 (a rotation); the header is damaged: fix its qform (or set an sform)");
}

void CheckQformSformAgree(const ImageHeader& h, const std::string& where, const std::string& kind) {
  if (h.format == ImageFormat::Analyze75 || h.qformCode <= 0 || h.sformCode <= 0) return;
  ImageHeader q = h, s = h;
  q.sformCode = 0;
  s.qformCode = 0;
  const Geometry gq = GeometryFromHeader(q), gs = GeometryFromHeader(s);
  double worst = 0;
  std::array<double, 3> worstCorner{};
  for (int c = 0; c < 8; ++c) {
    std::array<double, 3> index{};
    for (std::size_t i = 0; i < 3; ++i) index[i] = (c >> i) & 1 ? static_cast<double>(std::max<std::int64_t>(h.dim[i + 1] - 1, 0)) : 0.0;
    const auto a = gq.IndexToLps(index), b = gs.IndexToLps(index);
    const double d = std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) + (a[2] - b[2]) * (a[2] - b[2]));
    if (!(d <= worst)) {
      worst = d;
      worstCorner = index;
    }
  }
  if (worst <= kQformSformToleranceMm) return;
  std::string msg = kind;
  msg += " header: the qform (code " + std::to_string(h.qformCode) + ") and the sform (code " + std::to_string(h.sformCode) +
         ") disagree by " + FormatDouble(std::round(worst * 100) / 100) + " mm at the corner voxel (" + FormatDouble(worstCorner[0]) + ", " +
         FormatDouble(worstCorner[1]) + ", " + FormatDouble(worstCorner[2]) + "), more than the 1 mm tolerated: it is ambiguous where the image " +
         "lies (tools differ on which one to use); fix the header (e.g. set the wrong one from the right one, or its code to 0)";
  throw InputError("io:QformSformMismatch", where, msg);
}
/// A header file's first bytes (as many as a NIfTI-2 header holds), and the byte order its numbers are read in.
struct RawHeader {
  unsigned char bytes[540] = {};
  std::size_t got = 0;
  bool swap = false;
  /// The value at `offset`, its bytes reversed for a header written on a machine of the other byte order.
  template <typename T>
  void Get(std::size_t offset, T& out) const {
    std::memcpy(&out, bytes + offset, sizeof out);
    if (swap) {
      auto* b = reinterpret_cast<unsigned char*>(&out);
      std::reverse(b, b + sizeof out);
    }
  }
};

/// Reads the header file's first bytes: io:Missing when it cannot be opened, io:Corrupt when it holds fewer than 348.
RawHeader ReadRawHeader(const std::string& hp) {
  RawHeader raw;
  {
    GzFile f(hp);
    if (!f.f) throw InputError("io:Missing", hp, "image file exists but cannot be opened for reading (permissions?)");
    raw.got = ReadUpTo(f.f, hp, raw.bytes, sizeof raw.bytes);
  }
  if (raw.got < 348)
    throw InputError("io:Corrupt", hp, "the header is truncated: expected at least 348 bytes, found " + std::to_string(raw.got));
  return raw;
}

/// sizeof_hdr (348: NIfTI-1 or Analyze; 540: NIfTI-2), which also tells the byte order: read swapped, it sets
/// `raw.swap`. io:NotNifti for any other value.
std::int32_t HeaderSize(RawHeader& raw, const std::string& hp) {
  std::int32_t sizeofHdr;
  std::memcpy(&sizeofHdr, raw.bytes, 4);
  std::int32_t swapped = sizeofHdr;
  std::reverse(reinterpret_cast<unsigned char*>(&swapped), reinterpret_cast<unsigned char*>(&swapped) + 4);
  if (sizeofHdr != 348 && sizeofHdr != 540 && (swapped == 348 || swapped == 540)) {
    raw.swap = true;
    sizeofHdr = swapped;
  }
  if (sizeofHdr != 348 && sizeofHdr != 540)
    throw InputError("io:NotNifti", hp,
                     "not a NIfTI-1, NIfTI-2 or Analyze 7.5 header: sizeof_hdr is " + std::to_string(sizeofHdr) +
                         ", expected 348 (NIfTI-1/Analyze) or 540 (NIfTI-2)");
  return sizeofHdr;
}

/// The fields of a NIfTI-2 header (64-bit dims, double pixdim and forms), after its magic.
void ReadNifti2Fields(const RawHeader& raw, ImageHeader& h, const std::string& hp) {
  const bool pair = h.files.pair;
  if (raw.got < 540) throw InputError("io:Corrupt", hp, "the NIfTI-2 header is truncated: expected 540 bytes, found " + std::to_string(raw.got));
  const unsigned char* magic = raw.bytes + 4;
  const char* expected = pair ? "ni2" : "n+2";
  if (std::memcmp(magic, expected, 4) != 0 || magic[4] != '\r' || magic[5] != '\n' || magic[6] != 0x1a || magic[7] != '\n')
    throw InputError("io:BadMagic", hp,
                     std::string("bad NIfTI-2 magic: expected \"") + expected + "\\0\\r\\n\\x1a\\n\" (" +
                         (pair ? "a .hdr/.img pair" : "a single-file .nii") + "), found \"" + EscapeBytes(magic, 8) + "\"");
  h.format = pair ? ImageFormat::Nifti2Pair : ImageFormat::Nifti2;
  std::int16_t datatype;
  raw.Get(12, datatype);
  h.datatype = datatype;
  for (std::size_t i = 0; i < 8; ++i) raw.Get(16 + 8 * i, h.dim[i]);
  for (std::size_t i = 0; i < 8; ++i) raw.Get(104 + 8 * i, h.pixdim[i]);
  std::int64_t voxOffset;
  raw.Get(168, voxOffset);
  h.voxOffset = static_cast<double>(voxOffset);
  raw.Get(176, h.slope);
  raw.Get(184, h.inter);
  std::int32_t q, s;
  raw.Get(344, q);
  raw.Get(348, s);
  h.qformCode = q;
  h.sformCode = s;
  for (std::size_t i = 0; i < 3; ++i) raw.Get(352 + 8 * i, h.quatern[i]);
  for (std::size_t i = 0; i < 3; ++i) raw.Get(376 + 8 * i, h.qoffset[i]);
  for (std::size_t i = 0; i < 12; ++i) raw.Get(400 + 8 * i, h.srow[i]);
}

/// The fields of a 348-byte header: NIfTI-1 (its magic, 16-bit dims, float pixdim and forms) or, in a pair whose magic
/// is four zero bytes, Analyze 7.5 (SPM's originator in place of the forms).
void ReadNifti1Fields(const RawHeader& raw, ImageHeader& h, const std::string& hp) {
  const bool pair = h.files.pair;
  const unsigned char* magic = raw.bytes + 344;
  const bool nifti = std::memcmp(magic, pair ? "ni1" : "n+1", 4) == 0;
  const bool blank = magic[0] == 0 && magic[1] == 0 && magic[2] == 0 && magic[3] == 0;
  if (!nifti && !(pair && blank))
    throw InputError("io:BadMagic", hp,
                     std::string("bad NIfTI-1 magic: expected \"") + (pair ? "ni1\\0\" (a .hdr/.img pair; or four zero bytes for Analyze 7.5)"
                                                                            : "n+1\\0\" (a single-file .nii)") +
                         ", found \"" + EscapeBytes(magic, 4) + "\"");
  h.format = nifti ? (pair ? ImageFormat::Nifti1Pair : ImageFormat::Nifti1) : ImageFormat::Analyze75;
  std::int16_t d16;
  raw.Get(70, d16);
  h.datatype = d16;
  for (std::size_t i = 0; i < 8; ++i) {
    raw.Get(40 + 2 * i, d16);
    h.dim[i] = d16;
  }
  float f32;
  for (std::size_t i = 0; i < 8; ++i) {
    raw.Get(76 + 4 * i, f32);
    h.pixdim[i] = f32;
  }
  raw.Get(108, f32);
  h.voxOffset = f32;
  raw.Get(112, f32);
  h.slope = f32;
  raw.Get(116, f32);
  h.inter = f32;
  if (nifti) {
    raw.Get(252, d16);
    h.qformCode = d16;
    raw.Get(254, d16);
    h.sformCode = d16;
    for (std::size_t i = 0; i < 3; ++i) {
      raw.Get(256 + 4 * i, f32);
      h.quatern[i] = f32;
      raw.Get(268 + 4 * i, f32);
      h.qoffset[i] = f32;
    }
    for (std::size_t i = 0; i < 12; ++i) {
      raw.Get(280 + 4 * i, f32);
      h.srow[i] = f32;
    }
  } else {
    // SPM keeps the origin voxel in the Analyze "originator" field: five int16 from byte 253.
    for (std::size_t i = 0; i < 3; ++i) {
      raw.Get(253 + 2 * i, d16);
      h.originator[i] = d16;
    }
    h.inter = 0;  // Analyze has no intercept; SPM reads funused1 (byte 112) as the scale factor only
  }
}

/// Dimensions: dim[0] in 1..7, each used dim >= 1 (the unused ones set to 1), and a datatype we decode.
void CheckDimensionsAndType(ImageHeader& h, const std::string& hp, const std::string& kind) {
  if (h.dim[0] < 1 || h.dim[0] > 7)
    throw InputError("io:Corrupt", hp, kind + " header: dim[0] (number of dimensions) is " + std::to_string(h.dim[0]) + ", expected 1..7");
  for (std::int64_t d = 1; d <= 7; ++d) {
    auto& v = h.dim[static_cast<std::size_t>(d)];
    if (d > h.dim[0]) v = 1;
    else if (v < 1)
      throw InputError("io:Corrupt", hp, kind + " header: dim[" + std::to_string(d) + "] is " + std::to_string(v) + ", expected >= 1");
  }
  if (h.BytesPerVoxel() == 0)
    throw InputError("io:UnsupportedType", hp,
                     kind + " header: unsupported datatype " + std::to_string(h.datatype) +
                         " (expected an integer or real scalar type: 2 uint8, 4 int16, 8 int32, 16 float32, 64 float64, "
                         "256 int8, 512 uint16, 768 uint32, 1024 int64, 1280 uint64)");
}

/// Where the voxels start and whether the data file holds them all, before anything is allocated.
void CheckVoxelsFit(const ImageHeader& h, const std::string& hp, const std::string& kind, std::int32_t sizeofHdr) {
  const bool pair = h.files.pair;
  // vox_offset: a single file's voxels start after the header (352 = 348 + the 4-byte extension flag).
  const double minOffset = pair ? 0.0 : (sizeofHdr == 540 ? 544.0 : 352.0);
  if (!std::isfinite(h.voxOffset) || h.voxOffset < minOffset || h.voxOffset != std::floor(h.voxOffset))
    throw InputError("io:BadVoxOffset", hp,
                     kind + " header: invalid vox_offset " + FormatDouble(h.voxOffset) + ", expected a whole number >= " +
                         FormatDouble(minOffset) + (pair ? " (byte offset in the .img file)" : " (the voxels follow the header)") +
                         "; refusing to guess where the voxels start");
  // Sizes before any allocation: overflow-safe product, then against the data file's length.
  const double voxelsD = static_cast<double>(h.dim[1]) * static_cast<double>(h.dim[2]) * static_cast<double>(h.dim[3]) *
                         static_cast<double>(h.Volumes());
  const double needD = h.voxOffset + voxelsD * static_cast<double>(h.BytesPerVoxel());
  std::error_code ec;
  const auto fileBytes = static_cast<double>(fs::file_size(h.files.data, ec));
  if (ec) throw InputError("io:Missing", h.files.data, "cannot read the size of the image data file");
  // A gzip stream inflates at most ~1032:1 (deflate's limit); plain files must hold every byte.
  const bool gz = IsGzip(h.files.data);
  const double available = gz ? fileBytes * 1032.0 : fileBytes;
  if (voxelsD > 9.0e18 || needD > available)
    throw InputError("io:Truncated", h.files.data,
                     kind + " header (" + hp + ") announces " + std::to_string(h.dim[1]) + "x" + std::to_string(h.dim[2]) + "x" +
                         std::to_string(h.dim[3]) + (h.Volumes() > 1 ? "x" + std::to_string(h.Volumes()) : std::string()) + " voxels of " +
                         std::to_string(h.BytesPerVoxel()) + " bytes from offset " + FormatDouble(h.voxOffset) + " (" +
                         FormatDouble(needD) + " bytes), but the " + (gz ? "compressed " : "") + "data file has only " +
                         FormatDouble(fileBytes) + " bytes: the file is truncated or the header is wrong");
}
}  // namespace

ImageHeader ReadImageHeader(const std::string& path) {
  ImageHeader h;
  h.files = ResolveImageFiles(path);
  const std::string& hp = h.files.header;
  RawHeader raw = ReadRawHeader(hp);
  const std::int32_t sizeofHdr = HeaderSize(raw, hp);
  h.swapBytes = raw.swap;
  if (sizeofHdr == 540) ReadNifti2Fields(raw, h, hp);
  else ReadNifti1Fields(raw, h, hp);
  const std::string kind = ToString(h.format);
  CheckDimensionsAndType(h, hp, kind);
  CheckVoxelsFit(h, hp, kind, sizeofHdr);
  CheckOrientationFields(h, hp, kind);
  CheckQformSformAgree(h, hp, kind);
  return h;
}

void SnapDirection(Geometry& g) {
  for (double& d : g.direction) {
    if (std::abs(d) < 1e-6) d = 0.0;
    else if (std::abs(std::abs(d) - 1.0) < 1e-6) d = d > 0 ? 1.0 : -1.0;
  }
}

Geometry GeometryFromHeader(const ImageHeader& h) {
  Geometry g;
  for (std::size_t i = 0; i < 3; ++i) g.dims[i] = h.dim[i + 1];
  double ras[3][3] = {};  // columns = axis directions (unit), RAS
  double rasOrigin[3] = {0, 0, 0};
  auto voxel = [&](std::size_t i) { return h.pixdim[i + 1] > 0 && std::isfinite(h.pixdim[i + 1]) ? h.pixdim[i + 1] : 1.0; };
  if (h.format == ImageFormat::Analyze75) {
    // SPM (spm_flip_analyze_images, default flip = 1): Analyze voxels are stored radiologically (LAS):
    // x runs right to left, so the x axis is flipped, unless pixdim[1] < 0 (FSL's marker for an
    // already neurological file). The origin is SPM's "originator" voxel, else the centre of the grid.
    const bool fslNegativeX = h.pixdim[1] < 0;
    double vox[3];
    for (std::size_t i = 0; i < 3; ++i) {
      vox[i] = std::abs(h.pixdim[i + 1]);
      if (vox[i] == 0 || !std::isfinite(vox[i])) vox[i] = 1.0;
    }
    const bool originSet = h.originator[0] != 0 || h.originator[1] != 0 || h.originator[2] != 0;
    for (std::size_t i = 0; i < 3; ++i) {
      const double origin1 = originSet ? h.originator[i] : (static_cast<double>(h.dim[i + 1]) + 1.0) / 2.0;  // 1-based
      const double sign = (i == 0 && !fslNegativeX) ? -1.0 : 1.0;
      ras[i][i] = sign;
      g.spacing[i] = vox[i];
      rasOrigin[i] = sign * vox[i] * (1.0 - origin1);  // world position of 0-based voxel 0
    }
  } else if (h.qformCode > 0 && h.sformCode <= 0) {  // the sform takes precedence (NIfTI, ITK, nibabel)
    // nifti1.h: quaternion (b, c, d), a = sqrt(1 - b^2 - c^2 - d^2); qfac = pixdim[0] (< 0 flips z).
    double b = h.quatern[0], c = h.quatern[1], d = h.quatern[2];
    double a = 1.0 - (b * b + c * c + d * d);
    if (a < 1e-7) {
      a = 1.0 / std::sqrt(b * b + c * c + d * d);
      b *= a;
      c *= a;
      d *= a;
      a = 0.0;
    } else {
      a = std::sqrt(a);
    }
    const double qfac = h.pixdim[0] < 0 ? -1.0 : 1.0;
    const double r[3][3] = {{a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)},
                            {2 * (b * c + a * d), a * a + c * c - b * b - d * d, 2 * (c * d - a * b)},
                            {2 * (b * d - a * c), 2 * (c * d + a * b), a * a + d * d - c * c - b * b}};
    for (std::size_t i = 0; i < 3; ++i) {
      for (std::size_t j = 0; j < 3; ++j) ras[i][j] = r[i][j] * (j == 2 ? qfac : 1.0);
      g.spacing[i] = voxel(i);
      rasOrigin[i] = h.qoffset[i];
    }
  } else if (h.sformCode > 0) {
    for (std::size_t j = 0; j < 3; ++j) {
      const double norm = std::sqrt(h.srow[j] * h.srow[j] + h.srow[4 + j] * h.srow[4 + j] + h.srow[8 + j] * h.srow[8 + j]);
      g.spacing[j] = norm > 0 ? norm : 1.0;
      for (std::size_t i = 0; i < 3; ++i) ras[i][j] = norm > 0 ? h.srow[4 * i + j] / norm : (i == j ? 1.0 : 0.0);
    }
    for (std::size_t i = 0; i < 3; ++i) rasOrigin[i] = h.srow[4 * i + 3];
  } else {
    for (std::size_t i = 0; i < 3; ++i) {
      ras[i][i] = 1.0;
      g.spacing[i] = voxel(i);
    }
    g.worldKnown = false;
  }
  for (std::size_t i = 0; i < 3; ++i) {
    const double flip = i < 2 ? -1.0 : 1.0;  // RAS -> LPS
    g.origin[i] = flip * rasOrigin[i];
    for (std::size_t j = 0; j < 3; ++j) g.direction[i * 3 + j] = flip * ras[i][j];
  }
  SnapDirection(g);
  return g;
}

namespace {

/// The raw bytes of volumes [first, first + count), as stored (one buffer per thread, reused: no fresh
/// multi-megabyte buffer per image).
const std::vector<unsigned char>& ReadRawVoxels(const ImageHeader& h, std::int64_t first, std::int64_t count) {
  const std::string& path = h.files.data;
  const auto voxels = static_cast<std::size_t>(h.VoxelsPerVolume() * count);
  const std::size_t width = h.BytesPerVoxel();
  GzFile f(path);
  if (!f.f) throw InputError("io:Missing", path, "cannot open the image data for reading");
  auto skip = [&](std::size_t bytes, const char* what) {
    std::vector<unsigned char> buffer(std::min<std::size_t>(bytes, 1u << 20));
    std::size_t left = bytes;
    while (left > 0) {
      const std::size_t n = std::min(left, buffer.size());
      if (ReadUpTo(f.f, path, buffer.data(), n) != n)
        throw InputError("io:Truncated", path, std::string("the file ends inside ") + what + " (before byte " +
                                                   std::to_string(bytes) + " where the header says the voxels start)");
      left -= n;
    }
  };
  const auto offset = static_cast<std::size_t>(h.voxOffset) +
                      static_cast<std::size_t>(first) * static_cast<std::size_t>(h.VoxelsPerVolume()) * width;
  skip(offset, h.files.pair ? "the data file" : "the header extensions");
  thread_local std::vector<unsigned char> raw;
  raw.resize(voxels * width);
  const std::size_t read = ReadUpTo(f.f, path, raw.data(), raw.size());
  if (read != raw.size())
    throw InputError("io:Truncated", path,
                     "the image data cannot be decoded (corrupt or truncated file?): the voxel data end after " + std::to_string(read) +
                         " of " + std::to_string(raw.size()) + " bytes");
  return raw;
}

/// Calls `visit(i, x)` for each stored voxel value x in its own type (byte order fixed).
template <typename Visit>
void ForEachStored(const ImageHeader& h, const std::vector<unsigned char>& raw, Visit&& visit) {
  const std::size_t voxels = raw.size() / std::max<std::size_t>(1, h.BytesPerVoxel());
  auto convert = [&](auto sample) {
    using T = decltype(sample);
    for (std::size_t i = 0; i < voxels; ++i) {
      T x;
      std::memcpy(&x, raw.data() + i * sizeof(T), sizeof(T));
      if (h.swapBytes) {
        auto* b = reinterpret_cast<unsigned char*>(&x);
        std::reverse(b, b + sizeof(T));
      }
      visit(i, x);
    }
  };
  VisitDatatype(h.datatype, convert);  // false for a datatype ReadImageHeader rejects
}

}  // namespace

/// NIfTI: scaling applies when scl_slope is non-zero (and finite) and not the identity.
bool Scaled(const ImageHeader& h) { return std::isfinite(h.slope) && h.slope != 0.0 && (h.slope != 1.0 || h.inter != 0.0); }

void DecodeVolumes(const ImageHeader& h, std::int64_t first, std::int64_t count, std::vector<float>& out) {
  const auto& raw = ReadRawVoxels(h, first, count);
  out.resize(static_cast<std::size_t>(h.VoxelsPerVolume() * count));
  ForEachStored(h, raw, [&](std::size_t i, auto x) { out[i] = static_cast<float>(x); });
  // Scaling in double, then to float32.
  const double slope = h.slope, inter = h.inter;
  if (Scaled(h))
    for (auto& x : out) x = static_cast<float>(static_cast<double>(x) * slope + inter);
}

void DecodeLabels(const ImageHeader& h, LabelVolume& out) {
  const auto& raw = ReadRawVoxels(h, 0, 1);
  out.labels.assign(static_cast<std::size_t>(h.VoxelsPerVolume()), 0);
  out.datatype = DatatypeName(h.datatype);
  out.nonInteger = out.outOfRange = 0;
  out.firstOutOfRange.clear();
  constexpr std::int64_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
  auto beyond = [&](const std::string& text) {
    if (out.outOfRange++ == 0) out.firstOutOfRange = text;
  };
  const bool scaled = Scaled(h);
  ForEachStored(h, raw, [&](std::size_t i, auto x) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>) {
      if (!scaled) {  // exact: compared in the stored type's own range, never through a float
        if (std::cmp_less(x, lo) || std::cmp_greater(x, hi)) beyond(std::to_string(x));
        else out.labels[i] = static_cast<std::int32_t>(x);
        return;
      }
    }
    const double y = scaled ? static_cast<double>(x) * h.slope + h.inter : static_cast<double>(x);
    if (!std::isfinite(y) || y != std::round(y)) ++out.nonInteger;
    else if (y < static_cast<double>(lo) || y > static_cast<double>(hi)) beyond(FormatDouble(y));
    else out.labels[i] = static_cast<std::int32_t>(y);
  });
}

}  // namespace neuromkl::io::detail
