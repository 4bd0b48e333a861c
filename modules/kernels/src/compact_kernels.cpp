#include "neuromkl/kernels/compact_kernels.hpp"

#include <tbb/parallel_for.h>

namespace neuromkl::kernels {

Eigen::MatrixXf CompactKernel(const Eigen::Ref<const Eigen::MatrixXd>& kernel, bool centre) {
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
      const float v = static_cast<float>(((kernel(a, b) - rowMean[a]) - rowMean[b]) + grand);
      out(a, b) = v;
      out(b, a) = v;
    }
  return out;
}

CompactKernelList CompactKernels(const std::vector<Eigen::MatrixXd>& kernels, bool centre) {
  CompactKernelList out(kernels.size());
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) { out[j] = CompactKernel(kernels[j], centre); });
  return out;
}

std::uint64_t CompactBytes(std::size_t kernels, std::size_t subjects) {
  return static_cast<std::uint64_t>(kernels) * subjects * subjects * sizeof(float);
}

}  // namespace neuromkl::kernels
