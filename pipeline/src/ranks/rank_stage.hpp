#pragma once
// What the parts of the kernel stage spread over the MPI ranks share (mpi_kernels.hpp): rank 0's instructions to the
// other ranks, whether rank 0 serves a run, the per-rank budget rules, and each rank's part of a step. Every step ends
// with an agreement on failures (ranks::AnyFailure), so an error on any rank reaches rank 0, which throws it as the
// single-process stage would: no hang, no partial output.
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/gram/owners.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/pipeline/mpi_kernels.hpp"

namespace neuromkl::pipeline {

/// Each rank's share of a study of several sources, collected source by source (rank 0's and the others').
struct HeldSources::Collected {
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
};

}  // namespace neuromkl::pipeline

namespace neuromkl::pipeline::ranked {

/// Rank 0's instructions: stop; a kernel stage gathered on rank 0; a kernel stage whose kernels stay on their owners
/// (every P-th kernel on each rank), after which the ranks answer kernel requests until rank 0 releases them; kernels
/// loaded from a store by their owners; kernels rank 0 formed, handed to their owners (HandKernelsToRanks).
/// A study of several sources held by the ranks: begin collecting each source's share, finish (serve them as one set),
/// abandon (drop them: rank 0 failed on the way).
constexpr int kStop = 0, kKernels = 1, kOwnKernels = 2, kLoadOwnKernels = 3, kHandedKernels = 4, kBeginHeldSources = 5, kFinishHeldSources = 6,
              kAbandonHeldSources = 7;

/// Rank 0 of a run with a KernelRanks alive: the kernel stage may use every rank.
bool Serving();

/// The per-rank memory budget: kernels.memory_budget_mb, else a quarter of the memory.
std::uint64_t Budget(const kernels::RegionKernelOptions& options);
std::uint64_t BudgetOfMb(double budgetMb);
std::uint64_t KernelBytes(std::size_t regions, std::size_t subjects, bool compact);
/// Whether kernels of `bytes` over `subjects` subjects are held by the ranks of this job: over the per-rank budget,
/// at least one subject per rank, and MPI calls allowed from the fold tasks' threads. `why`: the reason they are
/// not, when they exceed the budget.
bool HeldByRanks(std::uint64_t bytes, std::size_t subjects, std::uint64_t budget, std::string* why = nullptr);
/// HeldByRanks, with a warning when the kernels exceed the budget but the ranks cannot hold them (`what`, if not empty,
/// says which kernels: "tabular", "several sources").
bool HeldByRanksOrWarn(std::uint64_t bytes, std::size_t subjects, std::uint64_t budget, const std::string& what);

/// What every rank needs for the stage; rank 0 has it, the others rebuild it from the study.
struct StageInputs {
  std::vector<std::string> ids, paths;
  atlas::RegionIndex regions;
  kernels::RegionKernelOptions options;
};


StageInputs RebuildInputs(const config::StudyConfig& study, int sourceIndex);

/// Every rank's part of one distributed kernel stage (ring_kernels.cpp). Rank 0 passes its inputs and gets the kernel
/// set; the other ranks pass nullptr (they rebuild the inputs from `study`) and get nothing. With `own` the kernels stay
/// on their owners: each rank gets its share in `shard`. Returns false on the other ranks when some rank failed (rank
/// 0 throws instead).
bool RunStage(const StageInputs* given, const config::StudyConfig* study, int sourceIndex, std::exception_ptr studyFailure, kernels::KernelSet* out,
              kernels::RegionKernelReport* report, const StageInputs* prepared = nullptr, std::exception_ptr preparedFailure = nullptr, bool own = false,
              std::unique_ptr<gram::KernelShard>* shard = nullptr);
/// Every rank's part of loading a kernel store into the ranks that hold its kernels (held_by_ranks.cpp).
bool LoadOwnedKernels(std::string description, std::unique_ptr<gram::KernelShard>& shard, std::vector<Eigen::VectorXd>* diagonals);
/// The other ranks' side of HandKernelsToRanks.
bool ReceiveHandedKernels(std::unique_ptr<gram::KernelShard>& shard);
/// Every rank's part of HeldSources::Finish.
bool FinishCollected(HeldSources::Collected& collected, std::vector<std::int64_t>& counts, bool& compact, bool& centred,
                     std::unique_ptr<gram::KernelShard>& shard);

}  // namespace neuromkl::pipeline::ranked
