#pragma once
// A study's kernels held by several owners (the MPI ranks of a study whose kernels do not fit one rank; docs/batch.md,
// "Kernels that do not fit one rank"): every computation that reads a kernel (a fold's preparation, the combination and
// quadratics of a fit, product columns, test blocks, fold scales, subject weights of the maps) runs on its owner, which
// holds its share as MemoryKernels and prepares it with MemoryFold, the arithmetic of one process; owner 0 runs the
// study and receives results only. Per-kernel results are the one-process values bit for bit; sums over kernels are the
// owners' partial sums added in owner order (with one owner, the one-process sums bit for bit).
//
// The transport is abstract (KernelOwners::Exchange): owners in this process (LocalKernelOwners: the tests, and the
// reference the MPI ranks must reproduce) or MPI ranks (modules/ranks). Requests and replies are plain numbers so that
// any transport carries them; what each operation sends is written in one place (src/owner_protocol.hpp).
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/compact.hpp"
#include "neuromkl/gram/store.hpp"

namespace neuromkl::gram {

/// A request to every owner: an operation (src/owner_protocol.hpp), the fold it refers to (0: none), and its numbers.
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

class MemoryKernels;
class MemoryFold;
namespace detail {
class OwnedFold;
}

/// The kernels of owner `owner` of `owners` and the folds it was asked to open: what an owner executes. Its k-th kernel
/// is global kernel `globals[k]` (increasing); without `globals`, owner + k * owners (one block). Not thread-safe: one
/// request at a time.
class KernelShard {
 public:
  KernelShard(int owner, int owners, KernelList kernels, std::vector<Eigen::Index> globals = {});
  KernelShard(int owner, int owners, CompactKernelList kernels, std::vector<Eigen::Index> globals = {});
  ~KernelShard();
  KernelShard(const KernelShard&) = delete;
  KernelShard& operator=(const KernelShard&) = delete;
  /// Executes one request; never throws (a failure is the reply's error).
  OwnerReply Execute(const OwnerRequest& request);
  std::size_t KernelCount() const;  ///< this owner's kernels
  int OpenFolds() const { return static_cast<int>(folds_.size()); }
  /// Moves this owner's kernels (float64, or the compact store's) to the lists' ends, with no fold open; the shard is
  /// empty afterwards (a study of several sources collects each source's share into one shard).
  void TakeKernels(KernelList& kernels, CompactKernelList& compact);

 private:
  struct Handlers;
  OwnerReply Run(const OwnerRequest& request);
  MemoryFold& FoldOf(std::int64_t id);
  /// This owner's index of global kernel j, or -1 when another owner holds it.
  Eigen::Index LocalOf(Eigen::Index j) const;
  /// This owner's local indices of the global kernels in `which` (in that order), skipping the others'.
  std::vector<Eigen::Index> Mine(const std::vector<Eigen::Index>& which) const;
  int owner_, owners_;
  KernelList float64_;
  CompactKernelList float32_;
  std::unique_ptr<MemoryKernels> kernels_;  ///< over float64_ or float32_
  std::vector<Eigen::Index> globals_;       ///< the global index of each of this owner's kernels
  Preprocessing preprocessing_;
  std::map<std::int64_t, std::unique_ptr<MemoryFold>> folds_;
};

/// Owner 0's view of the kernels, as a KernelStore: every operation is one request to every owner (Exchange), answered
/// with the owners' parts. Thread-safe: requests are sent one at a time, as MPI_THREAD_SERIALIZED allows.
class KernelOwners : public KernelStore {
 public:
  /// `ownerOf`: each kernel's owner (BlockOwners); empty: kernel j on owner j mod owners.
  KernelOwners(int owners, std::size_t kernelCount, Eigen::Index subjects, bool compact, bool centred, std::vector<int> ownerOf = {});
  ~KernelOwners() override;

  std::size_t Count() const override { return count_; }
  Eigen::Index Subjects() const override { return subjects_; }
  bool Compact() const override { return compact_; }
  bool HeldByOwners() const override { return true; }
  int Owners() const { return owners_; }
  int OwnerOf(std::size_t kernel) const { return ownerOf_[kernel]; }
  bool Centred() const override { return centred_; }

  /// From now on, subject i of every request is the kernels' row rows[i] (the kernels the learners see: a subset or
  /// another order of the rows the owners hold, which they keep whole).
  void SelectRows(const std::vector<int>& rows);
  /// The fold preprocessing of every later fold (nested CV's, the weights stage's and the export's). Its covariate
  /// design has a row per subject: set it after SelectRows.
  void SetPreprocessing(const Preprocessing& preprocessing);
  const Preprocessing& preprocessing() const { return preprocessing_; }
  /// std::logic_error unless `pre` is the preprocessing the owners were given.
  void CheckPreprocessing(const Preprocessing& pre) const override;

  /// Opens a fold (training rows `train`, test rows `test`): the owners compute their kernels' fold statistics (and the
  /// fold's scales from every kernel's trace). The fold is closed on the owners when the handle goes.
  std::unique_ptr<PreparedFold> OpenFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const override;
  Eigen::VectorXd LargestCentredSelfSimilarities(const std::vector<int>& train, const Preprocessing& pre) const override;
  /// Each column computed by the kernel's owner.
  Eigen::MatrixXd SubjectWeights(const FoldModel& model, const Preprocessing& pre) const override;
  std::unique_ptr<KernelStore> Subset(const std::vector<std::size_t>& which) const override;
  /// On the rank that needs the most: owner 0 holds the summed kernel and a fit's own l x l work (the combined kernel, a
  /// spare and an owner's reply being added); an owner holds its partial sums and per kernel the packed training
  /// triangle and test block below kPackedStackBelow, or with covariates the prepared copies.
  std::uint64_t FoldTaskBytes(const FoldTask& task) const override;
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
  friend class detail::OwnedFold;
  /// Exchange under the lock; the first owner's failure (in owner order) is thrown once every reply is in.
  void Request(const OwnerRequest& request, const std::function<void(int, OwnerReply&)>& consume) const;
  /// The owners' values of their kernels in `which` (in that order), placed at their position in `which`.
  std::vector<std::vector<double>> PerKernel(const OwnerRequest& request, const std::vector<Eigen::Index>& which, std::size_t valuesPerKernel) const;
  /// The sum of the owners' values, added in owner order (owners that reply nothing are left out; empty: none replied).
  std::vector<double> SumOfReplies(const OwnerRequest& request) const;
  /// Every kernel's index, in order.
  std::vector<Eigen::Index> Every() const;
  /// Subjects as the owners' rows (SelectRows).
  std::vector<int> Rows(const std::vector<int>& subjects) const;
  int owners_;
  std::size_t count_;
  std::vector<int> ownerOf_;                    ///< each kernel's owner
  std::vector<std::vector<std::size_t>> held_;  ///< each owner's kernels (global indices, increasing): its k-th is held_[owner][k]
  Eigen::Index subjects_;
  Eigen::Index heldRows_;  ///< rows of the kernels the owners hold
  std::vector<int> rows_;  ///< SelectRows (empty: every row, in order)
  bool compact_, centred_;
  Preprocessing preprocessing_;
  mutable std::mutex lock_;
  mutable std::atomic<std::int64_t> nextFold_{1};
  mutable long requests_ = 0;
  mutable double requestSeconds_ = 0;
  mutable std::map<int, std::pair<long, double>> byKind_;
};

/// Owners in this process: `owners` shards of `kernels` (kernel j to shard j mod owners, or as BlockOwners deals the
/// blocks starting at `blockStarts`), each request executed by every shard in turn. What the MPI ranks do, without MPI:
/// the tests compare runs on it with one-process runs.
class LocalKernelOwners final : public KernelOwners {
 public:
  LocalKernelOwners(const KernelList& kernels, int owners, const std::vector<std::size_t>& blockStarts = {});
  LocalKernelOwners(const CompactKernelList& kernels, int owners, const std::vector<std::size_t>& blockStarts = {});
  ~LocalKernelOwners() override;
  int OpenFolds() const;  ///< folds open on the shards (every handle gone: 0)

 protected:
  void Exchange(const OwnerRequest& request, const std::function<void(int, OwnerReply&)>& consume) const override;

 private:
  std::vector<std::unique_ptr<KernelShard>> shards_;
};

}  // namespace neuromkl::gram
