// neuromkl command line: run, batch, merge, validate, simulate, predict. Exit codes: 0 success, 1 failure while
// running, 2 bad config or input (README "Exit codes").
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/config/batch_config.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/ranks/ranks.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/pipeline/mpi_kernels.hpp"
#include "neuromkl/pipeline/predict.hpp"
#include "neuromkl/pipeline/study_context.hpp"
#include "neuromkl/pipeline/study_run.hpp"

using namespace neuromkl;

namespace {
/// --threads: an integer in [0, 4096]. "two" is "not an integer", not "out of range" (CLI11's Range
/// checks the number before anything says it is one).
const CLI::Validator kThreadCount(
    [](std::string& text) -> std::string {
      int value = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
        if (ec == std::errc::result_out_of_range) return "\"" + text + "\" is out of range [0, 4096]";
        return "\"" + text + "\" is not an integer (expected a thread count in [0, 4096]; 0 = all cores)";
      }
      if (value < 0 || value > 4096) return "\"" + text + "\" is out of range [0, 4096]";
      return std::string();
    },
    "INT in [0, 4096]", "ThreadCount");

/// The first argument that is not a flag, if it is not a subcommand: a message with a did-you-mean.
std::optional<std::string> UnknownSubcommand(int argc, char** argv, const CLI::App& app) {
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;
    if (std::find(names.begin(), names.end(), arg) != names.end()) return std::nullopt;
    std::string message = "unknown command \"" + arg + "\"";
    const std::string hint = DidYouMean(arg, names);
    message += hint.empty() ? "; the commands are " + Join(names, ", ") : hint;
    return message;
  }
  return std::nullopt;
}

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

int main(int argc, char** argv) {
  CLI::App app{"neuromkl: which brain regions predict a target? Multiple kernel learning on atlas regions of NIfTI cohorts."};
  app.require_subcommand(0, 1);
  app.fallthrough();  // global flags (-q, -v) may follow the subcommand
  bool quiet = false, verbose = false, version = false;
  app.add_flag("--version", version, "print the version of neuromkl and of the libraries it was built with");
  app.add_flag("-q,--quiet", quiet, "only warnings and errors");
  app.add_flag("-v,--verbose", verbose, "debug output");

  auto* run = app.add_subcommand("run", "run a study: kernels, learners, results in an output folder (under mpirun, the kernel stage is spread over "
                                        "the ranks when the subject data exceed kernels.memory_budget_mb)");
  std::string runStudy, outDir;
  int threads = -1;
  bool force = false;
  run->add_option("STUDY.json", runStudy, "study file")->required();
  run->add_option("--out", outDir, "output folder (default: /output/dir of the study)");
  run->add_option("--threads", threads, "worker threads (0 = all cores; default: /threads of the study)")->check(kThreadCount);
  run->add_flag("--force", force, "replace an existing output folder (the old one is kept until the new run succeeded)");
  std::string cacheDir;
  run->add_option("--cache-dir", cacheDir,
                  "kernel cache folder (default: /output/cache_dir of the study, .neuromkl_cache beside it); e.g. for a study in a read-only "
                  "folder such as an installed example");

  auto* batch = app.add_subcommand("batch", "run every study of a batch file; reruns skip completed studies and resume interrupted ones "
                                            "(under mpirun, studies and permutation blocks are spread over the ranks)");
  std::string batchFile, shard;
  batch->add_option("BATCH.json", batchFile, "batch file")->required();
  batch->add_option("--threads", threads, "worker threads per process (0 = all cores)")->check(kThreadCount);
  batch->add_option("--shard", shard, "i/N: run only the i-th of N disjoint parts (0 <= i < N), e.g. one per job-array task; then `merge`");
  batch->add_flag("--force", force, "redo completed studies too");

  auto* merge = app.add_subcommand("merge", "build the batch summary (TSV, JSON, index.html) from the studies completed so far");
  std::string mergeFile;
  merge->add_option("BATCH.json", mergeFile, "batch file")->required();

  auto* validate = app.add_subcommand("validate", "check a study or batch file and its inputs and print a summary, without computing");
  std::string validateStudy;
  validate->add_option("STUDY.json", validateStudy, "study or batch file")->required();
  bool validateDeep = false;
  validate->add_flag("--deep", validateDeep, "also decode every subject image (slower; catches truncated data and images with no finite voxel)");

  auto* simulate = app.add_subcommand("simulate", "write a synthetic cohort on the AAL 2 mm grid with known signal regions");
  pipeline::SimulateOptions sim;
  std::string task = "classification", signal;
  simulate->add_option("--out", sim.outDir, "output folder")->required();
  simulate->add_option("--subjects", sim.subjects, "labelled subjects")->capture_default_str();
  simulate->add_option("--unlabelled", sim.unlabelled, "extra subjects with target n/a")->capture_default_str();
  simulate->add_option("--task", task, "classification or regression")->check(CLI::IsMember({"classification", "regression"}))->capture_default_str();
  simulate->add_option("--signal", signal,
                       "comma-separated AAL region names carrying the effect (default: Hippocampus_L,Precuneus_R,Frontal_Mid_L; \"none\": no effect "
                       "in these images); with --classes k > 2, k groups separated by ';', group i for the i-th class (A, B, ...), e.g. "
                       "\"Hippocampus_L,Amygdala_L;Precuneus_R;Frontal_Mid_L\"");
  simulate->add_option("--classes", sim.classes, "number of classes (classification); > 2 writes a multiclass cohort with class-specific signal regions")
      ->check(CLI::Range(2, 26))
      ->capture_default_str();
  simulate->add_option("--positive-fraction", sim.positiveFraction, "binary classification: share of subjects in the positive class (default: half)");
  simulate->add_option("--effect", sim.effect, "effect size in noise-SD units")->capture_default_str();
  simulate->add_option("--noise", sim.noise, "noise SD")->capture_default_str();
  simulate->add_option("--nan-fraction", sim.nanFraction, "fraction of brain voxels set to NaN per image")->capture_default_str();
  simulate->add_option("--downsample", sim.downsample, "1 = AAL 2 mm grid; k = a coarser 2k mm grid")->capture_default_str();
  simulate->add_option("--seed", sim.seed, "random seed")->capture_default_str();
  bool uncompressed = false;
  simulate->add_flag("--uncompressed", uncompressed, "write .nii instead of .nii.gz");
  std::string ageRegions, signalB, connectivitySignal;
  simulate->add_option("--age-regions", ageRegions, "comma-separated AAL regions driven by an \"age\" column correlated with the target (a confound)");
  simulate->add_option("--age-effect", sim.ageEffect, "voxel shift per age SD (8 years), in noise-SD units")->capture_default_str();
  simulate->add_option("--age-target-correlation", sim.ageTargetCorrelation, "correlation of age with the standardised target")->capture_default_str();
  simulate->add_flag("--second-modality", sim.secondModality, "also write a second image per subject (images_b/, column image_b)");
  simulate->add_option("--signal-b", signalB, "comma-separated AAL regions carrying the target effect in the second modality");
  simulate->add_option("--clinical-effect", sim.clinicalEffect, "write a \"clinical\" column = effect * standardised target + N(0, 1)");
  simulate->add_option("--suppressor", sim.suppressorRegion,
                       "an AAL region sharing a subject-specific noise with the signal regions but no effect (a suppressor: large weights, no pattern)");
  simulate->add_option("--suppressor-noise", sim.suppressorNoise, "SD of the shared noise of --suppressor")->capture_default_str();
  simulate->add_option("--connectivity", sim.connectivityNodes,
                       "also write a connectivity matrix per subject with this many nodes (connectomes/, column \"connectome\", nodes.tsv with 4 networks)");
  simulate->add_option("--connectivity-signal", connectivitySignal,
                       "comma-separated node names (node01, node02, ...) whose connections carry the target effect");

  auto* predict = app.add_subcommand("predict", "apply a study's exported model (results/<study>/model) to new subjects: predictions.tsv and summary.json");
  pipeline::PredictOptions predictOptions;
  predict->add_option("MODEL_DIR", predictOptions.modelDir, "model folder: results/<study>/model (every learner), model/<Learner> or model/<Learner>/folds/<k>")
      ->required();
  predict->add_option("TABLE", predictOptions.input, "subjects table (.tsv/.csv with the model's id and image columns) or a study file (its table or BIDS dataset)")
      ->required();
  predict->add_option("--out", predictOptions.outDir, "output folder (default: predictions_<study> beside TABLE)");
  predict->add_flag("--force", predictOptions.force, "replace an existing output folder");
  predict->add_option("--threads", threads, "worker threads (0 = all cores)")->check(kThreadCount);

  if (const auto unknown = UnknownSubcommand(argc, argv, app)) {
    std::cerr << "error: " << *unknown << "\nRun with --help for more information.\n";
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }
  auto logger = spdlog::stderr_color_mt("neuromkl");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  spdlog::set_level(quiet ? spdlog::level::warn : verbose ? spdlog::level::debug : spdlog::level::info);
  SetProgressEnabled(!quiet);

  if (version) {
    for (const auto& [name, v] : pipeline::Versions()) std::cout << name << " " << v << "\n";
    // Where the built-in atlases and templates are read from (an installation's share/neuromkl, or why not).
    const auto data = atlas::FindDataDir();
    std::cout << "data " << (data.dir.empty() ? "not found" : data.dir) << " (" << data.how << ")\n";
    return kExitOk;
  }
  try {
    if (*run) {
      ranks::Session mpi(argc, argv);
      // Under mpirun, ranks > 0 only help with a kernel stage whose data exceed one rank's budget.
      if (ranks::Active() && ranks::Rank() != 0) return pipeline::ServeRunKernels(runStudy, threads);
      const pipeline::KernelRanks kernelRanks;  // rank 0: tells the other ranks to stop when the run ends, however it ends
      config::StudyConfig study = config::LoadStudyConfig(runStudy);
      if (!cacheDir.empty()) study.output.cacheDir = std::filesystem::absolute(cacheDir).lexically_normal().string();
      pipeline::RunOptions options;
      options.outDir = outDir;
      options.threads = threads;
      options.force = force;
      const auto outcome = pipeline::RunStudy(study, options);
      std::cout << "Nested cross-validation:\n";
      for (const auto& l : outcome.summary) std::cout << "  " << l << "\n";
      std::cout << "Results: " << outcome.outputDir << "\n";
      return kExitOk;
    }
    if (*batch) {
      ranks::Session mpi(argc, argv);
      RequireBatchFile(batchFile, "batch");
      const config::BatchConfig b = config::LoadBatchConfig(batchFile);
      pipeline::BatchOptions options;
      options.threads = threads;
      options.force = force;
      if (!shard.empty()) pipeline::ParseShard(shard, options.shard, options.shards);
      const auto outcome = pipeline::RunBatch(b, options);
      if (ranks::Rank() != 0) return kExitOk;
      std::cout << fmt::format("Batch {}: {} completed, {} skipped (already complete), {} failed{}\n", b.name, outcome.completed, outcome.skipped,
                               outcome.failed, options.shards > 1 ? fmt::format(" (shard {}/{})", options.shard, options.shards) : std::string());
      for (const auto& s : outcome.studies)
        if (s.status == "failed") std::cout << "  failed: " << s.name << ": " << s.error << "\n";
      if (!outcome.summaryPath.empty()) std::cout << "Summary: " << outcome.summaryPath << "\n";
      else std::cout << "Results: " << b.outputDir << " (run `neuromkl merge " << batchFile << "` when every shard is done)\n";
      return outcome.exitCode;
    }
    if (*merge) {
      RequireBatchFile(mergeFile, "merge");
      const config::BatchConfig b = config::LoadBatchConfig(mergeFile);
      const auto m = pipeline::MergeBatch(b);
      std::cout << fmt::format("Batch {}: {} completed, {} failed, {} not run\nSummary: {}\nPage: {}\n", b.name, m.completed, m.failed, m.missing, m.tsv, m.html);
      return m.failed > 0 || m.missing > 0 ? kExitFailure : kExitOk;
    }
    if (*validate) {
      if (config::IsBatchFile(validateStudy)) {
        int problems = 0;
        const config::BatchConfig b = config::LoadBatchConfig(validateStudy);
        std::cout << pipeline::ValidateBatch(b, problems, validateDeep);
        return problems > 0 ? kExitBadInput : kExitOk;
      }
      const config::StudyConfig study = config::LoadStudyConfig(validateStudy);
      std::cout << pipeline::ValidateStudy(study, validateDeep);
      return kExitOk;
    }
    if (*predict) {
      const pipeline::ThreadLimit limit(threads > 0 ? threads : 0);
      const auto outcome = pipeline::Predict(predictOptions);
      for (const auto& l : outcome.lines) std::cout << l << "\n";
      std::cout << "Predictions: " << outcome.outputDir << "/predictions.tsv\n";
      return kExitOk;
    }
    if (*simulate) {
      sim.task = task == "regression" ? learners::Task::Regression : learners::Task::Classification;
      if (!signal.empty() && sim.classes > 2)
        for (const auto& group : Split(signal, ';')) sim.classSignal.push_back(Split(group, ','));
      else if (!signal.empty())
        sim.signalRegions = signal == "none" ? std::vector<std::string>{} : Split(signal, ',');
      if (!ageRegions.empty()) sim.ageRegions = Split(ageRegions, ',');
      if (!signalB.empty()) sim.signalRegionsB = Split(signalB, ',');
      if (!connectivitySignal.empty()) sim.connectivitySignal = Split(connectivitySignal, ',');
      sim.compress = !uncompressed;
      const std::string study = pipeline::Simulate(sim);
      std::cout << "Simulated cohort: " << sim.outDir << "\nStudy file: " << study << "\n";
      return kExitOk;
    }
    std::cout << app.help();
    return kExitOk;
  } catch (const Error& e) {
    spdlog::error("{} [{}]", e.what(), e.code());
    return e.ExitCode();
  } catch (const std::exception& e) {
    spdlog::error("unexpected failure: {}", e.what());
    return kExitFailure;
  }
}
