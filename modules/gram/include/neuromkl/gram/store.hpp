#pragma once
// A study's kernels wherever they are held (in this process as float64 matrices or the float32 compact store,
// memory.hpp; or by several owners, owners.hpp), and their preparation per fold with that fold's training statistics
// only (ALGORITHMS.md section 2): confounds removed (residualise.hpp), centred, cosine-normalised, and with equal
// source weighting scaled so that every source has the same total trace. Nested CV, the weights stage and the export
// ask a KernelStore for what they need and never learn where the kernels are.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/gram/stack.hpp"

namespace neuromkl::gram {

class FoldFeatures;

struct Preprocessing {
  bool centre = true;
  bool normalise = true;
  /// Confounds removed inside every fold before centring (rows = the kernels' rows); null = none.
  std::shared_ptr<const Covariates> covariates;
  /// Equal source weighting: the group (source) of each kernel. After centring and normalisation, group s's kernels are
  /// scaled by g_s = mean_t(T_t) / T_s, where T_s is the sum of the group's training traces in the fold: every group then
  /// has the same total trace, and the total over groups is unchanged. Empty = no scaling.
  std::vector<int> kernelGroups;
};

/// The per-kernel scales g (see Preprocessing::kernelGroups) from each kernel's training trace in a fold.
/// All ones without groups; a group whose trace is 0 keeps scale 1 (its kernels are all zero).
Eigen::VectorXd GroupScales(const std::vector<double>& traces, const std::vector<int>& groups);

/// Every kernel restricted to a fold and prepared with the fold's training statistics.
struct FoldKernels {
  KernelList train;  ///< l x l each
  KernelList test;   ///< m x l each
};

/// A model fitted on one fold, as its voxel maps need it (KernelStore::SubjectWeights).
struct FoldModel {
  std::vector<int> train;   ///< training subjects (indices into the kernels' subjects)
  std::vector<int> test;    ///< test subjects (their self-similarities enter the normalisation floor)
  Eigen::VectorXd coef;     ///< decision coefficients, one per training subject
  Eigen::VectorXd beta;     ///< kernel weights, one per kernel
};

/// How a fold gives the training kernels of the learners of kernel weights.
enum class TrainingForm {
  Copies,         ///< a prepared float64 copy of every kernel (fitted as matrices)
  Float32Copies,  ///< prepared copies rounded to float32 (compact stores only): half the memory, a second rounding
  InPlace,        ///< read from the study's kernels entry by entry as a fit asks (no copies; kernels held by owners: always)
};

/// The training kernels of the learners of kernel weights in one fold, and the test blocks their decisions read.
/// Reused from fold to fold (the copies' storage is kept where sizes match).
struct WeightedKernels {
  KernelList train;                          ///< Copies: the prepared training kernels; else empty
  KernelList test;                           ///< the prepared test blocks when held; empty: prepared one at a time
  std::vector<Eigen::MatrixXf> train32;      ///< Float32Copies: the rounded training kernels (read by `kernels`)
  std::unique_ptr<TrainingKernels> kernels;  ///< given to the learners in place of `train` (null with Copies)
  std::function<TestBlocks(Eigen::MatrixXd& buffer)> testOnDemand;  ///< when `test` is not held
  /// What `kernels` and `testOnDemand` read when the fold owns it (a fold of harmonised kernels), kept alive with them.
  std::shared_ptr<const void> keepAlive;
  /// The test blocks a decision reads: the held ones, or each prepared (or fetched) into `buffer` when asked for.
  TestBlocks Test(Eigen::MatrixXd& buffer) const;
};

/// One fold of a store's kernels (training rows, test rows), prepared with the fold's training statistics. A fold of
/// kernels held by owners is open on them until this handle goes.
class PreparedFold {
 public:
  virtual ~PreparedFold() = default;
  /// The fold's source scales (GroupScales; all ones without kernel groups).
  virtual Eigen::VectorXd Scales() const = 0;
  /// The sum over kernels of the prepared training and test blocks (one l x l and one m x l kernel), for the learners
  /// of the unweighted sum; computed without copying any kernel. Empty lists for a store without kernels.
  virtual FoldKernels Summed() const = 0;
  /// The training kernels of the learners of kernel weights, in `form` (kernels held by owners ignore it: in place).
  virtual void Weighted(TrainingForm form, WeightedKernels& out) const = 0;
  /// scales[r] x K~_r A for each r in `which` (A: l x k), K~_r as the fold prepares it (without its source scale);
  /// `scales` empty: 1. Several kernels at once.
  virtual std::vector<Eigen::MatrixXd> Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                                const Eigen::VectorXd& scales) const = 0;
  /// The fold in feature form (a store of features, MakeFeatureKernels): what learners::FitFeatures fits; null for a
  /// store of kernels.
  virtual const FoldFeatures* Features() const { return nullptr; }
};

/// What one nested-CV fold task prepares, for KernelStore::FoldTaskBytes.
struct FoldTask {
  std::size_t train = 0, test = 0, unlabelled = 0;
  /// Which kernels the task prepares, [2 x semi-supervised + summed]: every kernel (learners of kernel weights) and
  /// the summed kernel, for the supervised learners and with the unlabelled subjects appended.
  std::array<bool, 4> needs{};
  TrainingForm form = TrainingForm::Copies;
  bool covariates = false;
  std::size_t covariateColumns = 0;  ///< the design's columns (intercept included) when `covariates`
};
constexpr std::size_t FoldNeed(bool semiSupervised, bool summed) { return 2 * static_cast<std::size_t>(semiSupervised) + static_cast<std::size_t>(summed); }

class KernelStore {
 public:
  KernelStore() = default;
  virtual ~KernelStore() = default;
  KernelStore(const KernelStore&) = delete;
  KernelStore& operator=(const KernelStore&) = delete;
  virtual std::size_t Count() const = 0;       ///< kernels
  virtual Eigen::Index Subjects() const = 0;   ///< rows (each kernel is Subjects() x Subjects())
  virtual bool Compact() const = 0;            ///< values held in float32 (the compact store)
  /// A compact store centred with the mean over all its rows (CompactKernel): exact only under fold centring or
  /// residualising (CheckPreprocessing).
  virtual bool Centred() const = 0;
  virtual bool HeldByOwners() const { return false; }
  /// The kernels are held as features (MakeFeatureKernels): folds give PreparedFold::Features and no kernel matrices.
  virtual bool Features() const { return false; }
  /// Refuses a fold preprocessing these kernels cannot be prepared with: a centred compact store needs fold centring
  /// or residualising (InputError cv:CentredStoreUncentredFolds); kernels held by owners are prepared with the
  /// preprocessing the owners were given (std::logic_error otherwise).
  virtual void CheckPreprocessing(const Preprocessing& pre) const = 0;
  virtual std::unique_ptr<PreparedFold> OpenFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const = 0;
  /// Per kernel, the largest of its centred training self-similarities over rows `train` (residualised first with
  /// covariates), as the folds prepare them before normalising (0 without rows): the exported model's zero-norm floor.
  virtual Eigen::VectorXd LargestCentredSelfSimilarities(const std::vector<int>& train, const Preprocessing& pre) const = 0;
  /// Subject weights D (n x kernels) with map_r = sum_i D(i, r) x_i restricted to region r, for centred and/or
  /// cosine-normalised linear kernels (the fold's training statistics, as the learner saw them):
  /// D(i, r) = beta_r (coef_i s_ir - S_r / l) for training subjects i, where s_ir = 1 / ||x_i - mu_r|| (1 without
  /// normalisation), S_r = sum_i coef_i s_ir, and the mean term drops without centring. Subjects outside the training
  /// set get 0. With covariates the learner saw residualised images: D is rewritten as weights of the raw images
  /// (ResidualiseSubjectWeights), so that maps still apply to raw data.
  virtual Eigen::MatrixXd SubjectWeights(const FoldModel& model, const Preprocessing& pre) const = 0;
  /// Bytes one nested-CV fold task holds at once on the process that holds the most (its fold kernels and a fit's own
  /// l x l work), so that fewer folds run at once where they would not fit the memory.
  virtual std::uint64_t FoldTaskBytes(const FoldTask& task) const = 0;
  /// A store of the kernels `which` (indices, in that order), held in this process as these are (a copy of each, in
  /// the same precision): what a nested CV over part of the study's kernels reads. Kernels held by owners have none:
  /// InputError gram:SubsetOfHeldKernels.
  virtual std::unique_ptr<KernelStore> Subset(const std::vector<std::size_t>& which) const = 0;
};

/// The fold's prepared training and test copies (TrainingForm::Copies): what every other form equals.
FoldKernels PrepareFold(const KernelStore& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre);
/// The fold's source scales (PreparedFold::Scales).
Eigen::VectorXd FoldScales(const KernelStore& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre);

}  // namespace neuromkl::gram
