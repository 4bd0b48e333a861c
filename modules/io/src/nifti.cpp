// The only translation unit that includes ITK headers (slow to compile, and ITK brings its own
// Eigen 3.3: keep Eigen out of this file).
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include <itkConfigure.h>
#include <itkImage.h>
#include <itkImageFileWriter.h>
#include <itkImageIOFactory.h>
#include <itkMultiThreaderBase.h>
#include <itkNiftiImageIO.h>
#include <itkNiftiImageIOFactory.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"

namespace neuromkl::io {

namespace {

using FloatImage = itk::Image<float, 3>;
std::atomic<std::size_t> gReads{0};

void InitItk() {
  static std::once_flag once;
  std::call_once(once, [] {
    itk::NiftiImageIOFactory::RegisterOneFactory();
    // We parallelise across subjects ourselves; ITK's own pool would oversubscribe.
    itk::MultiThreaderBase::SetGlobalDefaultNumberOfThreads(1);
  });
}

bool HasNiftiExtension(const std::string& path) {
  auto ends = [&](const std::string& s) { return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0; };
  return ends(".nii") || ends(".nii.gz");
}

itk::ImageIOBase::Pointer OpenIo(const std::string& path) {
  InitItk();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError("io:Missing", path, "image file not found (expected a NIfTI .nii or .nii.gz file)");
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw InputError("io:Missing", path, "image file exists but cannot be opened for reading (permissions?)");
  }
  // ITK bug #2243: with both X.nii and X.nii.gz present, reading X.nii.gz returns corrupted data.
  if (path.size() > 7 && path.compare(path.size() - 7, 7, ".nii.gz") == 0) {
    const std::string twin = path.substr(0, path.size() - 3);
    if (std::filesystem::exists(twin, ec))
      throw InputError("io:AmbiguousTwin", path,
                       "both " + twin + " and " + path + " exist; ITK would read corrupted data from the .nii.gz: remove one of them");
  }
  auto io = itk::NiftiImageIO::New();
  if (!HasNiftiExtension(path) || !io->CanReadFile(path.c_str()))
    throw InputError("io:NotNifti", path, "not a NIfTI image (expected a .nii or .nii.gz file with a NIfTI-1/NIfTI-2 header)");
  try {
    io->SetFileName(path);
    io->ReadImageInformation();
  } catch (const itk::ExceptionObject& e) {
    throw InputError("io:Corrupt", path, std::string("cannot read the NIfTI header: ") + e.GetDescription());
  }
  const unsigned dims = io->GetNumberOfDimensions();
  std::size_t volumes = 1;
  for (unsigned d = 3; d < dims; ++d) volumes *= io->GetDimensions(d);
  if (dims > 3 && volumes > 1)
    throw InputError("io:Not3D", path,
                     "expected a 3-D image, found a " + std::to_string(dims) + "-D image with " + std::to_string(volumes) +
                         " volumes; split it into one 3-D image per subject");
  if (dims < 3) throw InputError("io:Not3D", path, "expected a 3-D image, found " + std::to_string(dims) + "-D");
  return itk::ImageIOBase::Pointer(io.GetPointer());
}


/// Raw NIfTI-1/-2 voxel decoding with zlib (which also reads uncompressed files). ITK's bundled
/// niftilib silently replaces every NaN/Inf of float images by 0 (nifti_read_buffer), which would
/// hide exactly the voxels our non-finite rule must see; so ITK reads headers and geometry, and the
/// voxels are decoded here, scl_slope/scl_inter applied, as float32.
void DecodeVoxels(const std::string& path, std::size_t voxels, std::vector<float>& out) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw InputError("io:Missing", path, "cannot open the image for reading");
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  unsigned char hdr[540];
  auto readExactly = [&](void* dst, std::size_t bytes, const char* what) {
    std::size_t done = 0;
    auto* p = static_cast<unsigned char*>(dst);
    while (done < bytes) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(bytes - done, 1u << 30));
      const int got = gzread(f, p + done, chunk);
      if (got <= 0) {
        int err = 0;
        const char* msg = gzerror(f, &err);
        throw InputError("io:Corrupt", path,
                         std::string("the image data cannot be decoded (corrupt or truncated file?): ") + what + " ends after " +
                             std::to_string(done) + " of " + std::to_string(bytes) + " bytes" + (err ? std::string(" (") + msg + ")" : ""));
      }
      done += static_cast<std::size_t>(got);
    }
  };
  readExactly(hdr, 348, "the header");
  std::int32_t size;
  std::memcpy(&size, hdr, 4);
  const bool swap = size != 348 && size != 540;
  auto get = [&](std::size_t offset, auto& out) {
    std::memcpy(&out, hdr + offset, sizeof out);
    if (swap) {
      auto* b = reinterpret_cast<unsigned char*>(&out);
      std::reverse(b, b + sizeof out);
    }
  };
  get(0, size);
  std::int16_t datatype = 0;
  double slope = 0, inter = 0, offset = 0;
  if (size == 540) {
    readExactly(hdr + 348, 540 - 348, "the header");
    std::int64_t voxOffset;
    get(12, datatype);
    get(168, voxOffset);
    get(176, slope);
    get(184, inter);
    offset = static_cast<double>(voxOffset);
  } else if (size == 348) {
    float voxOffset, s, i;
    get(70, datatype);
    get(108, voxOffset);
    get(112, s);
    get(116, i);
    offset = voxOffset;
    slope = s;
    inter = i;
  } else {
    throw InputError("io:NotNifti", path, "not a NIfTI-1 or NIfTI-2 header (sizeof_hdr is neither 348 nor 540)");
  }
  const std::size_t headerBytes = size == 540 ? 540 : 348;
  if (offset > static_cast<double>(headerBytes)) {
    std::vector<unsigned char> skip(static_cast<std::size_t>(offset) - headerBytes);
    readExactly(skip.data(), skip.size(), "the header extensions");
  }
  std::size_t width = 0;
  switch (datatype) {
    case 2: case 256: width = 1; break;              // uint8, int8
    case 4: case 512: width = 2; break;              // int16, uint16
    case 8: case 768: case 16: width = 4; break;     // int32, uint32, float32
    case 64: case 1024: case 1280: width = 8; break; // float64, int64, uint64
    default:
      throw InputError("io:UnsupportedType", path, "unsupported NIfTI datatype " + std::to_string(datatype) +
                                                        " (expected an integer or real scalar type)");
  }
  thread_local std::vector<unsigned char> raw;  // reused: no fresh multi-megabyte buffer per image
  raw.resize(voxels * width);
  readExactly(raw.data(), raw.size(), "the voxel data");
  out.resize(voxels);
  auto convert = [&](auto sample) {
    using T = decltype(sample);
    for (std::size_t i = 0; i < voxels; ++i) {
      T x;
      std::memcpy(&x, raw.data() + i * sizeof(T), sizeof(T));
      if (swap) {
        auto* b = reinterpret_cast<unsigned char*>(&x);
        std::reverse(b, b + sizeof(T));
      }
      out[i] = static_cast<float>(x);
    }
  };
  switch (datatype) {
    case 2: convert(std::uint8_t{}); break;
    case 256: convert(std::int8_t{}); break;
    case 4: convert(std::int16_t{}); break;
    case 512: convert(std::uint16_t{}); break;
    case 8: convert(std::int32_t{}); break;
    case 768: convert(std::uint32_t{}); break;
    case 16: convert(float{}); break;
    case 64: convert(double{}); break;
    case 1024: convert(std::int64_t{}); break;
    case 1280: convert(std::uint64_t{}); break;
  }
  // NIfTI: scaling applies when scl_slope is non-zero (and finite).
  if (std::isfinite(slope) && slope != 0.0 && (slope != 1.0 || inter != 0.0))
    for (auto& x : out) x = static_cast<float>(static_cast<double>(x) * slope + inter);
}

/// niftilib converts quaternions to matrices in float32: cosines such as 0.99999994 or 6e-8 would
/// move exact voxel-centre ties (x.5) to the wrong side when resampling. Snap near-axis values.
void SnapDirection(Geometry& g) {
  for (double& d : g.direction) {
    if (std::abs(d) < 1e-6) d = 0.0;
    else if (std::abs(std::abs(d) - 1.0) < 1e-6) d = d > 0 ? 1.0 : -1.0;
  }
}

}  // namespace

Geometry GeometryFromIo(itk::ImageIOBase* io) {
  Geometry g;
  for (unsigned i = 0; i < 3; ++i) {
    g.dims[i] = static_cast<std::int64_t>(io->GetDimensions(i));
    g.spacing[i] = io->GetSpacing(i);
    g.origin[i] = io->GetOrigin(i);
    const auto axis = io->GetDirection(i);
    for (unsigned r = 0; r < 3; ++r) g.direction[r * 3 + i] = axis[r];
  }
  SnapDirection(g);
  return g;
}

Geometry ReadGeometry(const std::string& path) { return GeometryFromIo(OpenIo(path)); }

namespace {
struct CachedVolume {
  std::uintmax_t size = 0;
  std::filesystem::file_time_type mtime;
  Volume volume;
};
std::mutex gCacheMutex;
bool gCacheOn = false;
std::size_t gCacheBudget = 0, gCacheBytes = 0;
std::map<std::string, CachedVolume> gCache;

bool FileStamp(const std::string& path, std::uintmax_t& size, std::filesystem::file_time_type& mtime) {
  std::error_code ec;
  size = std::filesystem::file_size(path, ec);
  if (ec) return false;
  mtime = std::filesystem::last_write_time(path, ec);
  return !ec;
}
}  // namespace

VolumeCacheScope::VolumeCacheScope(std::size_t budgetBytes) {
  std::lock_guard<std::mutex> lock(gCacheMutex);
  gCacheOn = true;
  gCacheBudget = budgetBytes;
}

VolumeCacheScope::~VolumeCacheScope() {
  std::lock_guard<std::mutex> lock(gCacheMutex);
  gCacheOn = false;
  gCache.clear();
  gCacheBytes = 0;
}

void ReadVolume(const std::string& path, Volume& out) {
  std::uintmax_t size = 0;
  std::filesystem::file_time_type mtime;
  bool cacheable = false;
  {
    std::lock_guard<std::mutex> lock(gCacheMutex);
    cacheable = gCacheOn;
  }
  if (cacheable && FileStamp(path, size, mtime)) {
    std::lock_guard<std::mutex> lock(gCacheMutex);
    if (auto it = gCache.find(path); it != gCache.end() && it->second.size == size && it->second.mtime == mtime) {
      out.geometry = it->second.volume.geometry;
      out.data.assign(it->second.volume.data.begin(), it->second.volume.data.end());
      return;
    }
  } else {
    cacheable = false;
  }
  out.geometry = GeometryFromIo(OpenIo(path));  // ITK: header checks and geometry (qform/sform, LPS)
  DecodeVoxels(path, static_cast<std::size_t>(out.geometry.VoxelCount()), out.data);
  ++gReads;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(gCacheMutex);
    const std::size_t bytes = out.data.size() * sizeof(float);
    if (gCacheOn && gCacheBytes + bytes <= gCacheBudget && !gCache.count(path)) {
      gCache[path] = CachedVolume{size, mtime, out};
      gCacheBytes += bytes;
    }
  }
}

Volume ReadVolume(const std::string& path) {
  Volume v;
  ReadVolume(path, v);
  return v;
}

void WriteVolume(const std::string& path, const Volume& volume) {
  InitItk();
  const auto& g = volume.geometry;
  if (static_cast<std::int64_t>(volume.data.size()) != g.VoxelCount())
    throw IoError("io:ShapeMismatch", path, "volume has " + std::to_string(volume.data.size()) + " values, geometry expects " + std::to_string(g.VoxelCount()));
  auto image = FloatImage::New();
  FloatImage::RegionType region;
  FloatImage::SpacingType spacing;
  FloatImage::PointType origin;
  FloatImage::DirectionType direction;
  for (int i = 0; i < 3; ++i) {
    region.SetSize(i, static_cast<itk::SizeValueType>(g.dims[i]));
    spacing[i] = g.spacing[i];
    origin[i] = g.origin[i];
    for (int j = 0; j < 3; ++j) direction[i][j] = g.direction[i * 3 + j];
  }
  image->SetRegions(region);
  image->SetSpacing(spacing);
  image->SetOrigin(origin);
  image->SetDirection(direction);
  image->Allocate();
  std::copy(volume.data.begin(), volume.data.end(), image->GetBufferPointer());
  auto writer = itk::ImageFileWriter<FloatImage>::New();
  writer->SetFileName(path);
  writer->SetInput(image);
  writer->SetImageIO(itk::NiftiImageIO::New());
  try {
    writer->Update();
  } catch (const itk::ExceptionObject& e) {
    throw IoError("io:WriteFailed", path, std::string("cannot write the NIfTI image: ") + e.GetDescription());
  }
}

std::string ItkVersion() { return ITK_VERSION_STRING "." + std::to_string(ITK_VERSION_PATCH); }

std::size_t VolumeReadCount() { return gReads.load(); }

}  // namespace neuromkl::io
