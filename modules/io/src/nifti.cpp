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
#include <limits>
#include <map>
#include <mutex>
#include <type_traits>

#include <itkConfigure.h>
#include <itkImage.h>
#include <itkImageFileWriter.h>
#include <itkImageIOFactory.h>
#include <itkMultiThreaderBase.h>
#include <itkNiftiImageIO.h>
#include <itkNiftiImageIOFactory.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/io/nifti.hpp"
#include "image_header.hpp"

namespace neuromkl::io {

namespace {

using FloatImage = itk::Image<float, 3>;
std::atomic<std::size_t> gReads{0};

/// ITK 5.2 is not safe to enter from several threads at once, and neuromkl reads headers and writes maps on several:
/// it makes its process-wide objects on first use with a look-up then an insertion into one std::map, without a lock
/// (itk::Singleton), and NiftiImageIO::ReadImageInformation assigns a std::string the library shares. Concurrent
/// calls race on both, which can corrupt the heap; ThreadSanitizer reported each. Every use of ITK in this file holds
/// this lock: header reads are short, and our own decoder, outside it, reads the voxels.
std::mutex& ItkLock() {
  static std::mutex lock;
  return lock;
}

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
    throw InputError("io:Missing", path, "expected a NIfTI .nii or .nii.gz image file, but " + WhyNotAFile(path));
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
  detail::SnapDirection(g);
  return g;
}

namespace {

/// ITK keeps reading what it always read (lower-case single-file NIfTI-1: headers, qform/sform); our
/// own header reader serves every other format (and is tested to agree with ITK on the same image).
bool ItkReadsGeometry(const detail::ImageHeader& h) {
  const std::string& p = h.files.header;
  // ITK decides compression by the name: a gzipped file named .nii (some tools write them) it calls "not NIfTI".
  return h.format == ImageFormat::Nifti1 && HasNiftiExtension(p) && !(p.ends_with(".nii") && detail::IsGzipFile(p));
}

detail::ImageHeader CheckedHeader(const std::string& path, bool allow4D) {
  detail::ImageHeader h = detail::ReadImageHeader(path);
  if (!allow4D && h.Volumes() != 1)
    throw InputError("io:Not3D", path,
                     "expected a 3-D image, found a " + std::to_string(h.dim[0]) + "-D image with " + std::to_string(h.Volumes()) +
                         " volumes; split it into one 3-D image per subject");
  return h;
}

Geometry HeaderGeometry(const std::string& path, const detail::ImageHeader& h) {
  if (!ItkReadsGeometry(h)) return detail::GeometryFromHeader(h);
  Geometry g;
  {
    const std::lock_guard<std::mutex> itk(ItkLock());
    g = GeometryFromIo(OpenIo(path));
  }
  g.worldKnown = h.qformCode > 0 || h.sformCode > 0;
  return g;
}

}  // namespace

std::vector<std::string> ImageFilePaths(const std::string& path) {
  const detail::ImageFiles files = detail::ResolveImageFiles(path);
  if (!files.pair) return {path};
  return {files.header, files.data};
}

ImageFormat ReadImageFormat(const std::string& path) { return detail::ReadImageHeader(path).format; }

std::string AnalyzeConventionNote() {
  return "Analyze 7.5 images have no orientation in their header; neuromkl follows SPM's default "
         "(radiological storage, x axis flipped: LAS; origin from SPM's originator field, else the grid centre; "
         "a negative pixdim[1] marks an unflipped FSL file). A .mat file beside the image is ignored";
}

Geometry ReadGeometry(const std::string& path) {
  const detail::ImageHeader h = CheckedHeader(path, false);
  return HeaderGeometry(path, h);
}

StoredForm ReadStoredForm(const std::string& path) {
  const detail::ImageHeader h = CheckedHeader(path, false);
  StoredForm f;
  f.datatype = detail::DatatypeName(h.datatype);
  detail::VisitDatatype(h.datatype, [&](auto sample) {
    using T = decltype(sample);
    // Not floating point, nor 64-bit integers (not exact in the double arithmetic that reads them).
    if constexpr (std::is_integral_v<T> && sizeof(T) <= 4) {
      f.integer = true;
      f.lowest = std::numeric_limits<T>::lowest();
      f.highest = std::numeric_limits<T>::max();
    }
  });
  if (detail::Scaled(h)) f.slope = h.slope, f.inter = h.inter;
  return f;
}

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
  // A pair's voxels live in the .img: its stamp decides whether a cached volume is still current.
  const std::string stampPath = cacheable ? detail::ResolveImageFiles(path).data : path;
  if (cacheable && FileStamp(stampPath, size, mtime)) {
    std::lock_guard<std::mutex> lock(gCacheMutex);
    if (auto it = gCache.find(path); it != gCache.end() && it->second.size == size && it->second.mtime == mtime) {
      out.geometry = it->second.volume.geometry;
      out.data.assign(it->second.volume.data.begin(), it->second.volume.data.end());
      return;
    }
  } else {
    cacheable = false;
  }
  const detail::ImageHeader header = CheckedHeader(path, false);  // sizes checked against the file first
  out.geometry = HeaderGeometry(path, header);
  detail::DecodeVolumes(header, 0, 1, out.data);
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

LabelVolume ReadLabelVolume(const std::string& path) {
  const detail::ImageHeader header = CheckedHeader(path, false);
  LabelVolume v;
  v.geometry = HeaderGeometry(path, header);
  detail::DecodeLabels(header, v);
  ++gReads;
  return v;
}

Volume4D ReadVolume4D(const std::string& path) {
  const detail::ImageHeader header = CheckedHeader(path, true);
  Volume4D v;
  // ITK refuses 4-D files in OpenIo's 3-D check: our header reader gives the (shared) 3-D geometry.
  v.geometry = header.Volumes() == 1 ? HeaderGeometry(path, header) : detail::GeometryFromHeader(header);
  v.volumes = header.Volumes();
  detail::DecodeVolumes(header, 0, v.volumes, v.data);
  ++gReads;
  return v;
}

namespace {

/// ITK's NIfTI writer, under the ITK lock.
void WriteWithItk(const std::string& path, const Volume& volume) {
  const auto& g = volume.geometry;
  const std::lock_guard<std::mutex> itk(ItkLock());
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

}  // namespace

void WriteVolume(const std::string& path, const Volume& volume) {
  InitItk();
  const auto& g = volume.geometry;
  if (static_cast<std::int64_t>(volume.data.size()) != g.VoxelCount())
    throw IoError("io:ShapeMismatch", path, "volume has " + std::to_string(volume.data.size()) + " values, geometry expects " + std::to_string(g.VoxelCount()));
  WriteWithItk(path, volume);
  // ITK's NIfTI writer does not report every short write (ENOSPC): read the file back with our own
  // decoder, which refuses a file shorter than its header announces or a truncated gzip stream.
  try {
    const detail::ImageHeader written = detail::ReadImageHeader(path);
    std::vector<float> check;
    detail::DecodeVolumes(written, 0, 1, check);
    if (static_cast<std::int64_t>(check.size()) != g.VoxelCount()) throw IoError("io:WriteFailed", path, "voxel count differs");
  } catch (const Error& e) {
    throw IoError("io:WriteFailed", path, std::string("the NIfTI image was not written completely (disk full?): ") + e.what());
  }
}

std::string ItkVersion() { return ITK_VERSION_STRING "." + std::to_string(ITK_VERSION_PATCH); }

std::size_t VolumeReadCount() { return gReads.load(); }

}  // namespace neuromkl::io
