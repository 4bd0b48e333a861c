#pragma once
// The compact kernel store (docs/batch.md, "The compact kernel store"): a study's kernels in
// float32, half the memory of float64, so that nested CV at n = 5,000 x 116 regions fits a 24 GiB machine.
// Each kernel stays a full n x n matrix: its columns are contiguous, as the in-place fold paths read them
// (FoldVectors, fold columns, the summed fold kernel). Everything computed from the store is computed in
// double (preprocess.hpp): the store changes the kernel values (rounding), never the arithmetic.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace neuromkl::gram {

struct FoldResidualiser;

/// The store: the kernels, and whether they were centred with the whole cohort's mean (CompactKernel(K, true)).
/// A centred store is only exact under fold centring or shift-invariant covariates (see CompactKernel), so
/// nested CV checks the flag against its preprocessing. The vector-like members let the fold paths take it as
/// they take a list of float64 kernels.
struct CompactKernelList {
  std::vector<Eigen::MatrixXf> kernels;
  bool centred = false;
  std::size_t size() const { return kernels.size(); }
  bool empty() const { return kernels.empty(); }
  const Eigen::MatrixXf& operator[](std::size_t j) const { return kernels[j]; }
};

/// `kernel` (symmetric n x n; its upper triangle is read) as the compact store holds it. With `centre`, first
/// centred with the mean over all its n subjects, K'_ab = ((K_ab - r_a) - r_b) + g (r: row means, g: their
/// mean), then rounded to float32. Fold centring with training statistics gives the same fold kernels from K'
/// as from K in exact arithmetic (the r and g terms cancel, entry by entry, for any training and test rows;
/// residualising on covariates cancels them when every row keeps the intercept, which nested CV checks per
/// fold), so nothing of a test subject enters a fold. What it changes is rounding: a raw kernel of images with
/// a large common mean (grey matter, PET) has entries far larger than its centred ones, and rounding them to
/// float32 would lose the digits that centring keeps (docs/batch.md). Without `centre` (for a study that does
/// not centre: normalising alone is not shift-invariant) the raw values are rounded. The result is exactly
/// symmetric. InputError at `where`: kernels:NotSquare; kernels:Float32Range naming the entry when a value is
/// not finite in float32 (beyond 3.4e38, or NaN / infinite already).
Eigen::MatrixXf CompactKernel(const Eigen::Ref<const Eigen::MatrixXd>& kernel, bool centre, const std::string& where = "kernel");

/// CompactKernel of every kernel, several at once; an error names the first bad kernel in order ("kernel j").
CompactKernelList CompactKernels(const std::vector<Eigen::MatrixXd>& kernels, bool centre);
/// A store of `count` kernels made by round(j) (kernel j, rounded as CompactKernel rounds it), several at once; the first
/// failing kernel in order is the one whose error is thrown, whatever the threads.
CompactKernelList CompactEach(std::size_t count, bool centre, const std::function<Eigen::MatrixXf(std::size_t)>& round);
/// The same for kernels the caller gives up: each float64 kernel is freed once rounded, so the float64 kernels
/// and the store are never both held whole. `names[j]` (one per kernel) says where kernel j is in an error.
CompactKernelList CompactKernelsReleasing(std::vector<Eigen::MatrixXd>& kernels, bool centre, const std::vector<std::string>& names);
/// One more kernel for `store`, made with the store's centring (callers that form kernels one at a time and
/// never hold them all in float64).
void AppendCompactKernel(CompactKernelList& store, const Eigen::Ref<const Eigen::MatrixXd>& kernel);

/// A centred store gives the raw kernels' fold kernels only where the fold preprocessing undoes a shift of the
/// features: fold centring, or residualising on covariates. InputError cv:CentredStoreUncentredFolds for a centred
/// store whose folds are neither centred nor residualised (they would see every subject's mean). Every reader of
/// a store (nested CV, fold scales and views, subject weights) checks it.
void CheckCentredStoreFolds(const CompactKernelList& store, bool centre, bool residualised);
/// Residualising removes a shift of the features only when every row keeps the intercept (a_i 1 = 1 for
/// a_i = c_i P): not when the fit rows' design is rank-deficient with a column aliased to the intercept (e.g. a
/// category's reference level absent from them). InputError cv:CentredStoreCovariates for a centred store
/// otherwise. Nothing to check for a store made without centring.
void CheckCentredStoreResidualiser(const CompactKernelList& store, const FoldResidualiser& residualiser);

/// The store's bytes: kernels x n x n float32 values.
std::uint64_t CompactBytes(std::size_t kernels, std::size_t subjects);

}  // namespace neuromkl::gram
