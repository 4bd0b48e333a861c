#pragma once
// Owner 0's side of a fold of kernels held by several owners (owners.hpp): the fold as a PreparedFold, and its training
// kernels as a learner of kernel weights reads them (RemoteKernels, whose stack sends each operation to the owners).
#include <memory>
#include <mutex>
#include <vector>

#include "neuromkl/gram/owners.hpp"
#include "neuromkl/gram/store.hpp"

namespace neuromkl::gram::detail {

/// A fold opened on the owners (KernelOwners::OpenFold): the operations on its prepared kernels, each one request. The
/// owners must outlive it; the fold is closed on them when it goes (its last holder: the handle KernelOwners::OpenFold
/// returns, or the training kernels given to a learner).
class OwnedFold {
 public:
  OwnedFold(const KernelOwners& owners, std::int64_t id, Eigen::Index train, Eigen::Index test, Eigen::VectorXd scales);
  ~OwnedFold();
  OwnedFold(const OwnedFold&) = delete;
  OwnedFold& operator=(const OwnedFold&) = delete;
  Eigen::Index TrainSize() const { return train_; }
  Eigen::Index TestSize() const { return test_; }
  std::size_t KernelCount() const { return owners_.Count(); }

  const Eigen::VectorXd& Scales() const { return scales_; }
  /// The sum of the prepared training and test blocks (the owners' partial sums added in owner order).
  FoldKernels Summed() const;
  /// scales[i] x K~_r A for each r = which[i], computed by the kernels' owners side by side.
  std::vector<Eigen::MatrixXd> ViewProducts(const std::vector<Eigen::Index>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                            const std::vector<double>& scales) const;

  // ---- the stack's operations on the prepared training kernels ----
  void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const;
  Eigen::VectorXd Quadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A, bool perKernel) const;
  Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const;
  Eigen::VectorXd RootSpectralBounds(const std::vector<Eigen::Index>& which) const;
  /// The owners' facts of the prepared training kernels (finiteness, zero kernels), asked for once.
  Eigen::Index FirstNonFinite() const;
  std::vector<Eigen::Index> NonZero() const;
  /// The prepared test blocks (test x train) of the kernels in `which`, in that order.
  KernelList TestBlocks(const std::vector<Eigen::Index>& which) const;
  /// TestProduct of those blocks with C (train x columns), each computed by the kernel's owner: only the products travel.
  std::vector<Eigen::MatrixXd> TestProducts(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) const;

 private:
  void Facts() const;
  const KernelOwners& owners_;
  std::int64_t id_;
  Eigen::Index train_, test_;
  Eigen::VectorXd scales_;
  mutable std::once_flag factsOnce_;  ///< fits on one fold run in parallel and share it: the facts are fetched once
  mutable Eigen::Index firstNonFinite_ = -1;
  mutable std::vector<Eigen::Index> nonZero_;
};

/// KernelOwners::OpenFold's handle: the fold as a PreparedFold. Its training kernels stay on the owners whatever form is
/// asked for: a learner reads them through a stack whose operations are requests, and decisions ask the owners for the
/// products of the test blocks with the model's coefficients.
class OwnedPreparedFold final : public PreparedFold {
 public:
  explicit OwnedPreparedFold(std::shared_ptr<const OwnedFold> fold) : fold_(std::move(fold)) {}
  Eigen::VectorXd Scales() const override { return fold_->Scales(); }
  FoldKernels Summed() const override { return fold_->Summed(); }
  void Weighted(TrainingForm form, WeightedKernels& out) const override;
  std::vector<Eigen::MatrixXd> Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                        const Eigen::VectorXd& scales) const override;

 private:
  std::shared_ptr<const OwnedFold> fold_;
};

}  // namespace neuromkl::gram::detail
