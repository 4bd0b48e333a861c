#include "image_fixtures.hpp"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace neuromkl::testing {

namespace {

/// A little header builder: values written at byte offsets, in the chosen byte order.
struct Bytes {
  std::vector<unsigned char> b;
  bool bigEndian = false;
  explicit Bytes(std::size_t n, bool big) : b(n, 0), bigEndian(big) {}
  template <typename T>
  void Put(std::size_t offset, T value) {
    unsigned char tmp[sizeof(T)];
    std::memcpy(tmp, &value, sizeof(T));
    if (bigEndian) std::reverse(tmp, tmp + sizeof(T));
    std::memcpy(b.data() + offset, tmp, sizeof(T));
  }
  void PutText(std::size_t offset, const std::string& text, std::size_t n) {
    std::memcpy(b.data() + offset, text.data(), std::min(n, text.size()));
  }
};

bool EndsWithGz(const std::string& p) { return p.size() > 3 && (p.substr(p.size() - 3) == ".gz" || p.substr(p.size() - 3) == ".GZ"); }

void WriteMaybeGz(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  if (EndsWithGz(path)) {
    gzFile f = gzopen(path.c_str(), "wb6");
    if (!f) throw std::runtime_error("cannot write " + path);
    if (!bytes.empty()) gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<unsigned char> VoxelBytes(const FixtureImage& im) {
  std::vector<unsigned char> out;
  Bytes one(8, im.bigEndian);
  auto push = [&](auto v) {
    one.Put(0, v);
    out.insert(out.end(), one.b.begin(), one.b.begin() + static_cast<std::ptrdiff_t>(sizeof v));
  };
  for (double x : im.stored) switch (im.datatype) {
      case 2: push(static_cast<std::uint8_t>(x)); break;
      case 256: push(static_cast<std::int8_t>(x)); break;
      case 4: push(static_cast<std::int16_t>(x)); break;
      case 512: push(static_cast<std::uint16_t>(x)); break;
      case 8: push(static_cast<std::int32_t>(x)); break;
      case 768: push(static_cast<std::uint32_t>(x)); break;
      case 16: push(static_cast<float>(x)); break;
      case 64: push(x); break;
      case 1024: push(static_cast<std::int64_t>(x)); break;
      case 1280: push(static_cast<std::uint64_t>(x)); break;
      default: push(static_cast<std::int16_t>(x)); break;  // unknown types: 2 bytes each, for error tests
    }
  return out;
}

int Bitpix(int datatype) {
  switch (datatype) {
    case 2: case 256: return 8;
    case 4: case 512: return 16;
    case 8: case 768: case 16: return 32;
    default: return 64;
  }
}

}  // namespace

std::string WriteFixtureImage(const std::string& path, FixtureFormat format, const FixtureImage& im) {
  const bool pair = format == FixtureFormat::Nifti1Pair || format == FixtureFormat::Nifti2Pair || format == FixtureFormat::Analyze;
  const bool two = format == FixtureFormat::Nifti2 || format == FixtureFormat::Nifti2Pair;
  const std::int16_t ndim = im.volumes > 1 ? 4 : 3;
  // Axis-aligned orientation: identity, or x flipped (LAS): quaternion (0, 1, 0) with qfac -1 gives
  // R = diag(-1, 1, -1), times qfac on the z column: diag(-1, 1, 1).
  const double sx = im.flipX ? -1.0 : 1.0;
  const double qb = 0, qc = im.flipX ? 1.0 : 0.0, qd = 0, qfac = im.flipX ? -1.0 : 1.0;
  const double srow[12] = {sx * im.spacing[0], 0, 0, im.rasOrigin[0], 0, im.spacing[1], 0, im.rasOrigin[1],
                           0, 0, im.spacing[2], im.rasOrigin[2]};
  std::vector<unsigned char> header;
  if (!two) {
    Bytes h(pair ? 348 : 352, im.bigEndian);
    h.Put<std::int32_t>(0, 348);
    h.Put<std::int16_t>(40, ndim);
    for (int i = 0; i < 3; ++i) h.Put<std::int16_t>(42 + 2 * static_cast<std::size_t>(i), static_cast<std::int16_t>(im.dims[static_cast<std::size_t>(i)]));
    h.Put<std::int16_t>(48, static_cast<std::int16_t>(im.volumes));
    for (std::size_t i = 5; i < 8; ++i) h.Put<std::int16_t>(40 + 2 * i, 1);
    h.Put<std::int16_t>(70, static_cast<std::int16_t>(im.datatype));
    h.Put<std::int16_t>(72, static_cast<std::int16_t>(Bitpix(im.datatype)));
    const bool analyze = format == FixtureFormat::Analyze;
    h.Put<float>(76, analyze ? 0.0f : static_cast<float>(qfac));
    for (std::size_t i = 0; i < 3; ++i)
      h.Put<float>(80 + 4 * i, static_cast<float>(im.spacing[i] * (analyze && i == 0 && im.negativeAnalyzeX ? -1.0 : 1.0)));
    h.Put<float>(92, 1.0f);
    h.Put<float>(108, static_cast<float>(im.voxOffset >= 0 || std::isnan(im.voxOffset) ? im.voxOffset : (pair ? 0.0 : 352.0)));
    h.Put<float>(112, static_cast<float>(im.slope));
    h.Put<float>(116, static_cast<float>(im.inter));
    if (analyze) {
      for (std::size_t i = 0; i < 3; ++i) h.Put<std::int16_t>(253 + 2 * i, im.analyzeOriginator[i]);
    } else {
      h.Put<std::int16_t>(252, 1);  // qform_code scanner
      h.Put<std::int16_t>(254, 4);  // sform_code MNI
      h.Put<float>(256, static_cast<float>(qb));
      h.Put<float>(260, static_cast<float>(qc));
      h.Put<float>(264, static_cast<float>(qd));
      for (std::size_t i = 0; i < 3; ++i) h.Put<float>(268 + 4 * i, static_cast<float>(im.rasOrigin[i]));
      for (std::size_t i = 0; i < 12; ++i) h.Put<float>(280 + 4 * i, static_cast<float>(srow[i]));
      h.PutText(344, pair ? std::string("ni1\0", 4) : std::string("n+1\0", 4), 4);
    }
    if (!im.magicOverride.empty()) h.PutText(344, im.magicOverride, 4);
    header = h.b;
  } else {
    Bytes h(pair ? 540 : 544, im.bigEndian);
    h.Put<std::int32_t>(0, 540);
    h.PutText(4, pair ? std::string("ni2\0\r\n\x1a\n", 8) : std::string("n+2\0\r\n\x1a\n", 8), 8);
    if (!im.magicOverride.empty()) h.PutText(4, im.magicOverride, 8);
    h.Put<std::int16_t>(12, static_cast<std::int16_t>(im.datatype));
    h.Put<std::int16_t>(14, static_cast<std::int16_t>(Bitpix(im.datatype)));
    h.Put<std::int64_t>(16, ndim);
    for (std::size_t i = 0; i < 3; ++i) h.Put<std::int64_t>(24 + 8 * i, im.dims[i]);
    for (std::size_t i = 4; i < 8; ++i) h.Put<std::int64_t>(16 + 8 * i, 1);
    h.Put<std::int64_t>(48, im.volumes);
    h.Put<double>(104, qfac);
    for (std::size_t i = 0; i < 3; ++i) h.Put<double>(112 + 8 * i, im.spacing[i]);
    h.Put<double>(136, 1.0);
    h.Put<std::int64_t>(168, im.voxOffset >= 0 ? static_cast<std::int64_t>(im.voxOffset) : (pair ? 0 : 544));
    h.Put<double>(176, im.slope);
    h.Put<double>(184, im.inter);
    h.Put<std::int32_t>(344, 1);
    h.Put<std::int32_t>(348, 4);
    h.Put<double>(352, qb);
    h.Put<double>(360, qc);
    h.Put<double>(368, qd);
    for (std::size_t i = 0; i < 3; ++i) h.Put<double>(376 + 8 * i, im.rasOrigin[i]);
    for (std::size_t i = 0; i < 12; ++i) h.Put<double>(400 + 8 * i, srow[i]);
    header = h.b;
  }
  const std::vector<unsigned char> voxels = VoxelBytes(im);
  if (!pair) {
    std::vector<unsigned char> all = header;
    const auto offset = static_cast<std::size_t>(im.voxOffset >= 0 ? im.voxOffset : static_cast<double>(header.size()));  // NaN: header size
    all.resize(std::max(offset, all.size()), 0);
    all.insert(all.end(), voxels.begin(), voxels.end());
    WriteMaybeGz(path, all);
    return path;
  }
  // The .img name: same stem, same case and compression as the .hdr.
  const bool gz = EndsWithGz(path);
  const std::size_t extLen = gz ? 7 : 4;
  std::string ext = path.substr(path.size() - extLen);
  const bool upper = std::isupper(static_cast<unsigned char>(ext[1])) != 0;
  std::string imgExt = gz ? ".img.gz" : ".img";
  if (upper)
    for (char& c : imgExt) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  WriteMaybeGz(path, header);
  std::vector<unsigned char> data(static_cast<std::size_t>(im.voxOffset > 0 ? im.voxOffset : 0.0), 0);
  data.insert(data.end(), voxels.begin(), voxels.end());
  WriteMaybeGz(path.substr(0, path.size() - extLen) + imgExt, data);
  return path;
}

std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace neuromkl::testing
