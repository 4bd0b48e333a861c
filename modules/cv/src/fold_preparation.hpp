#pragma once
// The per-kernel fold preparation shared by nested CV (nested_cv.cpp) and the owners of a share of the kernels
// (kernel_owners.cpp): one arithmetic for every path that prepares a fold kernel, so their values agree bit for bit.
#include <vector>

#include <tbb/parallel_for.h>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/kernels/compact_kernels.hpp"
#include "neuromkl/kernels/covariates.hpp"
#include "neuromkl/kernels/preprocess.hpp"

namespace neuromkl::cv::detail {

/// Every kernel's fold vectors (kernels::MakeFoldVectors), several kernels at once.
template <typename KernelVec>
std::vector<kernels::FoldVectors> AllFoldVectors(const KernelVec& kernels, const Eigen::Ref<const Eigen::VectorXi>& tr,
                                                 const Eigen::Ref<const Eigen::VectorXi>& te, const Preprocessing& pre) {
  std::vector<kernels::FoldVectors> vectors(kernels.size());
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) { vectors[j] = kernels::MakeFoldVectors(kernels[j], tr, te, pre.centre, pre.normalise); });
  return vectors;
}

/// GroupScales from the traces of the prepared training blocks the vectors describe (ones without groups).
inline Eigen::VectorXd VectorScales(const std::vector<kernels::FoldVectors>& vectors, const std::vector<int>& groups) {
  std::vector<double> traces;
  for (const auto& v : vectors) traces.push_back(v.Trace());
  return GroupScales(traces, groups);
}

/// One kernel's fold blocks with covariates (residualising mixes rows, so not from vectors): sliced,
/// residualised with the fold's residualiser, centred, normalised.
template <typename Kernel>
kernels::FoldKernel PrepareResidualised(const Kernel& kernel, const Eigen::Ref<const Eigen::VectorXi>& tr,
                                        const Eigen::Ref<const Eigen::VectorXi>& te, const kernels::FoldResidualiser& residualiser,
                                        const Preprocessing& pre) {
  kernels::FoldKernel fk = kernels::SliceFold(kernel, tr, te);
  kernels::ResidualiseFold(fk, residualiser);
  if (pre.centre) kernels::CentreFold(fk);
  if (pre.normalise) kernels::NormaliseFold(fk);
  return fk;
}

/// The fold's source scales (GroupScales) for kernels prepared one at a time with covariates: every prepared
/// kernel's trace first, one more pass over the kernels (ones without groups, and no pass).
template <typename KernelVec>
Eigen::VectorXd ResidualisedScales(const KernelVec& kernels, const Eigen::Ref<const Eigen::VectorXi>& tr, const Eigen::Ref<const Eigen::VectorXi>& te,
                                   const kernels::FoldResidualiser& residualiser, const Preprocessing& pre) {
  if (pre.kernelGroups.empty()) return Eigen::VectorXd::Ones(static_cast<Eigen::Index>(kernels.size()));
  std::vector<double> traces(kernels.size());
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) { traces[j] = PrepareResidualised(kernels[j], tr, te, residualiser, pre).train.trace(); });
  return GroupScales(traces, pre.kernelGroups);
}

/// kernels::CheckCentredStoreFolds for a run's preprocessing.
inline void CheckStoreFits(const kernels::CompactKernelList& store, const Preprocessing& pre) {
  kernels::CheckCentredStoreFolds(store, pre.centre, pre.covariates != nullptr);
}

/// kernels::CheckCentredStoreResidualiser for a fold's residualiser (float64 kernels: nothing to check).
inline void CheckShiftCancels(const learners::KernelList&, const kernels::FoldResidualiser&) {}
inline void CheckShiftCancels(const kernels::CompactKernelList& store, const kernels::FoldResidualiser& residualiser) {
  kernels::CheckCentredStoreResidualiser(store, residualiser);
}

/// Both checks for one fold of a store (the readers that prepare a fold's kernels one at a time).
inline void CheckStoreFold(const kernels::CompactKernelList& store, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                    const Preprocessing& pre) {
  CheckStoreFits(store, pre);
  if (pre.covariates) CheckShiftCancels(store, kernels::MakeFoldResidualiser(*pre.covariates, train, test));
}

template <typename Kernel>
kernels::FoldKernel PrepareFoldKernelOf(const Kernel& kernel, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                                        const Preprocessing& pre, double scale) {
  if (!pre.covariates)
    return kernels::PreparedBlocks(kernel, train, test, kernels::MakeFoldVectors(kernel, train, test, pre.centre, pre.normalise), pre.normalise, scale);
  kernels::FoldKernel fk = PrepareResidualised(kernel, train, test, kernels::MakeFoldResidualiser(*pre.covariates, train, test), pre);
  if (scale != 1.0) {
    fk.train *= scale;
    fk.testTrain *= scale;
    fk.testDiag *= scale;
  }
  return fk;
}


}  // namespace neuromkl::cv::detail
