#pragma once
// The kernel stage of `neuromkl run` spread over MPI ranks (docs/batch.md, "Subject data that do
// not fit one rank"): when the subjects x voxels data exceed the per-rank budget
// (kernels.memory_budget_mb), every rank decodes only its own block of subjects, the region kernel
// blocks K_r(p, q) = X_p,r X_q,r' are formed by a ring exchange of the data blocks, and rank 0
// gathers the kernels and runs the rest of the study alone, unless they exceed the budget too: then
// every rank keeps its share of them (an images study's own stage forms them there; kernels of
// other sources rank 0 forms are handed out). Without MPI (or with one rank) nothing here is active.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "neuromkl/export/kernel_store.hpp"
#include "neuromkl/kernels/region_kernels.hpp"

namespace neuromkl::ranks {
class RankOwners;
}

namespace neuromkl::pipeline {

/// Rank 0 of `neuromkl run` under mpirun with several ranks: while it lives, the kernel stage may
/// use every rank; when it goes (the run finished or failed), the other ranks are told to stop.
class KernelRanks {
 public:
  KernelRanks();
  ~KernelRanks();
  KernelRanks(const KernelRanks&) = delete;
  KernelRanks& operator=(const KernelRanks&) = delete;
};

/// Ranks > 0 of `neuromkl run` under mpirun: take part in rank 0's distributed kernel stages (the
/// study read from `studyPath`, `threads` as --threads) until rank 0 is done; returns the exit code
/// (0: a failure of this rank's share is reported, and exits non-zero, through rank 0).
int ServeRunKernels(const std::string& studyPath, int threads);
/// The same for a study given as its config (a batch's study, which every rank has).
int ServeStudyKernels(const config::StudyConfig& study);

/// Whether a study's kernels would be held by the ranks of this mpirun job (OwnKernels' rule, for a batch's plan): its
/// kernels (of any source: kernels x subjects^2 in its precision, counted before exclusions) exceed the per-rank
/// budget (kernels.memory_budget_mb, else a quarter of the memory), with at least one subject per rank.
/// `kernelCount`: PlannedKernelCount(study, cohort).
bool KernelsExceedRankBudget(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount);
/// Rank 0 of a run under mpirun: the number of ranks that will hold the study's kernels (KernelsExceedRankBudget), else 1.
int KernelHoldingRanks(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount);
/// The per-rank memory budget of a study's kernel stage: kernels.memory_budget_mb, else a quarter of the memory.
std::uint64_t RankMemoryBudget(const kernels::RegionKernelOptions& options);
/// Rank 0 of a run under mpirun with several ranks: kernels rank 0 formed or read itself (`what`: precomputed, tabular,
/// connectivity or several sources' kernels) that exceed the per-rank budget (`budgetMb`, 0: a quarter of the memory)
/// are handed to the ranks, kernel k to rank k mod P, as OwnKernels' rule decides for an images study's own stage.
/// Then `set` lists them (kernels::KernelSet::distributed, float64 diagonals in rawDiagonals), `owners` receives rank
/// 0's handle, `budgetBytes` the budget, and true is returned. Rank 0 keeps every kernel until each rank holds its
/// share: a rank's failure (memory) is thrown here. False (nothing changed) otherwise, with a warning when the kernels
/// exceed the budget but cannot be held by the ranks.
bool HandKernelsToRanks(kernels::KernelSet& set, double budgetMb, const std::string& what, std::shared_ptr<ranks::RankOwners>* owners,
                        std::uint64_t* budgetBytes);

/// Rank 0 of a run under mpirun: a study of several sources (kernels.sources) whose kernels, counted before they are
/// formed (as a batch counts them), exceed the per-rank budget keeps every source's kernels on the ranks as they are
/// formed or read: an image source's own stage leaves kernel k on rank k mod P, the kernels of other sources rank 0
/// forms are handed out, each source's share stays on its rank when the source's handle goes (Add), and Finish makes
/// the study's handle over all of them (source by source: kernel k of a source on rank k mod P, gram::BlockOwners).
/// Rank 0 never holds more than one source's kernels. Gone before Finish (a failure): the ranks drop what they hold.
class HeldSources {
 public:
  /// Null when the study's kernels are not to be held by the ranks (one process, within the budget, a source that is
  /// not several, or the ranks cannot hold them: then with a warning).
  /// `kernelCount`: PlannedKernelCount(study, cohort).
  static std::unique_ptr<HeldSources> Begin(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount);
  ~HeldSources();
  HeldSources(const HeldSources&) = delete;
  HeldSources& operator=(const HeldSources&) = delete;
  /// One source's kernels: held by the ranks (`owners`, the source stage's handle, the only one), or in `set` on rank
  /// 0 (`owners` null: handed out first). `owners` is released; `set` lists the kernels (KernelSet::distributed).
  void Add(kernels::KernelSet& set, std::shared_ptr<ranks::RankOwners>& owners);
  /// The handle to every source's kernels (`subjects` rows, float32 store when `compact`, centred as `centred`).
  std::shared_ptr<ranks::RankOwners> Finish(Eigen::Index subjects, bool compact, bool centred);
  std::uint64_t BudgetBytes() const { return budgetBytes_; }
  struct Collected;  ///< a rank's share, collected source by source

 private:
  HeldSources() = default;
  std::unique_ptr<Collected> collected_;
  std::vector<std::int64_t> counts_;  ///< kernels per source, in order
  std::uint64_t budgetBytes_ = 0;
  bool finished_ = false;
};

/// Whether the image kernels of `subjects` subjects go to every rank: rank 0 of a run under mpirun
/// with several ranks, at least one subject per rank, and subject data over the per-rank budget.
bool DistributeKernels(std::size_t subjects, const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options);

/// Whether the kernels of `subjects` subjects stay on their owners (docs/batch.md, "Kernels that do not fit one
/// rank"): rank 0 of a run under mpirun with several ranks, at least one subject per rank, kernels (regions x n x n
/// in the study's precision) over the per-rank budget, and an MPI library that allows calls from several threads.
bool OwnKernels(std::size_t subjects, const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options);

/// Rank 0: ComputeRegionKernels with every rank reading its own block of subjects and the kernel
/// blocks formed by a ring exchange. `sourceIndex` names the study's source (-1: the study itself),
/// from which the other ranks rebuild the same inputs. Errors of any rank are thrown here, as the
/// single-process stage would throw them. With `owners`, the kernels stay on their owners (kernel k on
/// rank k mod P; the set returned lists them: kernels::KernelSet::distributed) and `owners` receives rank 0's
/// handle to them: the other ranks answer its requests until the last copy of it goes.
kernels::KernelSet DistributedRegionKernels(int sourceIndex, const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths,
                                            const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options,
                                            kernels::RegionKernelReport* report, std::shared_ptr<ranks::RankOwners>* owners = nullptr);

/// Rank 0: the kernels of a kernel store (a cache entry) loaded by the ranks that hold them (kernel k by rank k mod P,
/// each file checked against its checksum), rounded there into the compact store when `round` (centred when
/// `centre`; `where` names the study in an error). Returns the set's metadata (KernelSet::distributed) and puts rank
/// 0's handle to the kernels in `owners`. A failure on any rank (a damaged file) is thrown here; the ranks then hold
/// nothing.
kernels::KernelSet OwnedKernelsFromStore(const exporting::KernelStoreIndex& index, bool round, bool centre, const std::string& where,
                                         std::shared_ptr<ranks::RankOwners>* owners);

}  // namespace neuromkl::pipeline
