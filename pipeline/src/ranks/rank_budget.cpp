// The per-rank budget rules of the kernel stage under mpirun (mpi_kernels.hpp): which kernels the ranks hold, which
// stages they share, and rank 0's serving of a run.
#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/gram/compact.hpp"
#include "neuromkl/gram/owners.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/mpi_kernels.hpp"
#include "neuromkl/pipeline/study_context.hpp"
#include "neuromkl/ranks/held_kernels.hpp"
#include "neuromkl/ranks/ranks.hpp"
#include "rank_stage.hpp"

namespace neuromkl::pipeline {

namespace {
bool gServing = false;  // rank 0: a KernelRanks is alive (a run, not a batch unit)
bool gStopped = false;
}  // namespace

namespace ranked {
bool Serving() { return gServing && !gStopped; }

std::uint64_t Budget(const kernels::RegionKernelOptions& options) {
  return options.memoryBudgetBytes ? options.memoryBudgetBytes : PhysicalMemoryBytes() / 4;
}

/// Whether kernels of `bytes` over `subjects` subjects are held by the ranks of this job: over the per-rank budget,
/// at least one subject per rank, and MPI calls allowed from the fold tasks' threads. `why`: the reason they are
/// not, when they exceed the budget.
bool HeldByRanks(std::uint64_t bytes, std::size_t subjects, std::uint64_t budget, std::string* why) {
  if (ranks::Size() < 2 || bytes <= budget) return false;
  if (subjects < static_cast<std::size_t>(ranks::Size())) {
    if (why) *why = fmt::format("fewer subjects ({}) than ranks ({})", subjects, ranks::Size());
    return false;
  }
  if (!ranks::ThreadsSerialized()) {
    if (why) *why = "this MPI library does not allow calls from several threads (MPI_THREAD_SERIALIZED)";
    return false;
  }
  return true;
}

/// HeldByRanks, with a warning when the kernels exceed the budget but the ranks cannot hold them (`what`, if not empty,
/// says which kernels: "tabular", "several sources").
bool HeldByRanksOrWarn(std::uint64_t bytes, std::size_t subjects, std::uint64_t budget, const std::string& what) {
  std::string why;
  if (HeldByRanks(bytes, subjects, budget, &why)) return true;
  if (!why.empty())
    spdlog::warn("kernels: the study's kernels ({}{:.3g} MiB) exceed the per-rank budget, but {}: rank 0 holds them alone", what.empty() ? "" : what + ", ",
                 static_cast<double>(bytes) / 1048576.0, why);
  return false;
}

/// Budget of a study's kernels.memory_budget_mb (0: a quarter of the memory).
std::uint64_t BudgetOfMb(double budgetMb) {
  kernels::RegionKernelOptions options;
  options.memoryBudgetBytes = static_cast<std::uint64_t>(budgetMb * 1048576.0);
  return Budget(options);
}

std::uint64_t KernelBytes(std::size_t regions, std::size_t subjects, bool compact) {
  return static_cast<std::uint64_t>(regions) * subjects * subjects * (compact ? sizeof(float) : sizeof(double));
}

}  // namespace ranked

using namespace ranked;

KernelRanks::KernelRanks() {
  gServing = ranks::Active() && ranks::Rank() == 0;
  gStopped = false;
}

KernelRanks::~KernelRanks() {
  if (gServing && !gStopped) ranks::Instruct(kStop, 0);
  gServing = false;
  gStopped = true;
}


int KernelHoldingRanks(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount) {
  return Serving() && KernelsExceedRankBudget(study, cohort, kernelCount) ? ranks::Size() : 1;
}

bool KernelsExceedRankBudget(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount) {
  const std::size_t subjects = cohort.ids.size();
  const bool compact = study.kernels.precision == config::KernelPrecision::Float32;
  return HeldByRanks(KernelBytes(kernelCount, subjects, compact), subjects, BudgetOfMb(study.kernels.memoryBudgetMb));
}



bool DistributeKernels(std::size_t subjects, const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options) {
  if (!Serving()) return false;
  const auto columns = static_cast<std::uint64_t>(kernels::RegionColumnOffsets(regions).back());
  const std::uint64_t bytes = subjects * columns * sizeof(float);
  if (bytes <= Budget(options)) return false;
  if (subjects < static_cast<std::size_t>(ranks::Size())) {
    spdlog::warn("kernels: fewer subjects ({}) than MPI ranks ({}): the kernel stage runs on rank 0 alone", subjects, ranks::Size());
    return false;
  }
  return true;
}


bool OwnKernels(std::size_t subjects, const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options) {
  if (!Serving()) return false;
  const std::uint64_t kernelsBytes = KernelBytes(regions.regions.size(), subjects, options.compact);
  if (!HeldByRanksOrWarn(kernelsBytes, subjects, Budget(options), "")) return false;
  spdlog::info("kernels: the study's {} kernels ({:.1f} MiB) exceed the per-rank budget of {:.1f} MiB (kernels.memory_budget_mb): each of the {} "
               "ranks keeps its share (kernel k on rank k mod {}) and computes with it; rank 0 runs the study and receives results only",
               regions.regions.size(), static_cast<double>(kernelsBytes) / 1048576.0, static_cast<double>(Budget(options)) / 1048576.0, ranks::Size(), ranks::Size());
  return true;
}


std::uint64_t RankMemoryBudget(const kernels::RegionKernelOptions& options) { return Budget(options); }

}  // namespace neuromkl::pipeline
