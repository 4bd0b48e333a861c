#pragma once
// A study's kernels held by several owners (issue 17; docs/batch.md, "Kernels that do not fit one rank"): kernel j
// belongs to owner j mod P, and every computation that reads a kernel (a fold's preparation, the combination and
// quadratics of a fit, product columns, test blocks, fold scales, subject weights of the maps) runs on its owner.
// Owner 0 runs the study and receives results only: a combined kernel per solve, quadratics, product columns. Each
// owner prepares its kernels with the arithmetic nested CV uses in one process (fold_preparation.hpp,
// learners::OwnedStack), so per-kernel results are the one-process values bit for bit; sums over kernels are the
// owners' partial sums added in owner order (with one owner, the one-process sums bit for bit).
//
// The transport is abstract (KernelOwners::Exchange): in-process owners (LocalKernelOwners: the tests, and the
// reference the MPI ranks must reproduce) or MPI ranks (pipeline/mpi_kernels.cpp). Requests and replies are plain
// numbers so that any transport carries them.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/kernels/compact_kernels.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::weights {
struct FoldModel;
}

namespace neuromkl::cv {

/// A request to every owner. `op` is one of KernelShard's operations; `fold` names the fold it refers to (0: none).
struct OwnerRequest {
  int op = 0;
  std::int64_t fold = 0;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;
  std::string text;  ///< paths and names, '\n'-separated
};
/// An owner's reply: its part of the result, or the failure (SerialiseError) that stopped it.
struct OwnerReply {
  std::vector<double> values;
  std::string text;
  std::string error;
};

/// Kernel j's owner when the kernels form consecutive blocks (a study of several sources: one block per source, starting
/// at the kernel indices `blockStarts`, the first 0), each dealt to the owners in turn from owner 0: (j - the start of its
/// block) mod owners. With one block (or none given), j mod owners.
std::vector<int> BlockOwners(std::size_t kernelCount, int owners, const std::vector<std::size_t>& blockStarts);

/// The kernels of owner `owner` of `owners` and the state of the folds it was asked to open: what an owner executes.
/// Its k-th kernel is global kernel `globals[k]` (increasing); without `globals`, owner + k * owners (one block).
/// Not thread-safe: one request at a time.
class KernelShard {
 public:
  KernelShard(int owner, int owners, learners::KernelList kernels, std::vector<Eigen::Index> globals = {});
  KernelShard(int owner, int owners, kernels::CompactKernelList kernels, std::vector<Eigen::Index> globals = {});
  ~KernelShard();
  KernelShard(const KernelShard&) = delete;
  KernelShard& operator=(const KernelShard&) = delete;
  /// Executes one request; never throws (a failure is the reply's error).
  OwnerReply Execute(const OwnerRequest& request);
  std::size_t KernelCount() const;  ///< this owner's kernels
  int OpenFolds() const { return static_cast<int>(folds_.size()); }
  /// Moves this owner's kernels (float64, or the compact store's) into the lists' ends, with no fold open; the shard
  /// is empty afterwards (a study of several sources collects each source's share into one shard).
  void TakeKernels(learners::KernelList& kernels, kernels::CompactKernelList& compact);

 private:
  struct Fold;
  OwnerReply Run(const OwnerRequest& request);
  Fold& FoldOf(std::int64_t id);
  /// This owner's index of global kernel j, or -1 when another owner holds it.
  Eigen::Index LocalOf(Eigen::Index j) const;
  template <typename F>
  decltype(auto) WithKernels(const F& f) const;
  int owner_, owners_;
  learners::KernelList kernels_;
  kernels::CompactKernelList compact_;
  std::vector<Eigen::Index> globals_;  ///< the global index of each of this owner's kernels
  Preprocessing preprocessing_;
  std::map<std::int64_t, std::unique_ptr<Fold>> folds_;
};

class OwnedFold;

/// Owner 0's view of the kernels: their count and shape, and the operations nested CV, the weights stage and the
/// model export need, each sent to every owner (Exchange) and answered with the owners' parts. Thread-safe: requests
/// are sent one at a time, as MPI_THREAD_SERIALIZED allows.
class KernelOwners {
 public:
  /// `ownerOf`: each kernel's owner (BlockOwners); empty: kernel j on owner j mod owners.
  KernelOwners(int owners, std::size_t kernelCount, Eigen::Index subjects, bool compact, bool centred, std::vector<int> ownerOf = {});
  virtual ~KernelOwners();
  KernelOwners(const KernelOwners&) = delete;
  KernelOwners& operator=(const KernelOwners&) = delete;

  std::size_t size() const { return count_; }  ///< kernels (the name the kernel lists use)
  Eigen::Index Subjects() const { return subjects_; }
  int Owners() const { return owners_; }
  int OwnerOf(std::size_t kernel) const { return ownerOf_[kernel]; }
  /// Whether the owners hold the compact store (float32), and whether it was centred with the cohort's mean.
  bool Compact() const { return compact_; }
  bool Centred() const { return centred_; }

  /// From now on, subject i of every request is the kernels' row rows[i] (the kernels the learners see: a subset or
  /// another order of the rows the owners hold, which they keep whole).
  void SelectRows(const std::vector<int>& rows);
  /// The fold preprocessing of every later fold (nested CV's, the weights stage's and the export's). Its covariate
  /// design has a row per subject: set it after SelectRows.
  void SetPreprocessing(const Preprocessing& preprocessing);
  const Preprocessing& preprocessing() const { return preprocessing_; }

  /// Opens a fold (training rows `train`, test rows `test`): the owners compute their kernels' fold statistics (and the
  /// fold's scales from every kernel's trace). The fold is closed on the owners when the last handle goes.
  std::shared_ptr<OwnedFold> OpenFold(const std::vector<int>& train, const std::vector<int>& test) const;
  /// weights::SubjectWeights of the kernels (n x kernels), each column computed by the kernel's owner.
  Eigen::MatrixXd SubjectWeights(const weights::FoldModel& model) const;
  /// Per kernel, the largest centred training self-similarity over rows `train` (after the covariates, as the folds
  /// prepare them): the zero-norm floor of the exported model.
  Eigen::VectorXd LargestTrainingSelfSimilarity(const std::vector<int>& train) const;
  /// Writes every kernel (raw, as held: float64, or the compact store's float32) to `folder`/`files[j]` as .npy, each
  /// by its owner (a folder every owner sees), and returns the files' xxh3 checksums (hex), one per kernel.
  std::vector<std::string> SaveKernels(const std::string& folder, const std::vector<std::string>& files) const;
  /// Requests sent so far (each a round trip to every owner) and the wall time they took, owner 0's share included.
  long requests() const { return requests_; }
  double requestSeconds() const { return requestSeconds_; }
  /// The same per kind of request (its name: "combine", "quadratics", ...): count and seconds.
  std::map<std::string, std::pair<long, double>> requestsByKind() const;

 protected:
  /// Sends `request` to every owner and hands each owner's reply to `consume`, in owner order (0, 1, ...), one at a
  /// time (a transport need not hold them all). Called under the request lock.
  virtual void Exchange(const OwnerRequest& request, const std::function<void(int, OwnerReply&)>& consume) const = 0;

 private:
  friend class OwnedFold;
  /// Exchange under the lock; the first owner's failure (in owner order) is thrown once every reply is in.
  void Request(const OwnerRequest& request, const std::function<void(int, OwnerReply&)>& consume) const;
  /// The owners' values of their kernels in `which` (in that order), placed at their position in `which`.
  std::vector<std::vector<double>> PerKernel(const OwnerRequest& request, const std::vector<Eigen::Index>& which, std::size_t valuesPerKernel) const;
  /// The sum of the owners' values, added in owner order (owners that reply nothing are left out; empty: none replied).
  std::vector<double> SumOfReplies(const OwnerRequest& request) const;
  /// Every kernel's index, in order (PerKernel over all of them).
  std::vector<Eigen::Index> Every() const;
  /// Subjects as the owners' rows (SelectRows).
  std::vector<int> Rows(const std::vector<int>& subjects) const;
  int owners_;
  std::size_t count_;
  std::vector<int> ownerOf_;                   ///< each kernel's owner
  std::vector<std::vector<std::size_t>> held_;  ///< each owner's kernels (global indices, increasing): its k-th is held_[owner][k]
  Eigen::Index subjects_;
  Eigen::Index heldRows_;   ///< rows of the kernels the owners hold
  std::vector<int> rows_;  ///< SelectRows (empty: every row, in order)
  bool compact_, centred_;
  Preprocessing preprocessing_;
  mutable std::mutex lock_;
  mutable std::atomic<std::int64_t> nextFold_{1};
  mutable long requests_ = 0;
  mutable double requestSeconds_ = 0;
  mutable std::map<int, std::pair<long, double>> byKind_;
};

/// A fold opened on the owners (KernelOwners::OpenFold): the operations on its prepared kernels. The owners must outlive
/// it (it refers to them and closes the fold on them when it goes).
class OwnedFold {
 public:
  OwnedFold(const KernelOwners& owners, std::int64_t id, Eigen::Index train, Eigen::Index test, Eigen::VectorXd scales);
  ~OwnedFold();  ///< closes the fold on the owners
  OwnedFold(const OwnedFold&) = delete;
  OwnedFold& operator=(const OwnedFold&) = delete;
  Eigen::Index TrainSize() const { return train_; }
  Eigen::Index TestSize() const { return test_; }
  std::size_t KernelCount() const { return owners_.size(); }
  /// The fold's scales (FoldScales: all ones without kernel groups).
  const Eigen::VectorXd& Scales() const { return scales_; }
  /// learners::DistributedColumns' operations on the prepared training kernels.
  void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const;
  Eigen::VectorXd Quadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A, bool perKernel) const;
  Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const;
  Eigen::VectorXd RootSpectralBounds(const std::vector<Eigen::Index>& which) const;
  Eigen::Index FirstNonFinite() const;
  std::vector<Eigen::Index> NonZero() const;
  /// The prepared test blocks (test x train) of the kernels in `which`, in that order.
  learners::KernelList TestBlocks(const std::vector<Eigen::Index>& which) const;
  /// learners::TestProduct of those blocks with C (train x columns), each computed by the kernel's owner: only the
  /// products travel. Below learners::kPackedStackBelow training subjects the owners keep the blocks once made.
  std::vector<Eigen::MatrixXd> TestProducts(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) const;
  /// PrepareSummedFold of the fold: the sum of the prepared training and test blocks.
  FoldKernels Summed() const;
  /// FoldKernelView::Products of each kernel r in `which` (with scales[i] for which[i]): scale x K~_r A, K~_r as
  /// PrepareFoldKernel prepares it; one request, each owner computing its kernels side by side.
  std::vector<Eigen::MatrixXd> ViewProducts(const std::vector<Eigen::Index>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                            const std::vector<double>& scales) const;

 private:
  /// The owners' facts of the prepared training kernels (finiteness, zero kernels), asked for once.
  void Facts() const;
  const KernelOwners& owners_;
  std::int64_t id_;
  Eigen::Index train_, test_;
  Eigen::VectorXd scales_;
  mutable bool factsKnown_ = false;
  mutable Eigen::Index firstNonFinite_ = -1;
  mutable std::vector<Eigen::Index> nonZero_;
};

/// A fold's prepared training kernels held by their owners as learners::DistributedColumns (what a learner of kernel
/// weights is given in nested CV on owned kernels).
class OwnedFoldColumns final : public learners::DistributedColumns {
 public:
  explicit OwnedFoldColumns(std::shared_ptr<const OwnedFold> fold) : fold_(std::move(fold)) {}
  Eigen::Index Count() const override { return static_cast<Eigen::Index>(fold_->KernelCount()); }
  Eigen::Index Size() const override { return fold_->TrainSize(); }
  void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const override { fold_->Combine(weights, out); }
  Eigen::VectorXd Quadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A, bool perKernel) const override {
    return fold_->Quadratics(which, A, perKernel);
  }
  Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const override { return fold_->Products(which, v); }
  Eigen::VectorXd RootSpectralBounds(const std::vector<Eigen::Index>& which) const override { return fold_->RootSpectralBounds(which); }
  Eigen::Index FirstNonFinite() const override { return fold_->FirstNonFinite(); }
  std::vector<Eigen::Index> NonZero() const override { return fold_->NonZero(); }
  /// The test blocks for decisions: their products with a model's coefficients computed by their owners
  /// (TestBlocks::products); a block itself is fetched into `buffer` only when asked for.
  learners::TestBlocks Test(Eigen::MatrixXd& buffer) const;
  const OwnedFold& Fold() const { return *fold_; }

 private:
  std::shared_ptr<const OwnedFold> fold_;
};

/// Owners in this process: `owners` shards of `kernels` (kernel j to shard j mod owners, or as BlockOwners deals the
/// blocks starting at `blockStarts`), each request executed by every shard in turn. What the MPI ranks do, without MPI:
/// the tests compare runs on it with one-process runs.
class LocalKernelOwners final : public KernelOwners {
 public:
  LocalKernelOwners(const learners::KernelList& kernels, int owners, const std::vector<std::size_t>& blockStarts = {});
  LocalKernelOwners(const kernels::CompactKernelList& kernels, int owners, const std::vector<std::size_t>& blockStarts = {});
  ~LocalKernelOwners() override;
  int OpenFolds() const;  ///< folds open on the shards (every handle gone: 0)

 protected:
  void Exchange(const OwnerRequest& request, const std::function<void(int, OwnerReply&)>& consume) const override;

 private:
  std::vector<std::unique_ptr<KernelShard>> shards_;
};

/// Nested CV on owned kernels: RunNestedCv's results with every kernel computation on its owner (the learners of
/// kernel weights fit OwnedFoldColumns, the others the fold's summed kernel from the owners).
std::vector<LearnerOutcome> RunNestedCv(const KernelOwners& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                        const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options);
/// FoldScales of owned kernels (the owners' preprocessing; `preprocessing` must be it).
Eigen::VectorXd FoldScales(const KernelOwners& kernels, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                           const Preprocessing& preprocessing);

}  // namespace neuromkl::cv
