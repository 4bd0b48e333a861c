#pragma once
// One fold's prepared training kernels read from the study's kernels in place (TrainingForm::InPlace): each column is
// written from the fold vectors with the arithmetic of the copies (PreparedTrainingColumn), so the values are the
// copies' bit for bit and a learner of kernel weights fits them as it fits the copies, with no fold copies held.
#include <memory>
#include <utility>
#include <vector>

#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/gram/stack.hpp"
#include "stacks.hpp"

namespace neuromkl::gram::detail {

/// Over `kernels` (a KernelList or the compact store, which must outlive it), with the fold's vectors and source scales.
template <typename KernelVec>
class FoldColumns final : public KernelColumns {
 public:
  FoldColumns(const KernelVec& kernels, Eigen::VectorXi train, Eigen::VectorXi test, std::shared_ptr<const std::vector<FoldVectors>> vectors,
              Eigen::VectorXd scales)
      : kernels_(kernels), train_(std::move(train)), test_(std::move(test)), vectors_(std::move(vectors)), scales_(std::move(scales)) {}
  Eigen::Index Count() const override { return static_cast<Eigen::Index>(kernels_.size()); }
  Eigen::Index Size() const override { return train_.size(); }
  void UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const override {
    // Rows 0..j of the column WritePreparedBlocks writes into the fold's copy.
    const auto r = static_cast<std::size_t>(k);
    PreparedTrainingColumn(kernels_[r].col(train_[j]).data(), train_, (*vectors_)[r], j, j + 1, scales_[k], out);
  }
  /// Test block k (m x l) as the copies hold it, written into `out`.
  void WriteTestBlock(std::size_t k, Eigen::MatrixXd& out) const {
    WritePreparedTestBlock(kernels_[k], train_, test_, (*vectors_)[k], scales_[static_cast<Eigen::Index>(k)], out);
  }
  /// Below kPackedStackBelow subjects, kernel by kernel: first(k) (the fold's vectors of kernel k, when they are not
  /// made yet), then its test block (into `tests`: held, as folds that decide often, a grid search, read them many
  /// times), its packed stack column and its finiteness. One visit of each kernel's values instead of a pass over all of
  /// them for each (at n = 192 x 116 the kernels outgrow the cache, and each pass read them from memory again). The same
  /// routines as the fold's Vectors, WriteTestBlock and Stack: the same values bit for bit. The first Stack() hands out
  /// the stack so made.
  template <typename First>
  void PrepareKernelByKernel(KernelList& tests, const First& first) {
    tests.resize(kernels_.size());
    prepared_ = std::make_unique<PackedStack>(*this, [&](Eigen::Index k) {
      const auto r = static_cast<std::size_t>(k);
      first(r, kernels_[r]);
      WriteTestBlock(r, tests[r]);
    });
    firstNonFinite_ = prepared_->FirstNonFinite();
  }
  /// Once prepared kernel by kernel, from the packed values (the same values as the columns': the same answer).
  Eigen::Index FirstNonFinite() const override { return firstNonFinite_ >= -1 ? firstNonFinite_ : KernelColumns::FirstNonFinite(); }
  std::unique_ptr<KernelStack> Stack() const override {
    if (prepared_) return std::move(prepared_);
    return KernelColumns::Stack();
  }
  /// The test blocks one at a time, each written into `buffer` when a model asks for it (`buffer` must outlive it).
  TestBlocks Test(Eigen::MatrixXd& buffer) const {
    return {Count(), test_.size(),
            [this, &buffer](Eigen::Index k) -> const Eigen::MatrixXd& {
              WriteTestBlock(static_cast<std::size_t>(k), buffer);
              return buffer;
            },
            {}};
  }

 private:
  const KernelVec& kernels_;
  Eigen::VectorXi train_, test_;
  std::shared_ptr<const std::vector<FoldVectors>> vectors_;
  Eigen::VectorXd scales_;
  mutable std::unique_ptr<KernelStack> prepared_;  ///< made by PrepareKernelByKernel, until the first Stack()
  Eigen::Index firstNonFinite_ = -2;                ///< its first non-finite kernel (-1: none; -2: not prepared so)
};

}  // namespace neuromkl::gram::detail
