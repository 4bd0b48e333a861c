// Scale-out of a batch over MPI ranks (docs/batch.md). Rank 0 schedules: it plans the units
// (one kernel computation per distinct kernel input, every missing permutation block, every
// study), hands them out on request (dynamic load balancing) phase by phase, and computes units
// itself on a helper thread while it waits; only rank 0's main thread calls MPI (FUNNELED).
// Units communicate through the batch folder (kernel cache, checkpoint blocks, study folders),
// which must be on a file system all ranks see; the messages carry only unit ids and statuses.
// Every unit is deterministic and independent of the thread count, so results equal a
// single-process run.
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <thread>

#include <spdlog/spdlog.h>

#include "batch_units.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/pipeline/mpi_kernels.hpp"
#include "neuromkl/ranks/ranks.hpp"

namespace neuromkl::pipeline {

namespace {
using ranks::kTagAssign;
using ranks::kTagRequest;

/// Runs one unit; returns 0 or the exit code of a failed study. Never throws.
int RunUnit(const config::BatchConfig& batch, const Unit& u, const BatchOptions& options, std::unique_ptr<StudyContext>& ctx) {
  const auto index = static_cast<std::size_t>(u.study);
  try {
    switch (u.kind) {
      case UnitKind::Kernels:
        RunKernelUnit(batch, index, options);
        return 0;
      case UnitKind::PermutationBlock:
        RunPermutationUnit(batch, index, u.block, options, ctx);
        return 0;
      case UnitKind::Study:
        return RunStudyUnit(batch, index, options).exitCode;
      case UnitKind::Held:  // rank 0 runs the study; this rank holds a share of its kernels and answers its requests
        ctx.reset();        // another study's kernels, kept for its permutation blocks: not beside this one's share
        return ServeStudyKernels(EffectiveStudy(batch, index, options));
    }
  } catch (const std::exception& e) {
    // A failed kernel or permutation unit fails again, and is recorded, in its study unit.
    spdlog::warn("batch: unit of study {} failed: {}", batch.studies[index].name, e.what());
  }
  return 0;
}

}  // namespace

BatchOutcome RunBatchMpi(const config::BatchConfig& batch, const BatchOptions& options, const std::vector<std::size_t>& todo) {
  BatchOutcome out;
  const int size = ranks::Size();
  if (ranks::Rank() != 0) {  // worker: ask, run, report, until told to stop
    int report[4] = {-1, 0, 0, 0};
    std::unique_ptr<StudyContext> ctx;
    for (;;) {
      ranks::SendInts(report, 4, 0, kTagRequest);
      int a[3];
      ranks::ReceiveInts(a, 3, 0, kTagAssign);
      if (a[0] < 0) break;
      const Unit u{static_cast<UnitKind>(a[0]), a[1], a[2]};
      report[0] = a[0], report[1] = a[1], report[2] = a[2];
      report[3] = RunUnit(batch, u, options, ctx);
    }
    return out;
  }

  std::vector<std::size_t> held;
  const auto phases = PlanUnits(batch, options, todo, &held);
  spdlog::info("batch: {} ranks; {} kernel computations, {} permutation blocks, {} studies{}", size, phases[0].size(), phases[1].size(), phases[2].size(),
               held.empty() ? std::string() : fmt::format(", then {} studies whose kernels exceed one rank's budget (held by every rank)", held.size()));
  std::deque<std::size_t> heldQueue(held.begin(), held.end());
  std::size_t phase = 0;
  std::deque<Unit> queue(phases[0].begin(), phases[0].end());
  int outstanding = 0, stopped = 0;
  const int workers = size - 1;
  std::vector<int> waiting;
  std::map<int, int> studyStatus;  // study index -> exit code
  // Rank 0 computes too, on a helper thread that makes no MPI call.
  std::thread local;
  std::atomic<bool> localDone{false};
  Unit localUnit;
  int localStatus = 0;
  std::unique_ptr<StudyContext> localCtx;
  auto finished = [&](const Unit& u, int status) {
    --outstanding;
    if (u.kind == UnitKind::Study) studyStatus[u.study] = status;
  };
  auto assign = [&](int rank) {
    const Unit u = queue.front();
    queue.pop_front();
    ++outstanding;
    const int a[3] = {static_cast<int>(u.kind), u.study, u.block};
    ranks::SendInts(a, 3, rank, kTagAssign);
  };
  auto stop = [&](int rank) {
    const int a[3] = {-1, 0, 0};
    ranks::SendInts(a, 3, rank, kTagAssign);
    ++stopped;
  };
  for (;;) {
    if (local.joinable() && localDone) {
      local.join();
      finished(localUnit, localStatus);
    }
    while (queue.empty() && outstanding == 0 && phase < phases.size()) {  // a phase starts when the previous one is done
      if (++phase < phases.size()) queue.assign(phases[phase].begin(), phases[phase].end());
    }
    const bool unitsDone = phase >= phases.size();
    // Then the studies whose kernels no rank can hold alone, one at a time, once every rank waits for work: the other
    // ranks hold a share of its kernels while rank 0 runs it (MPI from its fold tasks' threads, one call at a time).
    if (unitsDone && !heldQueue.empty() && !local.joinable() && static_cast<int>(waiting.size()) == workers) {
      const std::size_t i = heldQueue.front();
      heldQueue.pop_front();
      for (const int rank : waiting) {
        const int a[3] = {static_cast<int>(UnitKind::Held), static_cast<int>(i), 0};
        ranks::SendInts(a, 3, rank, kTagAssign);
        ++outstanding;
      }
      waiting.clear();
      localCtx.reset();         // another study's kernels, kept for its permutation blocks
      const KernelRanks ranks;  // the study's kernel stages may use every rank; stops them when it ends
      studyStatus[static_cast<int>(i)] = RunStudyUnit(batch, i, options).exitCode;
      continue;
    }
    const bool allDone = unitsDone && heldQueue.empty();
    while (!waiting.empty() && (!queue.empty() || allDone)) {
      const int rank = waiting.back();
      waiting.pop_back();
      if (allDone) stop(rank);
      else assign(rank);
    }
    if (!local.joinable() && !queue.empty()) {
      localUnit = queue.front();
      queue.pop_front();
      ++outstanding;
      localDone = false;
      local = std::thread([&] {
        localStatus = RunUnit(batch, localUnit, options, localCtx);
        localDone = true;
      });
    }
    if (allDone && stopped == workers && !local.joinable()) break;
    const std::optional<int> source = ranks::Waiting(kTagRequest);
    if (!source) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    int report[4];
    ranks::ReceiveInts(report, 4, *source, kTagRequest);
    if (report[0] >= 0) finished({static_cast<UnitKind>(report[0]), report[1], report[2]}, report[3]);
    waiting.push_back(*source);  // served above, now or when work appears
  }
  for (std::size_t i : todo) {
    const auto& s = batch.studies[i];
    const int code = studyStatus.count(static_cast<int>(i)) ? studyStatus.at(static_cast<int>(i)) : 1;
    out.studies.push_back({s.name, code == 0 ? "completed" : "failed", code == 0 ? "" : StudyFailure(batch, s.name), code});
  }
  return out;
}
}  // namespace neuromkl::pipeline
