#include "neuromkl/pipeline/commands.hpp"

#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/config/batch_config.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/pipeline/mpi_kernels.hpp"
#include "neuromkl/pipeline/study_context.hpp"
#include "neuromkl/pipeline/study_run.hpp"
#include "neuromkl/ranks/ranks.hpp"

namespace neuromkl::pipeline {

namespace {
/// `batch`/`merge` given a study file: say so, instead of complaining about its keys.
void RequireBatchFile(const std::string& path, const char* command) {
  if (config::IsBatchFile(path)) return;
  bool study = false;
  try {
    (void)config::LoadStudyConfig(path);
    study = true;
  } catch (const Error&) {
  }
  if (study) {
    std::string why = "this is a study file, not a batch file (which lists studies under \"studies\" or \"matrix\"): run it with `neuromkl run ";
    why += path;
    why += "`, or name it in a batch file; `neuromkl ";
    why += command;
    why += "` takes a batch file";
    throw ConfigError("config:NotBatch", path, why);
  }
}
}  // namespace

int RunCommand(const RunCommandOptions& o, int argc, char** argv) {
  ranks::Session mpi(argc, argv);
  // Under mpirun, ranks > 0 only help with a kernel stage whose data exceed one rank's budget.
  if (ranks::Active() && ranks::Rank() != 0) return ServeRunKernels(o.study, o.threads);
  const KernelRanks kernelRanks;  // rank 0: tells the other ranks to stop when the run ends, however it ends
  config::StudyConfig study = config::LoadStudyConfig(o.study);
  if (!o.cacheDir.empty()) study.output.cacheDir = std::filesystem::absolute(o.cacheDir).lexically_normal().string();
  RunOptions options;
  options.outDir = o.outDir;
  options.threads = o.threads;
  options.force = o.force;
  const auto outcome = RunStudy(study, options);
  std::cout << "Nested cross-validation:\n";
  for (const auto& l : outcome.summary) std::cout << "  " << l << "\n";
  std::cout << "Results: " << outcome.outputDir << "\n";
  return kExitOk;
}

int BatchCommand(const BatchCommandOptions& o, int argc, char** argv) {
  ranks::Session mpi(argc, argv);
  RequireBatchFile(o.batchFile, "batch");
  const config::BatchConfig b = config::LoadBatchConfig(o.batchFile);
  BatchOptions options;
  options.threads = o.threads;
  options.force = o.force;
  if (!o.shard.empty()) ParseShard(o.shard, options.shard, options.shards);
  const auto outcome = RunBatch(b, options);
  if (ranks::Rank() != 0) return kExitOk;
  std::cout << fmt::format("Batch {}: {} completed, {} skipped (already complete), {} failed{}\n", b.name, outcome.completed, outcome.skipped,
                           outcome.failed, options.shards > 1 ? fmt::format(" (shard {}/{})", options.shard, options.shards) : std::string());
  for (const auto& s : outcome.studies)
    if (s.status == "failed") std::cout << "  failed: " << s.name << ": " << s.error << "\n";
  if (!outcome.summaryPath.empty()) std::cout << "Summary: " << outcome.summaryPath << "\n";
  else std::cout << "Results: " << b.outputDir << " (run `neuromkl merge " << o.batchFile << "` when every shard is done)\n";
  return outcome.exitCode;
}

int MergeCommand(const std::string& batchFile) {
  RequireBatchFile(batchFile, "merge");
  const config::BatchConfig b = config::LoadBatchConfig(batchFile);
  const auto m = MergeBatch(b);
  std::cout << fmt::format("Batch {}: {} completed, {} failed, {} not run\nSummary: {}\nPage: {}\n", b.name, m.completed, m.failed, m.missing, m.tsv, m.html);
  return m.failed > 0 || m.missing > 0 ? kExitFailure : kExitOk;
}

int ValidateCommand(const std::string& file, bool deep) {
  if (config::IsBatchFile(file)) {
    int problems = 0;
    const config::BatchConfig b = config::LoadBatchConfig(file);
    std::cout << ValidateBatch(b, problems, deep);
    return problems > 0 ? kExitBadInput : kExitOk;
  }
  const config::StudyConfig study = config::LoadStudyConfig(file);
  std::cout << ValidateStudy(study, deep);
  return kExitOk;
}

int PredictCommand(const PredictOptions& options, int threads) {
  const ThreadLimit limit(threads > 0 ? threads : 0);
  const auto outcome = Predict(options);
  for (const auto& l : outcome.lines) std::cout << l << "\n";
  std::cout << "Predictions: " << outcome.outputDir << "/predictions.tsv\n";
  return kExitOk;
}

int VersionCommand() {
  for (const auto& [name, v] : Versions()) std::cout << name << " " << v << "\n";
  // Where the built-in atlases and templates are read from (an installation's share/neuromkl, or why not).
  const auto data = atlas::FindDataDir();
  std::cout << "data " << (data.dir.empty() ? "not found" : data.dir) << " (" << data.how << ")\n";
  return kExitOk;
}

int SimulateCommand(SimulateCommandOptions c) {
  auto& sim = c.options;
  sim.task = c.task == "regression" ? learners::Task::Regression : learners::Task::Classification;
  if (!c.signal.empty() && sim.classes > 2)
    for (const auto& group : Split(c.signal, ';')) sim.classSignal.push_back(Split(group, ','));
  else if (!c.signal.empty())
    sim.signalRegions = c.signal == "none" ? std::vector<std::string>{} : Split(c.signal, ',');
  if (!c.ageRegions.empty()) sim.ageRegions = Split(c.ageRegions, ',');
  if (!c.signalB.empty()) sim.signalRegionsB = Split(c.signalB, ',');
  if (!c.connectivitySignal.empty()) sim.connectivitySignal = Split(c.connectivitySignal, ',');
  sim.compress = !c.uncompressed;
  const std::string study = simulate::Simulate(sim);
  std::cout << "Simulated cohort: " << sim.outDir << "\nStudy file: " << study << "\n";
  return kExitOk;
}

}  // namespace neuromkl::pipeline
