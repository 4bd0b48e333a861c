#include "neuromkl/kernels/compact_kernels.hpp"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "neuromkl/core/errors.hpp"

namespace neuromkl::kernels {

Eigen::MatrixXf CompactKernel(const Eigen::Ref<const Eigen::MatrixXd>& kernel, bool centre, const std::string& where) {
  const Eigen::Index n = kernel.rows();
  Eigen::VectorXd rowMean = Eigen::VectorXd::Zero(n);
  double grand = 0;
  if (centre && n > 0) {
    // Column sums in a fixed order (= row sums: the kernel is symmetric).
    for (Eigen::Index b = 0; b < n; ++b) rowMean[b] = kernel.col(b).sum() / static_cast<double>(n);
    grand = rowMean.mean();
  }
  Eigen::MatrixXf out(n, n);
  // The upper triangle, mirrored: the two halves are equal bit for bit (the learners read the upper one,
  // the test blocks read any).
  for (Eigen::Index b = 0; b < n; ++b)
    for (Eigen::Index a = 0; a <= b; ++a) {
      const double exact = ((kernel(a, b) - rowMean[a]) - rowMean[b]) + grand;
      const float v = static_cast<float>(exact);
      if (!std::isfinite(v)) {
        std::ostringstream what;
        what << "entry (" << a << ", " << b << ") is " << exact << (std::isfinite(exact) ? ", beyond float32's range (" : " (float32's range: ")
             << std::numeric_limits<float>::max() << "); keep this study's kernels in float64";
        throw InputError("kernels:Float32Range", where, what.str());
      }
      out(a, b) = v;
      out(b, a) = v;
    }
  return out;
}

CompactKernelList CompactKernels(const std::vector<Eigen::MatrixXd>& kernels, bool centre) {
  CompactKernelList out(kernels.size());
  // Kernels in order (each itself is one pass): the first bad kernel is the one reported, whatever the threads.
  for (std::size_t j = 0; j < kernels.size(); ++j) out[j] = CompactKernel(kernels[j], centre, "kernel " + std::to_string(j));
  return out;
}

std::uint64_t CompactBytes(std::size_t kernels, std::size_t subjects) {
  return static_cast<std::uint64_t>(kernels) * subjects * subjects * sizeof(float);
}

}  // namespace neuromkl::kernels
