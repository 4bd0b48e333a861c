#include "neuromkl/core/npy.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <regex>
#include <vector>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl {

namespace {
/// The bytes before the values of a version 1.0 file of a 2-D array of dtype `descr`: magic, version, length and the
/// header, padded with spaces to a multiple of 64 bytes and to at least `atLeast` bytes.
std::string NpyPrefix(const char* descr, bool fortran, std::int64_t rows, std::int64_t cols, std::size_t atLeast) {
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  // Pad so that magic (6) + version (2) + length (2) + header is a multiple of 64, ending in '\n'.
  const std::size_t total = std::max(10 + header.size() + 1, atLeast);
  header.append((64 - total % 64) % 64 + (total - (10 + header.size() + 1)), ' ');
  header += '\n';
  const auto len = static_cast<std::uint16_t>(header.size());
  std::string prefix("\x93NUMPY\x01\x00", 8);
  prefix.append(reinterpret_cast<const char*>(&len), 2);
  return prefix + header;
}
/// `path` opened for writing, with a version 1.0 header for a 2-D array of dtype `descr` already written.
std::ofstream OpenNpyForWriting(const std::string& path, const char* descr, bool fortran, std::int64_t rows, std::int64_t cols) {
  const std::string prefix = NpyPrefix(descr, fortran, rows, cols, 0);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw IoError("npy:Unwritable", path, "cannot open the file for writing");
  out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  return out;
}
/// Closes `out`, which flushes it: a full disk shows here, not silently in the destructor.
void FinishNpy(std::ofstream& out, const std::string& path) {
  out.close();
  if (!out) throw IoError("npy:WriteFailed", path, "writing failed (disk full?)");
}
}  // namespace

void WriteNpy(const std::string& path, const Eigen::Ref<const Eigen::MatrixXd>& matrix) {
  std::ofstream out = OpenNpyForWriting(path, "<f8", false, matrix.rows(), matrix.cols());
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rowMajor = matrix;
  out.write(reinterpret_cast<const char*>(rowMajor.data()), static_cast<std::streamsize>(rowMajor.size() * sizeof(double)));
  FinishNpy(out, path);
}

void WriteNpy(const std::string& path, const Eigen::Ref<const Eigen::MatrixXf>& matrix) {
  // Written in its own (column-major) order: 'fortran_order': True, no transposed copy of a large kernel.
  std::ofstream out = OpenNpyForWriting(path, "<f4", true, matrix.rows(), matrix.cols());
  for (Eigen::Index j = 0; j < matrix.cols(); ++j)  // a Ref may have an outer stride
    out.write(reinterpret_cast<const char*>(matrix.col(j).data()), static_cast<std::streamsize>(matrix.rows() * static_cast<Eigen::Index>(sizeof(float))));
  FinishNpy(out, path);
}

namespace {
const char* Descr(NpyType type) {
  switch (type) {
    case NpyType::UInt8: return "|u1";
    case NpyType::Int16: return "<i2";
    case NpyType::Float32: break;
  }
  return "<f4";
}
int Width(NpyType type) { return type == NpyType::UInt8 ? 1 : type == NpyType::Int16 ? 2 : 4; }
char Kind(NpyType type) { return type == NpyType::UInt8 ? 'u' : type == NpyType::Int16 ? 'i' : 'f'; }
}  // namespace

std::string NpyRowsPrefix(std::int64_t rows, std::int64_t cols, NpyType type, std::size_t atLeast) { return NpyPrefix(Descr(type), false, rows, cols, atLeast); }

void WriteNpyRows(const std::string& path, const void* data, std::int64_t rows, std::int64_t cols, NpyType type) {
  std::ofstream out = OpenNpyForWriting(path, Descr(type), false, rows, cols);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(rows * cols * Width(type)));
  FinishNpy(out, path);
}

namespace {
template <typename T>
void ConvertInto(const std::vector<char>& raw, std::vector<double>& out) {
  const std::size_t n = raw.size() / sizeof(T);
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(v);
  }
}
/// The header of an open .npy file, every size checked against the file's length; `in` is left at the data.
struct NpyArray {
  char kind;
  int width;
  bool fortran;
  long long rows, cols;
};

NpyArray OpenNpy(std::ifstream& in, const std::string& path) {
  if (!in) throw InputError("npy:Unreadable", path, "cannot open the .npy file for reading");
  // Every size in the header is checked against the file's length before anything is allocated.
  in.seekg(0, std::ios::end);
  const auto fileBytes = static_cast<std::uint64_t>(std::max<std::streamoff>(0, static_cast<std::streamoff>(in.tellg())));
  in.seekg(0);
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw InputError("npy:NotNpy", path, "not a NumPy .npy file (expected the \\x93NUMPY magic)");
  if (magic[6] < 1 || magic[6] > 3)
    throw InputError("npy:BadHeader", path, "unsupported .npy format version " + std::to_string(static_cast<int>(magic[6])) + " (expected 1, 2 or 3)");
  std::uint32_t headerLen = 0;
  std::uint64_t prefix = 10;
  if (magic[6] == 1) {
    std::uint16_t l = 0;
    in.read(reinterpret_cast<char*>(&l), 2);
    headerLen = l;
  } else {
    in.read(reinterpret_cast<char*>(&headerLen), 4);
    prefix = 12;
  }
  // NumPy writes headers of a few hundred bytes; a longer one is corrupt (and would be slow to parse).
  constexpr std::uint32_t kMaxHeader = 65536;
  if (!in || headerLen > kMaxHeader || prefix + headerLen > fileBytes)
    throw InputError("npy:BadHeader", path,
                     "the .npy header length " + std::to_string(headerLen) + " is impossible (file of " + std::to_string(fileBytes) +
                         " bytes, at most " + std::to_string(kMaxHeader) + " header bytes accepted)");
  std::string header(headerLen, '\0');
  in.read(header.data(), headerLen);
  const std::string shown = header.size() > 200 ? header.substr(0, 200) + "..." : header;
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([<|=]?)([fiu])(\\d)'")))
    throw InputError("npy:UnsupportedType", path, "expected dtype float64, float32, int32 or int64 (little-endian); header: " + shown);
  const char kind = m[2].str()[0];
  const int width = std::stoi(m[3].str());
  const bool fortran = header.find("'fortran_order': True") != std::string::npos;
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    throw InputError("npy:BadHeader", path, "no shape in the .npy header");
  std::vector<std::uint64_t> shape;
  std::string dims = m[1].str();
  std::regex num("\\d+");
  const std::uint64_t dataBytes = fileBytes - prefix - headerLen;
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
    const std::string d = it->str();
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
    if (ec != std::errc() || p != d.data() + d.size() || v > dataBytes)
      throw InputError("npy:Truncated", path,
                       "the .npy header announces a dimension of " + d + " but the file holds only " + std::to_string(dataBytes) + " data bytes");
    shape.push_back(v);
  }
  if (shape.empty() || shape.size() > 2)
    throw InputError("npy:BadShape", path, "expected a 1-D or 2-D array, found " + std::to_string(shape.size()) + " dimensions");
  const std::uint64_t rows64 = shape[0], cols64 = shape.size() == 2 ? shape[1] : 1;
  // Both factors are at most the data size (checked above), so the product fits in 128 bits; in
  // double it is exact enough to compare against a file length.
  const double needD = static_cast<double>(rows64) * static_cast<double>(cols64) * width;
  if (needD > static_cast<double>(dataBytes))
    throw InputError("npy:Truncated", path,
                     "the .npy header announces " + std::to_string(rows64) + " x " + std::to_string(cols64) + " values of " +
                         std::to_string(width) + " bytes (" + FormatDouble(needD) + " bytes) but the file holds only " +
                         std::to_string(dataBytes) + " data bytes: the file is truncated or the header is wrong");
  return {kind, width, fortran, static_cast<long long>(rows64), static_cast<long long>(cols64)};
}
}  // namespace

Eigen::MatrixXd ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const auto [kind, width, fortran, rows, cols] = OpenNpy(in, path);
  std::vector<char> raw(static_cast<std::size_t>(rows * cols * width));
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (in.gcount() != static_cast<std::streamsize>(raw.size()))
    throw InputError("npy:Truncated", path, "file is truncated: expected " + std::to_string(raw.size()) + " data bytes");
  std::vector<double> values;
  if (kind == 'f' && width == 8) ConvertInto<double>(raw, values);
  else if (kind == 'f' && width == 4) ConvertInto<float>(raw, values);
  else if (kind == 'i' && width == 4) ConvertInto<std::int32_t>(raw, values);
  else if (kind == 'i' && width == 8) ConvertInto<std::int64_t>(raw, values);
  else throw InputError("npy:UnsupportedType", path, "unsupported dtype " + std::string(1, kind) + std::to_string(width));
  Eigen::MatrixXd out(rows, cols);
  for (long long r = 0; r < rows; ++r)
    for (long long c = 0; c < cols; ++c)
      out(r, c) = fortran ? values[static_cast<std::size_t>(c * rows + r)] : values[static_cast<std::size_t>(r * cols + c)];
  return out;
}

Eigen::MatrixXf ReadNpyFloat32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const auto [kind, width, fortran, rows, cols] = OpenNpy(in, path);
  if (kind != 'f' || width != 4)
    throw InputError("npy:UnsupportedType", path, "expected dtype float32, found " + std::string(1, kind) + std::to_string(8 * width));
  Eigen::MatrixXf out(fortran ? rows : cols, fortran ? cols : rows);  // C order is the transpose of column-major
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * static_cast<Eigen::Index>(sizeof(float))));
  if (in.gcount() != static_cast<std::streamsize>(out.size() * static_cast<Eigen::Index>(sizeof(float))))
    throw InputError("npy:Truncated", path, "file is truncated: expected " + std::to_string(out.size() * 4) + " data bytes");
  if (!fortran) out.transposeInPlace();
  return out;
}

namespace {
/// `in` opened on `path` and left at the values, once the header says a C-order array of exactly `type` and `rows` x
/// `cols` (InputError naming the file otherwise); the values' width in bytes.
int OpenNpyRows(std::ifstream& in, const std::string& path, std::int64_t rows, std::int64_t cols, NpyType type) {
  const auto [kind, width, fortran, fileRows, fileCols] = OpenNpy(in, path);
  if (kind != Kind(type) || width != Width(type) || fortran)
    throw InputError("npy:UnsupportedType", path, std::string("expected a C-order array of dtype ") + Descr(type) + ", found " + std::string(1, kind) +
                                                      std::to_string(width) + (fortran ? " in Fortran order" : ""));
  if (fileRows != rows || fileCols != cols)
    throw InputError("npy:BadShape", path, "expected " + std::to_string(rows) + " x " + std::to_string(cols) + " values, found " + std::to_string(fileRows) + " x " +
                                               std::to_string(fileCols));
  return width;
}
}  // namespace

std::uint64_t NpyRowsDataOffset(const std::string& path, std::int64_t rows, std::int64_t cols, NpyType type) {
  std::ifstream in(path, std::ios::binary);
  OpenNpyRows(in, path, rows, cols, type);
  return static_cast<std::uint64_t>(in.tellg());
}

void ReadNpyRowsInto(const std::string& path, void* data, std::int64_t rows, std::int64_t cols, NpyType type) {
  std::ifstream in(path, std::ios::binary);
  const int width = OpenNpyRows(in, path, rows, cols, type);
  const auto bytes = static_cast<std::streamsize>(rows * cols * width);
  in.read(static_cast<char*>(data), bytes);
  if (in.gcount() != bytes) throw InputError("npy:Truncated", path, "file is truncated: expected " + std::to_string(bytes) + " data bytes");
}

}  // namespace neuromkl
