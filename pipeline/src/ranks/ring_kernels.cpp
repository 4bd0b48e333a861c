// The distributed kernel stage of `neuromkl run` under mpirun (docs/batch.md, "Subject data that do not fit one rank").
// Rank p owns the subjects [p n / P, (p + 1) n / P) and decodes only them (each image is decoded once in the whole job).
// The non-finite rule is agreed by a sum of per-column counts, the reference row (subject 0 after that rule) is
// broadcast from rank 0, and the data blocks travel round a ring: at step s rank p holds block p - s and forms
// K_r(p, p - s) for every region with kernels::RegionKernelBlocks, the arithmetic of ComputeRegionKernels. With
// floor(P / 2) steps every block pair is formed exactly once, by one rank, with two data blocks in memory per rank. Rank
// 0 gathers the blocks into the kernels, or each kernel goes to the rank that keeps it.
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
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// The first subject of rank p's block: blocks differ in size by at most one subject.
std::int64_t BlockStart(std::int64_t n, int p, int P) { return n * p / P; }

std::string CohortDigest(const std::vector<std::string>& ids, const std::vector<std::string>& paths) {
  Hasher h;
  for (const auto& id : ids) h.Update(id);
  for (const auto& p : paths) h.Update(p);
  return h.Hex();
}


/// The blocks rank p forms: (p, p) and (p, p - s) for s = 1..floor(P / 2); with P even, the pair at
/// distance P / 2 only by the rank of the lower half (the other rank of the pair would repeat it).
std::vector<int> PartnersOf(int p, int P) {
  std::vector<int> q = {p};
  for (int s = 1; s <= P / 2; ++s)
    if (!(P % 2 == 0 && s == P / 2 && p >= P / 2)) q.push_back((p - s + P) % P);
  return q;
}


/// The kernels that stay on their owners (`own`): every kernel's diagonal is agreed (each rank has its rows' in its
/// block (p, p)), rank 0 decides which regions stay with the one-process stage's rules and broadcasts them, and kept
/// kernel k is assembled on rank k mod P from every rank's blocks (rounded into the compact store there for a float32
/// study). Rank 0 gets the set's metadata (names, exclusions, diagonals) in `out`; every rank gets its share in `shard`.
bool KeepKernelsOnOwners(const StageInputs& in, std::int64_t n, std::int64_t count, const std::vector<int>& partners,
                         std::vector<std::vector<Eigen::MatrixXd>>& blocks, kernels::KernelSet& set, kernels::RegionKernelReport* report,
                         std::unique_ptr<gram::KernelShard>& shard) {
  const int rank = ranks::Rank();
  const int P = ranks::Size();
  const std::size_t R = blocks.empty() ? 0 : blocks[0].size();
  // 1. Every kernel's diagonal on every rank: rank p's rows, region by region.
  std::vector<double> mine(R * static_cast<std::size_t>(count));
  for (std::size_t r = 0; r < R; ++r)
    for (std::int64_t i = 0; i < count; ++i) mine[r * static_cast<std::size_t>(count) + static_cast<std::size_t>(i)] = blocks[0][r](i, i);
  std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P));
  for (int p = 0; p < P; ++p) {
    counts[static_cast<std::size_t>(p)] = static_cast<int>(static_cast<std::int64_t>(R) * (BlockStart(n, p + 1, P) - BlockStart(n, p, P)));
    displs[static_cast<std::size_t>(p)] = static_cast<int>(static_cast<std::int64_t>(R) * BlockStart(n, p, P));
  }
  std::vector<double> gathered(R * static_cast<std::size_t>(n));
  ranks::AllGather(mine.data(), static_cast<int>(mine.size()), gathered.data(), counts, displs);
  std::vector<std::string> names;  // every region's, as every rank's header lists them
  for (const auto& info : set.info) names.push_back(info.name);
  std::vector<Eigen::VectorXd> diagonals(R, Eigen::VectorXd(n));
  for (int p = 0; p < P; ++p) {
    const std::int64_t first = BlockStart(n, p, P), rows = BlockStart(n, p + 1, P) - first;
    for (std::size_t r = 0; r < R; ++r)
      for (std::int64_t i = 0; i < rows; ++i)
        diagonals[r][first + i] = gathered[static_cast<std::size_t>(displs[static_cast<std::size_t>(p)]) + r * static_cast<std::size_t>(rows) + static_cast<std::size_t>(i)];
  }
  gathered = {};
  // 2. Which regions stay: as ExcludeEmptyRegions decides (no voxel left, or a zero kernel: a Gram matrix is zero
  // exactly when its diagonal is). Rank 0 runs that function on a stand-in set whose 1 x 1 "kernels" are zero exactly
  // when the kernels are, so its exclusions, warnings and their order are the one-process stage's.
  std::vector<std::int64_t> kept;
  std::int64_t keptCount = 0;
  std::exception_ptr disagreement;
  if (rank == 0) {
    kernels::KernelSet standIn;
    standIn.subjects = set.subjects;
    standIn.info = set.info;
    standIn.excluded = set.excluded;
    for (std::size_t r = 0; r < R; ++r) {
      standIn.kernels.push_back(Eigen::MatrixXd::Constant(1, 1, diagonals[r].cwiseAbs().sum()));
      if (set.info[r].features > 0 && diagonals[r].cwiseAbs().sum() > 0) kept.push_back(static_cast<std::int64_t>(r));
    }
    kernels::ExcludeEmptyRegions(standIn, *report);
    if (standIn.info.size() != kept.size())
      disagreement = std::make_exception_ptr(std::logic_error("kernels: the exclusions of the kernels kept on their owners disagree"));
    set.info = std::move(standIn.info);
    set.excluded = std::move(standIn.excluded);
    keptCount = static_cast<std::int64_t>(kept.size());
  }
  ranks::Broadcast(&keptCount, sizeof keptCount);
  kept.resize(static_cast<std::size_t>(keptCount));
  ranks::Broadcast(kept.data(), keptCount * 8);
  if (ranks::AnyFailure(disagreement)) return false;
  // 3. Kernel k to rank k mod P, assembled from every rank's blocks; each block is freed once sent.
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
  ownCompact.centred = in.options.compact && in.options.compactCentre;
  std::exception_ptr failure;
  // A failure on the owner (memory for the kernel, the float32 range) is kept for the agreement below while the owner
  // goes on receiving every block (into `incoming`), so the messages of every rank stay in step.
  Eigen::MatrixXd incoming;
  for (std::int64_t k = 0; k < keptCount; ++k) {
    const auto r = static_cast<std::size_t>(kept[static_cast<std::size_t>(k)]);
    const int owner = static_cast<int>(k % P);
    if (rank == owner) {
      Eigen::MatrixXd K;
      if (!failure) {
        try {
          K.resize(n, n);
        } catch (...) {
          failure = std::current_exception();
        }
      }
      const auto place = [&](int p, int q, const Eigen::MatrixXd& block) {
        if (failure) return;
        const auto ap = BlockStart(n, p, P), aq = BlockStart(n, q, P);
        K.block(ap, aq, block.rows(), block.cols()) = block;
        if (p != q) K.block(aq, ap, block.cols(), block.rows()) = block.transpose();
      };
      for (std::size_t b = 0; b < partners.size(); ++b) place(rank, partners[b], blocks[b][r]);
      for (int p = 0; p < P; ++p) {
        if (p == rank) continue;
        for (int q : PartnersOf(p, P)) {
          incoming.resize(BlockStart(n, p + 1, P) - BlockStart(n, p, P), BlockStart(n, q + 1, P) - BlockStart(n, q, P));
          ranks::Receive(incoming.data(), static_cast<std::int64_t>(incoming.size()) * 8, p, ranks::kTagOwned);
          place(p, q, incoming);
        }
      }
      if (!failure) {
        try {
          if (!in.options.compact) own.push_back(std::move(K));
          else  // rounded as the one-process stage rounds each kernel as it is formed
            ownCompact.kernels.push_back(gram::CompactKernel(K, in.options.compactCentre, in.options.compactWhere + ": kernel \"" + names[r] + "\""));
        } catch (...) {
          failure = std::current_exception();
        }
      }
    } else {
      for (std::size_t b = 0; b < partners.size(); ++b) ranks::Send(blocks[b][r].data(), static_cast<std::int64_t>(blocks[b][r].size()) * 8, owner, ranks::kTagOwned);
    }
    for (auto& b : blocks) b[r] = Eigen::MatrixXd();
  }
  if (ranks::AnyFailure(failure)) return false;
  if (in.options.compact) shard = std::make_unique<gram::KernelShard>(rank, P, std::move(ownCompact));
  else shard = std::make_unique<gram::KernelShard>(rank, P, std::move(own));
  if (rank == 0) {
    for (const auto r : kept) set.rawDiagonals.push_back(std::move(diagonals[static_cast<std::size_t>(r)]));
    set.distributed = true;
    set.ownedCompact = in.options.compact;
    set.compact.centred = ownCompact.centred;
  }
  return true;
}

}  // namespace

StageInputs RebuildInputs(const config::StudyConfig& study, int sourceIndex) {
  const Cohort cohort = LoadStudyCohort(study);
  config::StudyConfig d = study;
  Cohort sc = cohort;
  if (sourceIndex >= 0) {
    const auto& source = study.kernels.sources.at(static_cast<std::size_t>(sourceIndex));
    d = SourceStudy(study, source);
    sc = SourceCohort(d, source, cohort);
  }
  StageInputs in;
  in.ids = sc.ids;
  in.paths = sc.images;
  std::vector<std::string> warnings;
  in.regions = StudyRegions(d, sc, warnings);
  in.options = RegionKernelOptionsOf(d, in.regions, "");
  return in;
}


namespace {

/// Every block of kernel rows this rank computes: its own subjects against themselves, then against each partner's
/// subjects as their block travels past on the ring (PartnersOf order; each pair of ranks computes one block).
std::vector<std::vector<Eigen::MatrixXd>> RingBlocks(const std::vector<float>& own, std::int64_t n, std::int64_t count, std::int64_t maxRows, std::int64_t V,
                                                     const std::vector<float>& reference, const std::vector<std::int64_t>& offsets,
                                                     const std::vector<int>& partners) {
  const int rank = ranks::Rank();
  const int P = ranks::Size();
  std::vector<std::vector<Eigen::MatrixXd>> blocks;
  std::vector<float> held(static_cast<std::size_t>(maxRows * V), 0.0f);
  std::copy(own.begin(), own.end(), held.begin());
  blocks.emplace_back();
  kernels::RegionKernelBlocks(own.data(), count, own.data(), count, V, reference.data(), offsets, true, blocks.back());
  std::size_t next = 1;
  for (int s = 1; s <= P / 2; ++s) {
    ranks::RingShift(held, maxRows, V);
    const int q = (rank - s + P) % P;
    if (next >= partners.size() || partners[next] != q) continue;
    ++next;
    blocks.emplace_back();
    kernels::RegionKernelBlocks(own.data(), count, held.data(), BlockStart(n, q + 1, P) - BlockStart(n, q, P), V, reference.data(), offsets, false,
                                blocks.back());
  }
  return blocks;
}

/// Rank 0 places its own blocks and every other rank's (received region by region) into the n x n kernels.
void AssembleOnRankZero(std::vector<std::vector<Eigen::MatrixXd>> blocks, const std::vector<int>& partners, std::int64_t n, std::size_t R,
                        kernels::KernelSet& set) {
  const int P = ranks::Size();
  set.kernels.resize(R);
  for (auto& K : set.kernels) K.resize(n, n);
  auto place = [&](int p, int q, std::size_t r, const Eigen::MatrixXd& block) {
    const auto ap = BlockStart(n, p, P), aq = BlockStart(n, q, P);
    set.kernels[r].block(ap, aq, block.rows(), block.cols()) = block;
    if (p != q) set.kernels[r].block(aq, ap, block.cols(), block.rows()) = block.transpose();
  };
  for (std::size_t k = 0; k < partners.size(); ++k)
    for (std::size_t r = 0; r < R; ++r) place(0, partners[k], r, blocks[k][r]);
  blocks.clear();
  Eigen::MatrixXd incoming;
  for (int p = 1; p < P; ++p)
    for (int q : PartnersOf(p, P)) {
      incoming.resize(BlockStart(n, p + 1, P) - BlockStart(n, p, P), BlockStart(n, q + 1, P) - BlockStart(n, q, P));
      for (std::size_t r = 0; r < R; ++r) {
        ranks::Receive(incoming.data(), static_cast<std::int64_t>(incoming.size()) * 8, p, ranks::kTagBlock);
        place(p, q, r, incoming);
      }
    }
}
}  // namespace

/// Every rank's part of one distributed kernel stage. Rank 0 passes its inputs and gets the kernel
/// set; the other ranks pass nullptr (they rebuild the inputs from `study`) and get nothing.
/// With `own` the kernels stay on their owners (KeepKernelsOnOwners): each rank gets its share in `shard`.
/// Returns false on the other ranks when some rank failed (rank 0 throws instead).
bool RunStage(const StageInputs* given, const config::StudyConfig* study, int sourceIndex, std::exception_ptr studyFailure, kernels::KernelSet* out,
              kernels::RegionKernelReport* report, const StageInputs* prepared, std::exception_ptr preparedFailure, bool own,
              std::unique_ptr<gram::KernelShard>* shard) {
  const int rank = ranks::Rank();
  const int P = ranks::Size();
  const auto start = Clock::now();

  // 1. The inputs, and that every rank sees the same cohort.
  StageInputs rebuilt;
  std::exception_ptr failure = studyFailure;
  if (!given && !failure && !prepared) {
    try {
      rebuilt = RebuildInputs(*study, sourceIndex);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (!given && !failure && prepared) failure = preparedFailure;
  const StageInputs& in = given ? *given : prepared ? *prepared : rebuilt;
  char digest[33] = {};
  std::int64_t n = 0;
  if (rank == 0) {
    const std::string d = CohortDigest(in.ids, in.paths);
    std::copy(d.begin(), d.end(), digest);
    n = static_cast<std::int64_t>(in.ids.size());
  }
  ranks::Broadcast(digest, 33);
  ranks::Broadcast(&n, sizeof n);
  if (rank != 0 && !failure && CohortDigest(in.ids, in.paths) != digest)
    failure = std::make_exception_ptr(std::runtime_error(fmt::format("rank {} sees another cohort than rank 0 (different subjects or image paths)", rank)));
  if (ranks::AnyFailure(failure)) return false;

  // 2. Each rank reads its own subjects.
  const auto t0 = Clock::now();
  const std::int64_t first = BlockStart(n, rank, P), count = BlockStart(n, rank + 1, P) - first;
  std::int64_t maxRows = 0;
  for (int p = 0; p < P; ++p) maxRows = std::max(maxRows, BlockStart(n, p + 1, P) - BlockStart(n, p, P));
  kernels::SubjectRows rows;
  try {
    const auto b = in.ids.begin() + first, pb = in.paths.begin() + first;
    rows = kernels::ReadSubjectRows({b, b + count}, {pb, pb + count}, in.regions, in.options);
  } catch (...) {
    failure = std::current_exception();
  }
  if (ranks::AnyFailure(failure)) return false;
  const double readSeconds = Since(t0);

  // 3. The non-finite rule over the whole cohort, and the reference row from rank 0 (subject 0).
  const auto t1 = Clock::now();
  const std::int64_t V = rows.columns;
  ranks::SumInPlace(rows.nonFiniteCount.data(), V);
  std::int64_t nonZero[2] = {rows.nonZeroInsideAtlas, rows.nonZeroOutsideAtlas};
  ranks::SumInPlace(nonZero, 2);
  std::vector<std::int64_t> dropped;
  kernels::KernelSet set = kernels::RegionKernelHeader(in.ids, in.regions, rows.nonFiniteCount, in.options.nanPolicy, dropped);
  for (std::int64_t i = 0; i < count; ++i)
    for (auto c : dropped) rows.data[static_cast<std::size_t>(i * V + c)] = 0.0f;
  std::vector<float> reference(static_cast<std::size_t>(V));
  if (rank == 0) std::copy(rows.data.begin(), rows.data.begin() + V, reference.begin());
  ranks::Broadcast(reference.data(), V * static_cast<std::int64_t>(sizeof(float)));

  // 4. The ring: own block and one travelling block per rank.
  const auto offsets = kernels::RegionColumnOffsets(in.regions);
  const std::size_t R = offsets.size() - 1;
  const auto partners = PartnersOf(rank, P);
  std::vector<std::vector<Eigen::MatrixXd>> blocks = RingBlocks(rows.data, n, count, maxRows, V, reference, offsets, partners);
  rows.data = {};

  // 5. Rank 0 gathers the intensity scales and the counts, and the blocks (region by region) unless the kernels
  // stay on their owners.
  std::vector<double> scales(in.options.intensity == kernels::IntensityScaling::None ? 0 : static_cast<std::size_t>(n));
  if (!scales.empty()) {
    std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P));
    for (int p = 0; p < P; ++p) {
      displs[static_cast<std::size_t>(p)] = static_cast<int>(BlockStart(n, p, P));
      counts[static_cast<std::size_t>(p)] = static_cast<int>(BlockStart(n, p + 1, P) - BlockStart(n, p, P));
    }
    ranks::Gather(rows.intensityScale.data(), static_cast<int>(count), scales.data(), counts, displs);
  }
  // Rank 0's set and report, once the kernels are where they stay (the exclusions are in the report already).
  const auto finish = [&](kernels::RegionKernelReport& rep) {
    set.intensityScale = std::move(scales);
    set.nonZeroInsideAtlas = nonZero[0];
    set.nonZeroOutsideAtlas = nonZero[1];
    rep.readSeconds = readSeconds;
    rep.productSeconds = Since(t1);
    rep.subjectBlocks = static_cast<std::size_t>(P);
    rep.dataBytes = static_cast<std::uint64_t>(n * V) * sizeof(float);
    rep.peakDataBytes = static_cast<std::uint64_t>(2 * maxRows * V) * sizeof(float);
    rep.droppedVoxels = static_cast<std::int64_t>(std::count_if(rows.nonFiniteCount.begin(), rows.nonFiniteCount.end(), [](std::int32_t c) { return c > 0; }));
    rep.ranks = P;
    rep.totalSeconds = Since(start);
    *out = std::move(set);
  };
  if (own) {
    kernels::RegionKernelReport unused;
    kernels::RegionKernelReport& rep = report ? *report : unused;
    rep = kernels::RegionKernelReport{};
    const bool ok = KeepKernelsOnOwners(in, n, count, partners, blocks, set, &rep, *shard);  // rank 0 throws a failure instead
    if (rank != 0) return ok;
    finish(rep);
    return true;
  }
  if (rank != 0) {
    for (const auto& b : blocks)
      for (const auto& K : b) ranks::Send(K.data(), static_cast<std::int64_t>(K.size()) * 8, 0, ranks::kTagBlock);
    return true;
  }
  AssembleOnRankZero(std::move(blocks), partners, n, R, set);
  kernels::RegionKernelReport& rep = *report;
  rep = kernels::RegionKernelReport{};
  kernels::ExcludeEmptyRegions(set, rep);
  finish(rep);
  return true;
}


}  // namespace ranked

using namespace ranked;

kernels::KernelSet DistributedRegionKernels(int sourceIndex, const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths,
                                            const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options,
                                            kernels::RegionKernelReport* report, std::shared_ptr<ranks::RankOwners>* owners) {
  const int P = ranks::Size();
  const auto n = static_cast<std::uint64_t>(imagePaths.size());
  if (n == 0) throw InputError("input:EmptyCohort", "kernels", "no subject to read: the cohort is empty");
  const auto V = static_cast<std::uint64_t>(kernels::RegionColumnOffsets(regions).back());
  const std::uint64_t budget = Budget(options), perRank = 2 * ((n + static_cast<std::uint64_t>(P) - 1) / static_cast<std::uint64_t>(P)) * V * sizeof(float);
  spdlog::info("kernels: {:.1f} MiB of subject data exceed the per-rank budget of {:.1f} MiB (kernels.memory_budget_mb); distributed over {} ranks "
               "(each decodes its own ~{} subjects; kernel blocks by a ring exchange, {:.1f} MiB of subject data per rank)",
               static_cast<double>(n * V * sizeof(float)) / 1048576.0, static_cast<double>(budget) / 1048576.0, P, n / static_cast<std::uint64_t>(P),
               static_cast<double>(perRank) / 1048576.0);
  if (perRank > budget)
    spdlog::warn("kernels: each rank holds two subject blocks ({:.1f} MiB), more than the budget of {:.1f} MiB; run with more ranks to stay within it",
                 static_cast<double>(perRank) / 1048576.0, static_cast<double>(budget) / 1048576.0);
  ranks::Instruct(owners ? kOwnKernels : kKernels, sourceIndex);
  StageInputs in{subjectIds, imagePaths, regions, options};
  kernels::RegionKernelReport local;
  kernels::RegionKernelReport& rep = report ? *report : local;
  kernels::KernelSet set;
  std::unique_ptr<gram::KernelShard> shard;
  RunStage(&in, nullptr, sourceIndex, nullptr, &set, &rep, nullptr, nullptr, owners != nullptr, &shard);
  rep.rankBudgetBytes = budget;
  if (owners)
    *owners = ranks::RankOwners::Make(std::move(shard), set.Size(), static_cast<Eigen::Index>(n), set.ownedCompact, set.compact.centred);
  spdlog::info("kernels: distributed kernel stage on {} ranks: reading {:.2f} s, products and {} {:.2f} s", P, rep.readSeconds,
               owners ? "handing each kernel to its owner" : "gathering", rep.productSeconds);
  return set;
}

}  // namespace neuromkl::pipeline
