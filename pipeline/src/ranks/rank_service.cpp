// The other ranks of `neuromkl run` (or a batch's study) under mpirun: they take part in rank 0's distributed kernel
// stages and answer requests on the kernels they hold, until rank 0 says stop.
#include <algorithm>
#include <array>
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

using namespace ranked;

namespace {
/// The other ranks' side of one study: take part in its kernel stages and answer requests on the kernels they hold,
/// until rank 0 says stop. `study` is null when it could not be read here (`studyFailure`).
int ServeStudy(const std::optional<config::StudyConfig>& study, std::exception_ptr studyFailure) {
  const ThreadLimit limit(study ? study->threads : 0);
  // An images study: its inputs are rebuilt while rank 0 prepares the same (cohort, hashes), not
  // after it asks for the stage (kernels.sources: each source's when it is asked for).
  std::optional<StageInputs> prepared;
  std::exception_ptr preparedFailure;
  if (study && study->kernels.source == config::KernelSource::Images) {
    try {
      prepared = RebuildInputs(*study, -1);
    } catch (...) {
      preparedFailure = std::current_exception();
      prepared.emplace();
    }
  }
  std::unique_ptr<HeldSources::Collected> collected;
  for (;;) {
    const std::array<int, 2> message = ranks::AwaitInstruction();
    if (message[0] == kStop) return kExitOk;
    if (message[0] == kBeginHeldSources) {
      collected = std::make_unique<HeldSources::Collected>();
      continue;
    }
    if (message[0] == kAbandonHeldSources) {
      collected.reset();
      continue;
    }
    std::unique_ptr<gram::KernelShard> shard;
    bool ok = false;
    const bool finish = message[0] == kFinishHeldSources;
    try {
      if (finish) {
        std::vector<std::int64_t> counts;
        bool compact = false, centred = false;
        ok = collected && FinishCollected(*collected, counts, compact, centred, shard);
      } else if (message[0] == kHandedKernels) {
        ok = ReceiveHandedKernels(shard);
      } else if (message[0] == kLoadOwnKernels) {
        ok = LoadOwnedKernels("", shard, nullptr);
      } else {
        const bool usePrepared = prepared && message[1] < 0;
        ok = RunStage(nullptr, study ? &*study : nullptr, message[1], studyFailure, nullptr, nullptr, usePrepared ? &*prepared : nullptr, preparedFailure,
                      message[0] == kOwnKernels, &shard);
      }
    } catch (const std::exception& e) {  // not expected: failures are reported through rank 0
      spdlog::error("kernels: {}", e.what());
    }
    // The kernels stay here: this rank answers rank 0's requests on its share until rank 0 lets go of them. In a study
    // of several sources held by the ranks, each source's share is then kept in `collected` until rank 0 finishes (the
    // study's kernels as one set, served here) or abandons it.
    if (ok && shard) ranks::ServeKernelRequests(*shard);
    if (finish) collected.reset();
    else if (collected && ok && shard) shard->TakeKernels(collected->own, collected->ownCompact);
  }
}
}  // namespace

int ServeRunKernels(const std::string& studyPath, int threads) {
  std::optional<config::StudyConfig> study;
  std::exception_ptr studyFailure;
  try {
    study = config::LoadStudyConfig(studyPath);
    if (threads >= 0) study->threads = threads;
  } catch (...) {
    studyFailure = std::current_exception();  // reported by rank 0, which fails on the same file
  }
  return ServeStudy(study, studyFailure);
}

int ServeStudyKernels(const config::StudyConfig& study) { return ServeStudy(study, nullptr); }



}  // namespace neuromkl::pipeline
