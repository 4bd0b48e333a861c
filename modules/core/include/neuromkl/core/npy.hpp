#pragma once
// NumPy .npy files (format 1.0/2.0), so that Python users can load kernels with numpy.load.
#include <cstdint>
#include <string>

#include <Eigen/Core>

namespace neuromkl {

/// Writes a float64 C-order 2-D array. IoError on failure.
void WriteNpy(const std::string& path, const Eigen::Ref<const Eigen::MatrixXd>& matrix);
/// Reads a 1-D or 2-D array of float64/float32/int32/int64 (little-endian, C or Fortran order)
/// into a double matrix (1-D arrays become one column). InputError naming the file on bad data.
Eigen::MatrixXd ReadNpy(const std::string& path);
/// Writes a float32 2-D array in column-major ('fortran_order': True) order, as Eigen holds it.
void WriteNpy(const std::string& path, const Eigen::Ref<const Eigen::MatrixXf>& matrix);
/// Reads a 2-D float32 array (either order) as it is: InputError npy:UnsupportedType for another dtype.
Eigen::MatrixXf ReadNpyFloat32(const std::string& path);

/// The element types of row-major arrays written and read in place (a study's feature matrix).
enum class NpyType { Float32, UInt8, Int16 };
/// Writes `rows` x `cols` values of `type` at `data`, row-major (C order), as they are in memory. IoError on failure.
void WriteNpyRows(const std::string& path, const void* data, std::int64_t rows, std::int64_t cols, NpyType type);
/// The bytes a file of `rows` x `cols` values of `type` in C order begins with (magic, version and header, padded to a
/// multiple of 64 bytes and to at least `atLeast`): for a writer that puts the values in place itself (a file mapping).
std::string NpyRowsPrefix(std::int64_t rows, std::int64_t cols, NpyType type, std::size_t atLeast = 0);
/// Where the values begin in a C-order 2-D .npy file of exactly `type` and `rows` x `cols` (the checks of
/// ReadNpyRowsInto but the length of the data): for a reader that maps the file.
std::uint64_t NpyRowsDataOffset(const std::string& path, std::int64_t rows, std::int64_t cols, NpyType type);
/// Reads a C-order 2-D array of exactly `type` and `rows` x `cols` into `data` (which holds that many values), with no
/// copy: InputError naming the file when the dtype, order or shape differ or the file is short.
void ReadNpyRowsInto(const std::string& path, void* data, std::int64_t rows, std::int64_t cols, NpyType type);

}  // namespace neuromkl
