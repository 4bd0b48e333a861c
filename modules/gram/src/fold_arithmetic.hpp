#pragma once
// The per-kernel fold preparation every backend shares (the memory folds, and through them the owners of a share of
// the kernels): one arithmetic for every path that prepares a fold kernel, so their values agree bit for bit. Templates
// over the matrix type of the kernels (float64, or the compact store's float32, widened as read).
#include <vector>

#include <tbb/parallel_for.h>

#include "neuromkl/gram/compact.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/gram/store.hpp"

namespace neuromkl::gram::detail {

/// Every kernel's fold vectors (MakeFoldVectors), several kernels at once.
template <typename KernelVec>
std::vector<FoldVectors> AllFoldVectors(const KernelVec& kernels, const Eigen::Ref<const Eigen::VectorXi>& tr, const Eigen::Ref<const Eigen::VectorXi>& te,
                                        const Preprocessing& pre) {
  std::vector<FoldVectors> vectors(kernels.size());
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) { vectors[j] = MakeFoldVectors(kernels[j], tr, te, pre.centre, pre.normalise); });
  return vectors;
}

/// GroupScales from the traces of the prepared training blocks the vectors describe (ones without groups).
inline Eigen::VectorXd VectorScales(const std::vector<FoldVectors>& vectors, const std::vector<int>& groups) {
  std::vector<double> traces;
  for (const auto& v : vectors) traces.push_back(v.Trace());
  return GroupScales(traces, groups);
}

/// One kernel's fold blocks with covariates (residualising mixes rows, so not from vectors): sliced, residualised with
/// the fold's residualiser, centred, normalised.
template <typename Kernel>
FoldKernel PrepareResidualised(const Kernel& kernel, const Eigen::Ref<const Eigen::VectorXi>& tr, const Eigen::Ref<const Eigen::VectorXi>& te,
                               const FoldResidualiser& residualiser, const Preprocessing& pre) {
  FoldKernel fk = SliceFold(kernel, tr, te);
  ResidualiseFold(fk, residualiser);
  if (pre.centre) CentreFold(fk);
  if (pre.normalise) NormaliseFold(fk);
  return fk;
}

/// The traces of every kernel prepared one at a time with covariates, several kernels at once.
template <typename KernelVec>
std::vector<double> ResidualisedTraces(const KernelVec& kernels, const Eigen::Ref<const Eigen::VectorXi>& tr, const Eigen::Ref<const Eigen::VectorXi>& te,
                                       const FoldResidualiser& residualiser, const Preprocessing& pre) {
  std::vector<double> traces(kernels.size());
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) { traces[j] = PrepareResidualised(kernels[j], tr, te, residualiser, pre).train.trace(); });
  return traces;
}

/// gram::CheckCentredStoreFolds for a run's preprocessing.
inline void CheckStoreFits(const CompactKernelList& store, const Preprocessing& pre) { CheckCentredStoreFolds(store, pre.centre, pre.covariates != nullptr); }

/// CheckCentredStoreResidualiser for a fold's residualiser (float64 kernels: nothing to check).
inline void CheckShiftCancels(const KernelList&, const FoldResidualiser&) {}
inline void CheckShiftCancels(const CompactKernelList& store, const FoldResidualiser& residualiser) { CheckCentredStoreResidualiser(store, residualiser); }

/// One kernel prepared for a fold (times `scale`): from its fold vectors, or with covariates sliced and residualised.
template <typename Kernel>
FoldKernel PrepareFoldKernelOf(const Kernel& kernel, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                               const Preprocessing& pre, double scale) {
  if (!pre.covariates) return PreparedBlocks(kernel, train, test, MakeFoldVectors(kernel, train, test, pre.centre, pre.normalise), pre.normalise, scale);
  FoldKernel fk = PrepareResidualised(kernel, train, test, MakeFoldResidualiser(*pre.covariates, train, test), pre);
  if (scale != 1.0) {
    fk.train *= scale;
    fk.testTrain *= scale;
    fk.testDiag *= scale;
  }
  return fk;
}

/// The largest of one kernel's centred training self-similarities over rows `train` (residualised first with
/// covariates), as the folds prepare them before normalising (0 without rows).
template <typename Kernel>
double LargestCentredSelfSimilarityOf(const Kernel& kernel, const Eigen::Ref<const Eigen::VectorXi>& train, const Preprocessing& pre) {
  if (train.size() == 0) return 0.0;
  const Eigen::VectorXi none(0);
  if (!pre.covariates) return MakeFoldVectors(kernel, train, none, pre.centre, false).trainDiag.maxCoeff();
  FoldKernel fk = SliceFold(kernel, train, none);
  ResidualiseFold(fk, MakeFoldResidualiser(*pre.covariates, train, none));
  if (pre.centre) CentreFold(fk);
  return fk.train.diagonal().maxCoeff();
}

inline Eigen::VectorXi IndexVector(const std::vector<int>& v) { return Eigen::Map<const Eigen::VectorXi>(v.data(), static_cast<Eigen::Index>(v.size())); }

}  // namespace neuromkl::gram::detail
