#pragma once
// Kernels held in this process: float64 matrices, or the compact float32 store (compact.hpp), whose values are widened
// to double as they are read, so that every fold prepared from it is the fold of its values as float64 kernels, bit for
// bit. The owners of a share of a study's kernels (owners.hpp) hold their share as MemoryKernels and prepare it with
// MemoryFold, so per-kernel results are the one-process values.
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "neuromkl/gram/compact.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/gram/store.hpp"

namespace neuromkl::gram {

class MemoryFold;

/// One float64 kernel prepared for a fold (training rows `train`, test rows `test`) as every fold prepares it, times
/// `scale`: the reference the folds' other forms equal.
FoldKernel PrepareFoldKernel(const Eigen::MatrixXd& kernel, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                             const Preprocessing& pre, double scale = 1.0);

class MemoryKernels final : public KernelStore {
 public:
  /// Refers to `kernels` (symmetric n x n each), which must outlive it.
  explicit MemoryKernels(const KernelList& kernels);
  explicit MemoryKernels(const CompactKernelList& kernels);
  /// Owns them.
  explicit MemoryKernels(KernelList&& kernels);
  explicit MemoryKernels(CompactKernelList&& kernels);
  MemoryKernels(const KernelList&&) = delete;
  std::size_t Count() const override;
  Eigen::Index Subjects() const override;
  bool Compact() const override { return float32_ != nullptr; }
  bool Centred() const override { return float32_ && float32_->centred; }
  void CheckPreprocessing(const Preprocessing& pre) const override;
  std::unique_ptr<PreparedFold> OpenFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const override;
  /// OpenFold with the memory fold's own operations (the owners').
  std::unique_ptr<MemoryFold> OpenMemoryFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const;
  Eigen::VectorXd LargestCentredSelfSimilarities(const std::vector<int>& train, const Preprocessing& pre) const override;
  Eigen::MatrixXd SubjectWeights(const FoldModel& model, const Preprocessing& pre) const override;
  std::uint64_t FoldTaskBytes(const FoldTask& task) const override;
  std::unique_ptr<KernelStore> Subset(const std::vector<std::size_t>& which) const override;
  /// The kernels: float64 (null for a compact store), or the compact store (null otherwise).
  const KernelList* Float64() const { return float64_; }
  const CompactKernelList* Float32() const { return float32_; }
  /// f(the kernels), float64 or the compact store: the one place this backend dispatches on its precision.
  template <typename F>
  decltype(auto) Visit(const F& f) const {
    return float32_ ? f(*float32_) : f(*float64_);
  }

 private:
  KernelList ownedFloat64_;
  CompactKernelList ownedFloat32_;
  const KernelList* float64_ = nullptr;
  const CompactKernelList* float32_ = nullptr;
};

/// One fold of MemoryKernels. Its fold vectors are computed once, when first needed (none with covariates: the
/// residualiser then prepares each kernel from the fold's blocks).
class MemoryFold final : public PreparedFold {
 public:
  MemoryFold(const MemoryKernels& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre);
  ~MemoryFold() override;
  Eigen::Index TrainSize() const { return train_.size(); }
  Eigen::Index TestSize() const { return test_.size(); }
  Eigen::VectorXd Scales() const override;
  FoldKernels Summed() const override;
  void Weighted(TrainingForm form, WeightedKernels& out) const override;
  std::vector<Eigen::MatrixXd> Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                        const Eigen::VectorXd& scales) const override;

  // ---- for the owner of a share of a study's kernels, whose scales come from every kernel's traces ----
  /// Each kernel's prepared training trace (before its source scale).
  std::vector<double> Traces() const;
  /// The fold's source scales of these kernels, in place of their own GroupScales.
  void SetScales(Eigen::VectorXd scales);
  /// The prepared training kernels as a fit reads them (in place, or with covariates prepared copies), built once.
  const KernelStack& Stack() const;
  /// Prepared test block k (m x l): held once made below kPackedStackBelow training subjects, else written into
  /// `scratch`. Several kernels may be asked for at once, each from one thread.
  const Eigen::MatrixXd& TestBlock(std::size_t k, Eigen::MatrixXd& scratch) const;

 private:
  struct Lazy;
  const std::vector<FoldVectors>& Vectors() const;
  /// Weighted's columns below kPackedStackBelow (without covariates): kernel by kernel with their stack.
  void ColumnsKernelByKernel(WeightedKernels& out) const;
  const MemoryKernels& kernels_;
  Eigen::VectorXi train_, test_;
  Preprocessing pre_;
  std::optional<FoldResidualiser> residualiser_;  ///< with covariates
  std::unique_ptr<Lazy> lazy_;                      ///< what is computed when first needed
};

}  // namespace neuromkl::gram
