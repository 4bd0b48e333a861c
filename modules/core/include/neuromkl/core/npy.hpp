#pragma once
// NumPy .npy files (format 1.0/2.0), so that Python users can load kernels with numpy.load.
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

}  // namespace neuromkl
