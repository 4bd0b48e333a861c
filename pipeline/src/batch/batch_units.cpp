// The units a batch is made of (kernel computations, permutation blocks, studies), run by the
// single-process runner and by MPI ranks alike; each calls the study's own stages.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "batch_units.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/export/batch_outputs.hpp"
#include "neuromkl/pipeline/mpi_kernels.hpp"
#include "neuromkl/pipeline/study_run.hpp"
#include "neuromkl/pipeline/study_stages.hpp"
#include "neuromkl/ranks/held_kernels.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

namespace {

std::string FailedMarker(const config::BatchConfig& b, const std::string& study) { return b.outputDir + "/status/" + study + ".failed"; }

/// Kernel-stage scratch space of a batch (removed when the batch ends).
std::string ScratchDir(const config::BatchConfig& batch) {
  const std::string dir = batch.outputDir + "/scratch";
  std::error_code ec;
  fs::create_directories(dir, ec);
  return dir;
}

}  // namespace

std::vector<std::size_t> ShardStudies(const config::BatchConfig& batch, const BatchOptions& options) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < batch.studies.size(); ++i)
    if (static_cast<int>(i % static_cast<std::size_t>(options.shards)) == options.shard) out.push_back(i);
  return out;
}

std::string StudyFailure(const config::BatchConfig& batch, const std::string& study) {
  std::ifstream in(FailedMarker(batch, study));
  std::string line;
  std::getline(in, line);
  return line;
}

std::string StudyInputsKey(const config::StudyConfig& study) {
  const Cohort cohort = LoadStudyCohort(study);
  Hasher h;
  h.Update(std::string_view("neuromkl-batch-inputs-v1")).Update(KernelCacheKey(study, cohort)).Update(HashFile(study.subjects.table));
  return h.Hex();
}

std::string StudyOutdated(const config::BatchConfig& batch, const config::BatchStudy& study) {
  const std::string dir = batch.StudyDir(study.name);
  std::error_code ec;
  if (!fs::exists(dir + "/results.json", ec)) return "not run yet";
  const exporting::StudyStamp stamp = exporting::ReadStudyStamp(dir + "/batch_study.json");
  if (stamp.fingerprint != config::StudyFingerprint(study)) return "its configuration changed";
  if (stamp.inputsKey.empty()) return "its stamp does not record the input files it ran on";
  try {
    if (stamp.inputsKey != StudyInputsKey(study.config))
      return "an input file changed since it ran (the subjects table, an image, the atlas, a mask or a kernel/feature file)";
  } catch (const Error& e) {
    return std::string("its inputs cannot be read now: ") + e.what();
  }
  return "";
}

bool StudyComplete(const config::BatchConfig& batch, const config::BatchStudy& study) { return StudyOutdated(batch, study).empty(); }

config::StudyConfig EffectiveStudy(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options) {
  config::StudyConfig s = batch.studies[index].config;
  if (options.threads >= 0) s.threads = options.threads;
  return s;
}

StudyOutcome RunStudyUnit(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options) {
  const auto& s = batch.studies[index];
  StudyOutcome o{s.name, "completed", "", 0};
  try {
    spdlog::info("batch: study {} ({} of {}): {}", s.name, index + 1, batch.studies.size(), s.origin);
    RunOptions ro;
    ro.threads = options.threads;
    ro.force = true;  // an outdated or forced study is replaced only once the new run succeeded
    ro.checkpointDir = batch.CheckpointDir(s.name);
    ro.extraFiles["batch_study.json"] = exporting::StudyStampJson(batch, s, StudyInputsKey(s.config));
    const RunOutcome r = RunStudy(s.config, ro);
    for (const auto& line : r.summary) spdlog::info("  {}", line);
    std::error_code ec;
    fs::remove(FailedMarker(batch, s.name), ec);
  } catch (const Error& e) {
    o.status = "failed";
    o.error = e.what();
    o.exitCode = e.ExitCode();
  } catch (const std::exception& e) {
    o.status = "failed";
    o.error = e.what();
    o.exitCode = 1;
  }
  if (o.status == "failed") {
    spdlog::error("batch: study {} failed: {}", s.name, o.error);
    try {
      std::error_code ec;
      fs::create_directories(batch.outputDir + "/status", ec);
      WriteFileAtomically(FailedMarker(batch, s.name), o.error + "\n", "batch");
    } catch (const Error&) {
    }
  }
  return o;
}

void RunKernelUnit(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options) {
  const config::StudyConfig study = EffectiveStudy(batch, index, options);
  const ThreadLimit limit(study.threads);
  RunKernelStage(study, LoadStudyCohort(study), ScratchDir(batch));  // stores the kernels in the shared cache
}

void RunPermutationUnit(const config::BatchConfig& batch, std::size_t index, int block, const BatchOptions& options,
                        std::unique_ptr<StudyContext>& ctx) {
  const config::StudyConfig study = EffectiveStudy(batch, index, options);
  const ThreadLimit limit(study.threads);
  if (!ctx || ctx->study.name != study.name) {
    // Kept for the study's next block only once complete: a context whose kernel step failed (its kernels
    // partly rounded into the store and freed) must not be reused.
    ctx.reset();
    auto fresh = std::make_unique<StudyContext>(LoadStudyInputs(study));
    AttachKernels(*fresh, ScratchDir(batch));
    ctx = std::move(fresh);
  }
  LoadOrComputePermutationBlock(*ctx, batch.CheckpointDir(study.name), block);
}

std::vector<std::vector<Unit>> PlanUnits(const config::BatchConfig& batch, const BatchOptions& options, const std::vector<std::size_t>& todo,
                                         std::vector<std::size_t>* held) {
  std::vector<std::vector<Unit>> phases(3);
  std::set<std::string> kernelKeys;
  std::map<std::string, bool> exceeds;  // per kernel input: whether its kernels exceed one rank's budget
  for (std::size_t i : todo) {
    const config::StudyConfig study = EffectiveStudy(batch, i, options);
    try {
      const Cohort cohort = LoadStudyCohort(study);
      const std::string key = KernelCacheKey(study, cohort);
      // A study on features has no kernels to hold on the ranks; with the cache on, its kernel unit stores its features
      // (under FeatureCacheKey), which its permutation blocks and its own unit then read instead of the images.
      const std::size_t planned = PlannedKernelCount(study, cohort);
      const bool features = ChooseRepresentation(study, cohort, planned).chosen == config::KernelRepresentation::Features;
      if (held && !features) {
        const std::string budgetKey = key + "|" + std::to_string(study.kernels.memoryBudgetMb);  // the budget is not in the cache key
        if (!exceeds.count(budgetKey)) exceeds[budgetKey] = KernelsExceedRankBudget(study, cohort, planned);
        if (exceeds[budgetKey]) {
          held->push_back(i);
          continue;
        }
      }
      if ((!features || study.kernels.cache) && kernelKeys.insert(features ? FeatureCacheKey(study, cohort) : key).second)
        phases[0].push_back({UnitKind::Kernels, static_cast<int>(i), 0});
    } catch (const Error&) {
      // the study unit will fail with this error and record it
    }
    const int blocks = (study.permutations.count + kPermutationBlock - 1) / kPermutationBlock;
    for (int b = 0; b < blocks; ++b) phases[1].push_back({UnitKind::PermutationBlock, static_cast<int>(i), b});
    phases[2].push_back({UnitKind::Study, static_cast<int>(i), 0});
  }
  return phases;
}

}  // namespace neuromkl::pipeline
