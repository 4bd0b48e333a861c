// Kernels the MPI ranks hold for a study whose kernels do not fit one rank (docs/batch.md, "Kernels that do not fit one
// rank"): kernels rank 0 formed or read itself handed to their owners, kernels loaded from the cache by their owners, and
// a study of several sources that keeps every source's share on the ranks.
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



namespace ranked {

namespace {
/// The global indices of rank `rank`'s kernels when the sources' kernels (`counts` per source, in order) are dealt
/// source by source from rank 0 (gram::BlockOwners).
std::vector<Eigen::Index> HeldGlobals(const std::vector<std::int64_t>& counts, int rank, int P) {
  std::vector<Eigen::Index> globals;
  std::int64_t start = 0;
  for (const std::int64_t c : counts) {
    for (std::int64_t k = rank; k < c; k += P) globals.push_back(start + k);
    start += c;
  }
  return globals;
}

}  // namespace

/// Every rank's part of HeldSources::Finish: the kernels per source (`counts`) and the store's flags, given on rank 0 and
/// received by the others, then this rank's collected share as one shard. False on the other ranks when some rank
/// failed (rank 0 throws instead).
bool FinishCollected(HeldSources::Collected& collected, std::vector<std::int64_t>& counts, bool& compact, bool& centred,
                     std::unique_ptr<gram::KernelShard>& shard) {
  const int rank = ranks::Rank();
  const int P = ranks::Size();
  std::int64_t header[3] = {static_cast<std::int64_t>(counts.size()), compact ? 1 : 0, centred ? 1 : 0};  // rank 0's
  ranks::Broadcast(header, sizeof header);
  counts.resize(static_cast<std::size_t>(header[0]));
  ranks::Broadcast(counts.data(), static_cast<std::int64_t>(counts.size() * sizeof(std::int64_t)));
  compact = header[1] != 0;
  centred = header[2] != 0;
  std::vector<Eigen::Index> globals = HeldGlobals(counts, rank, P);
  std::exception_ptr failure;
  const std::size_t held = compact ? collected.ownCompact.size() : collected.own.size();
  if (held != globals.size())
    failure = std::make_exception_ptr(std::logic_error(fmt::format("rank {} holds {} kernels of the sources, expected {}", rank, held, globals.size())));
  if (ranks::AnyFailure(failure)) return false;
  collected.ownCompact.centred = centred;
  if (compact) shard = std::make_unique<gram::KernelShard>(rank, P, std::move(collected.ownCompact), std::move(globals));
  else shard = std::make_unique<gram::KernelShard>(rank, P, std::move(collected.own), std::move(globals));
  return true;
}


/// The other ranks' side of HandKernelsToRanks: receive this rank's share (kernel k for k mod P = rank). A share this
/// rank cannot hold is still received (into a scratch kernel) so that the messages stay in step; the failure is then
/// agreed on. False when some rank failed.
bool ReceiveHandedKernels(std::unique_ptr<gram::KernelShard>& shard) {
  const int rank = ranks::Rank();
  const int P = ranks::Size();
  std::int64_t header[4] = {};
  ranks::Broadcast(header, sizeof header);
  const auto R = static_cast<std::size_t>(header[0]);
  const auto n = static_cast<Eigen::Index>(header[1]);
  const bool compact = header[2] != 0;
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
  ownCompact.centred = header[3] != 0;
  std::exception_ptr failure;
  Eigen::MatrixXd scratch;
  Eigen::MatrixXf scratchCompact;
  for (std::size_t k = static_cast<std::size_t>(rank); k < R; k += static_cast<std::size_t>(P)) {
    if (!failure) {
      try {
        if (compact) ownCompact.kernels.emplace_back(n, n);
        else own.emplace_back(n, n);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    if (compact) {
      if (failure) scratchCompact.resize(n, n);
      float* into = failure ? scratchCompact.data() : ownCompact.kernels.back().data();
      ranks::Receive(into, static_cast<std::int64_t>(n) * n * 4, 0, ranks::kTagOwned);
    } else {
      if (failure) scratch.resize(n, n);
      double* into = failure ? scratch.data() : own.back().data();
      ranks::Receive(into, static_cast<std::int64_t>(n) * n * 8, 0, ranks::kTagOwned);
    }
  }
  if (ranks::AnyFailure(failure)) return false;
  if (compact) shard = std::make_unique<gram::KernelShard>(rank, P, std::move(ownCompact));
  else shard = std::make_unique<gram::KernelShard>(rank, P, std::move(own));
  return true;
}


/// Every rank's part of loading a kernel store into the ranks that hold its kernels (OwnedKernelsFromStore). The
/// description is text from rank 0 (every rank sees the store's folder): "float32 files, round, centre" flags, the
/// subjects, `where`, then one "file \t checksum \t name" line per kernel. Rank 0 gets each kernel's float64 diagonal
/// in `diagonals` for float64 files (a float32 store's are in its index). False on the other ranks when some rank
/// failed (rank 0 throws).
bool LoadOwnedKernels(std::string description, std::unique_ptr<gram::KernelShard>& shard, std::vector<Eigen::VectorXd>* diagonals) {
  const int rank = ranks::Rank();
  const int P = ranks::Size();
  std::int64_t bytes = static_cast<std::int64_t>(description.size());
  ranks::Broadcast(&bytes, sizeof bytes);
  description.resize(static_cast<std::size_t>(bytes));
  ranks::Broadcast(description.data(), bytes);
  std::vector<std::vector<std::string>> lines;
  {
    std::string line;
    std::vector<std::string> fields(1);
    for (const char c : description) {
      if (c == '\n') {
        lines.push_back(std::move(fields));
        fields.assign(1, "");
      } else if (c == '\t') {
        fields.emplace_back();
      } else {
        fields.back() += c;
      }
    }
  }
  const bool float32Files = lines.at(0).at(0) == "1", round = lines.at(0).at(1) == "1", centre = lines.at(0).at(2) == "1";
  const auto n = static_cast<Eigen::Index>(std::stoll(lines.at(1).at(0)));
  const std::string& where = lines.at(2).at(0);
  const std::size_t R = lines.size() - 3;
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
  ownCompact.centred = float32Files ? centre : round && centre;
  std::vector<Eigen::VectorXd> mine;
  std::exception_ptr failure;
  for (std::size_t k = static_cast<std::size_t>(rank); k < R && !failure; k += static_cast<std::size_t>(P)) {
    const auto& e = lines[3 + k];
    try {
      if (float32Files) {
        ownCompact.kernels.push_back(exporting::ReadStoreKernelFloat32(e.at(0), e.at(1), n));
        continue;
      }
      Eigen::MatrixXd K = exporting::ReadStoreKernel(e.at(0), e.at(1));
      if (K.rows() != n || K.cols() != n)
        throw InputError("store:Corrupt", e.at(0), fmt::format("expected a {0} x {0} kernel (= subjects), found {1} x {2}", n, K.rows(), K.cols()));
      mine.push_back(K.diagonal());
      if (round) ownCompact.kernels.push_back(gram::CompactKernel(K, centre, where + ": kernel \"" + e.at(2) + "\""));
      else own.push_back(std::move(K));
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (ranks::AnyFailure(failure)) return false;
  if (float32Files || round) shard = std::make_unique<gram::KernelShard>(rank, P, std::move(ownCompact));
  else shard = std::make_unique<gram::KernelShard>(rank, P, std::move(own));
  if (!float32Files) {  // each kernel's diagonal to rank 0, in kernel order
    for (std::size_t k = 0; k < R; ++k) {
      const int owner = static_cast<int>(k % static_cast<std::size_t>(P));
      if (rank == 0 && owner == 0) diagonals->push_back(mine[k / static_cast<std::size_t>(P)]);
      else if (rank == owner) ranks::Send(mine[k / static_cast<std::size_t>(P)].data(), n * 8, 0, ranks::kTagOwned);
      else if (rank == 0) {
        diagonals->emplace_back(n);
        ranks::Receive(diagonals->back().data(), n * 8, owner, ranks::kTagOwned);
      }
    }
  }
  return true;
}


}  // namespace ranked

using namespace ranked;

namespace {
/// Rank 0: kernel k of `set` (rank 0's, in memory) to rank k mod P, which takes it (kHandedKernels); `set` then lists
/// them (KernelSet::distributed) and `owners` receives rank 0's handle. Rank 0 keeps every kernel until each rank holds
/// its share: a rank's failure (memory) is thrown here, and nothing rank 0 formed is lost before that.
void HandOutKernels(kernels::KernelSet& set, std::shared_ptr<ranks::RankOwners>* owners) {
  const int P = ranks::Size();
  const std::size_t R = set.Size();
  const bool compact = set.Compact();
  const auto n = static_cast<Eigen::Index>(set.subjects.size());
  ranks::Instruct(kHandedKernels, 0);
  std::int64_t header[4] = {static_cast<std::int64_t>(R), n, compact ? 1 : 0, set.compact.centred ? 1 : 0};
  ranks::Broadcast(header, sizeof header);
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
  ownCompact.centred = set.compact.centred;
  for (std::size_t k = 0; k < R; ++k) {
    const int owner = static_cast<int>(k % static_cast<std::size_t>(P));
    if (owner != 0) {
      if (compact) ranks::Send(set.compact.kernels[k].data(), static_cast<std::int64_t>(set.compact.kernels[k].size()) * 4, owner, ranks::kTagOwned);
      else ranks::Send(set.kernels[k].data(), static_cast<std::int64_t>(set.kernels[k].size()) * 8, owner, ranks::kTagOwned);
    }
  }
  ranks::AnyFailure(nullptr);  // throws the first failing rank's error
  std::vector<Eigen::VectorXd> diagonals;
  for (std::size_t k = 0; k < R; ++k) {
    const bool mine = k % static_cast<std::size_t>(P) == 0;
    if (compact) {
      if (mine) ownCompact.kernels.push_back(std::move(set.compact.kernels[k]));
      set.compact.kernels[k] = Eigen::MatrixXf();
    } else {
      diagonals.push_back(set.kernels[k].diagonal());
      if (mine) own.push_back(std::move(set.kernels[k]));
      set.kernels[k] = Eigen::MatrixXd();
    }
  }
  std::unique_ptr<gram::KernelShard> shard = compact ? std::make_unique<gram::KernelShard>(0, P, std::move(ownCompact))
                                                   : std::make_unique<gram::KernelShard>(0, P, std::move(own));
  // The set lists the kernels the ranks hold (kernels::KernelSet::distributed); a float32 set keeps its diagonals.
  const bool centred = set.compact.centred;
  set.kernels.clear();
  set.compact = {};
  set.compact.centred = centred;
  if (!compact) set.rawDiagonals = std::move(diagonals);
  set.distributed = true;
  set.ownedCompact = compact;
  *owners = ranks::RankOwners::Make(std::move(shard), R, n, compact, centred);
}
}  // namespace

bool HandKernelsToRanks(kernels::KernelSet& set, double budgetMb, const std::string& what, std::shared_ptr<ranks::RankOwners>* owners,
                        std::uint64_t* budgetBytes) {
  if (!Serving() || set.distributed || set.Size() == 0) return false;
  const std::uint64_t budget = BudgetOfMb(budgetMb);
  const std::size_t R = set.Size(), subjects = set.subjects.size();
  const std::uint64_t bytes = KernelBytes(R, subjects, set.Compact());
  if (!HeldByRanksOrWarn(bytes, subjects, budget, what)) return false;
  const int P = ranks::Size();
  spdlog::info("kernels: the study's {} kernels ({}, {:.3g} MiB) exceed the per-rank budget of {:.3g} MiB (kernels.memory_budget_mb): rank 0 hands "
               "each of the {} ranks its share (kernel k on rank k mod {}), which it computes with; rank 0 runs the study and receives results only",
               R, what, static_cast<double>(bytes) / 1048576.0, static_cast<double>(budget) / 1048576.0, P, P);
  HandOutKernels(set, owners);
  if (budgetBytes) *budgetBytes = budget;
  return true;
}


std::unique_ptr<HeldSources> HeldSources::Begin(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount) {
  if (!Serving() || study.kernels.source != config::KernelSource::Sources) return nullptr;
  const std::uint64_t budget = BudgetOfMb(study.kernels.memoryBudgetMb);
  const std::size_t count = kernelCount, subjects = cohort.ids.size();
  const std::uint64_t bytes = KernelBytes(count, subjects, study.kernels.precision == config::KernelPrecision::Float32);
  if (!HeldByRanksOrWarn(bytes, subjects, budget, "several sources")) return nullptr;
  const int P = ranks::Size();
  spdlog::info("kernels: the study's {} kernels (several sources, {:.3g} MiB, counted before they are formed) exceed the per-rank budget of {:.3g} MiB "
               "(kernels.memory_budget_mb): every source's kernels stay on the {} ranks as they are formed or read (kernel k of a source on rank k mod "
               "{}), each rank computes with its share; rank 0 runs the study and receives results only",
               count, static_cast<double>(bytes) / 1048576.0, static_cast<double>(budget) / 1048576.0, P, P);
  ranks::Instruct(kBeginHeldSources, 0);
  std::unique_ptr<HeldSources> held(new HeldSources);
  held->collected_ = std::make_unique<Collected>();
  held->budgetBytes_ = budget;
  return held;
}

HeldSources::~HeldSources() {
  if (!finished_) ranks::Instruct(kAbandonHeldSources, 0);
}

void HeldSources::Add(kernels::KernelSet& set, std::shared_ptr<ranks::RankOwners>& owners) {
  if (!owners) HandOutKernels(set, &owners);  // a source rank 0 formed (or read) itself
  if (!owners || owners.use_count() != 1) throw std::logic_error("HeldSources::Add: the source's kernels must be held by the ranks, and by this handle only");
  const std::size_t count = owners->Count();
  std::unique_ptr<gram::KernelShard> local = owners->TakeLocal();
  owners.reset();  // released: every rank keeps its share of this source for the study
  local->TakeKernels(collected_->own, collected_->ownCompact);
  counts_.push_back(static_cast<std::int64_t>(count));
}

std::shared_ptr<ranks::RankOwners> HeldSources::Finish(Eigen::Index subjects, bool compact, bool centred) {
  finished_ = true;
  ranks::Instruct(kFinishHeldSources, 0);
  std::unique_ptr<gram::KernelShard> shard;
  FinishCollected(*collected_, counts_, compact, centred, shard);  // throws the first failing rank's error
  std::vector<std::size_t> starts;
  std::size_t total = 0;
  for (const std::int64_t c : counts_) {
    starts.push_back(total);
    total += static_cast<std::size_t>(c);
  }
  return ranks::RankOwners::Make(std::move(shard), total, subjects, compact, centred, gram::BlockOwners(total, ranks::Size(), starts));
}


kernels::KernelSet OwnedKernelsFromStore(const exporting::KernelStoreIndex& index, bool round, bool centre, const std::string& where,
                                         std::shared_ptr<ranks::RankOwners>* owners) {
  const auto n = static_cast<Eigen::Index>(index.set.subjects.size());
  std::string description = fmt::format("{}\t{}\t{}\n{}\n{}\n", index.float32 ? 1 : 0, round ? 1 : 0, (index.float32 ? index.set.compact.centred : centre) ? 1 : 0, n, where);
  for (std::size_t k = 0; k < index.files.size(); ++k) description += index.files[k] + "\t" + index.hashes[k] + "\t" + index.set.info[k].name + "\n";
  ranks::Instruct(kLoadOwnKernels, 0);
  std::unique_ptr<gram::KernelShard> shard;
  std::vector<Eigen::VectorXd> diagonals;
  LoadOwnedKernels(description, shard, &diagonals);
  kernels::KernelSet set = index.set;
  if (!index.float32) set.rawDiagonals = std::move(diagonals);
  set.distributed = true;
  set.ownedCompact = index.float32 || round;
  set.compact.centred = index.float32 ? index.set.compact.centred : round && centre;
  *owners = ranks::RankOwners::Make(std::move(shard), set.Size(), n, set.ownedCompact, set.compact.centred);
  return set;
}


}  // namespace neuromkl::pipeline
