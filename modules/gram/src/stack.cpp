#include "neuromkl/gram/stack.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <tbb/parallel_for.h>

#include "stacks.hpp"

namespace neuromkl::gram {

Eigen::MatrixXd KernelStack::Combine(const Eigen::VectorXd& weights) const {
  Eigen::MatrixXd K;
  Combine(weights, K);
  return K;
}

Eigen::Index KernelStack::FirstNonFinite() const {
  throw std::logic_error("KernelStack::FirstNonFinite: a stack of matrices only (kernels given in place are checked through TrainingKernels)");
}

std::vector<Eigen::Index> NonZeroRows(const Eigen::MatrixXd& A) {
  std::vector<Eigen::Index> rows;
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    if ((A.row(i).array() != 0.0).any()) rows.push_back(i);
  return rows;
}

namespace detail {
void MirrorUpper(Eigen::MatrixXd& K, bool parallel) {
  constexpr Eigen::Index kBlock = 64;
  const Eigen::Index n = K.rows();
  const auto mirror = [&](Eigen::Index jb) {
    for (Eigen::Index ib = jb; ib < n; ib += kBlock) {
      const Eigen::Index je = std::min(jb + kBlock, n), ie = std::min(ib + kBlock, n);
      for (Eigen::Index j = jb; j < je; ++j)
        for (Eigen::Index i = std::max(ib, j + 1); i < ie; ++i) K(i, j) = K(j, i);
    }
  };
  const Eigen::Index strips = (n + kBlock - 1) / kBlock;
  if (!parallel) {
    for (Eigen::Index s = 0; s < strips; ++s) mirror(s * kBlock);
    return;
  }
  tbb::parallel_for(Eigen::Index{0}, strips, [&](Eigen::Index s) { mirror(s * kBlock); });
}
}  // namespace detail

std::unique_ptr<KernelStack> MakeStack(const KernelList& kernels) {
  const Eigen::Index n = kernels.empty() ? 0 : kernels[0].rows();
  if (n < kPackedStackBelow) return std::make_unique<detail::PackedStack>(kernels);
  return std::make_unique<detail::ViewStack>(kernels);
}

std::unique_ptr<KernelStack> KernelColumns::Stack() const {
  if (Size() < kPackedStackBelow) return std::make_unique<detail::PackedStack>(*this);
  return std::make_unique<detail::ViewStack>(*this);
}

Eigen::Index KernelColumns::FirstNonFinite() const {
  // Each kernel's upper triangle (the part a learner reads), kernels side by side; the first bad kernel is reported.
  const Eigen::Index n = Size();
  std::vector<char> finite(static_cast<std::size_t>(Count()), 1);
  tbb::parallel_for(Eigen::Index{0}, Count(), [&](Eigen::Index k) {
    Eigen::VectorXd column(n);
    double probe = 0;
    for (Eigen::Index j = 0; j < n; ++j) {
      UpperColumn(k, j, column.data());
      probe += (column.head(j + 1).array() * 0.0).sum();
    }
    finite[static_cast<std::size_t>(k)] = !std::isnan(probe);
  });
  for (std::size_t k = 0; k < finite.size(); ++k)
    if (!finite[k]) return static_cast<Eigen::Index>(k);
  return -1;
}

std::vector<Eigen::Index> KernelColumns::NonZero() const {
  const Eigen::Index n = Size();
  std::vector<Eigen::Index> active;
  std::vector<double> column(static_cast<std::size_t>(n));
  for (Eigen::Index k = 0; k < Count(); ++k) {
    bool nonzero = false;
    for (Eigen::Index j = 0; j < n && !nonzero; ++j) {
      UpperColumn(k, j, column.data());
      nonzero = column[static_cast<std::size_t>(j)] != 0.0;
    }
    for (Eigen::Index j = 0; j < n && !nonzero; ++j) {
      UpperColumn(k, j, column.data());
      for (Eigen::Index i = 0; i <= j && !nonzero; ++i) nonzero = column[static_cast<std::size_t>(i)] != 0.0;
    }
    if (nonzero) active.push_back(k);
  }
  return active;
}

void Float32Columns::UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const {
  const float* column = kernels_[static_cast<std::size_t>(k)].col(j).data();
  for (Eigen::Index i = 0; i <= j; ++i) out[i] = static_cast<double>(column[i]);
}

std::unique_ptr<KernelStack> Float32Columns::Stack() const {
  if (Size() < kPackedStackBelow) return std::make_unique<detail::PackedStack>(*this);
  return std::make_unique<detail::ViewStack>(*this, &kernels_);
}

Eigen::MatrixXd TestProduct(const Eigen::MatrixXd& block, const Eigen::MatrixXd& C, int form) {
  if (form == kProductVector) return Eigen::MatrixXd(block * Eigen::VectorXd(C.col(0)));
  if (form == kProductMatrix) return block * C;
  Eigen::MatrixXd P(block.rows(), C.cols());
  for (Eigen::Index c = 0; c < C.cols(); ++c) P.col(c) = block * Eigen::VectorXd(C.col(c));
  return P;
}

TestBlocks HeldBlocks(const KernelList& testVsTrain) {
  return {static_cast<Eigen::Index>(testVsTrain.size()), testVsTrain.empty() ? 0 : testVsTrain[0].rows(),
          [&testVsTrain](Eigen::Index j) -> const Eigen::MatrixXd& { return testVsTrain[static_cast<std::size_t>(j)]; },
          {}};
}

}  // namespace neuromkl::gram
