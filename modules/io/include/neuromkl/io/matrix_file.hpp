#pragma once
// Matrices stored as files: precomputed kernels and connectivity matrices.
#include <string>

#include <Eigen/Core>

namespace neuromkl::io {

/// A matrix from .npy or delimited text (numbers separated by tabs, commas, ';' or spaces, no header).
/// InputError naming the file and line: kernels:Unreadable, kernels:NotNumeric, kernels:Ragged.
Eigen::MatrixXd ReadMatrixFile(const std::string& path);

}  // namespace neuromkl::io
