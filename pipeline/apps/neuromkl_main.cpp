// neuromkl command line: run, batch, merge, validate, simulate, predict. Exit codes: 0 success, 1 failure while
// running, 2 bad config or input (README "Exit codes"). The arguments are parsed here; the commands are
// pipeline/src/commands.
#include <algorithm>
#include <charconv>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/pipeline/commands.hpp"

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

/// The options of every command, as the command line fills them.
struct Commands {
  CLI::App* run = nullptr;
  CLI::App* batch = nullptr;
  CLI::App* merge = nullptr;
  CLI::App* validate = nullptr;
  CLI::App* predict = nullptr;
  CLI::App* simulate = nullptr;
  pipeline::RunCommandOptions runOptions;
  pipeline::BatchCommandOptions batchOptions;
  std::string mergeFile, validateFile;
  bool validateDeep = false;
  pipeline::PredictOptions predictOptions;
  int predictThreads = -1;
  pipeline::SimulateCommandOptions simulateOptions;
};

void AddRun(CLI::App& app, Commands& c) {
  auto& o = c.runOptions;
  c.run = app.add_subcommand("run", "run a study: kernels, learners, results in an output folder (under mpirun, the kernel stage is spread over "
                                    "the ranks when the subject data exceed kernels.memory_budget_mb)");
  c.run->add_option("STUDY.json", o.study, "study file")->required();
  c.run->add_option("--out", o.outDir, "output folder (default: /output/dir of the study)");
  c.run->add_option("--threads", o.threads, "worker threads (0 = all cores; default: /threads of the study)")->check(kThreadCount);
  c.run->add_flag("--force", o.force, "replace an existing output folder (the old one is kept until the new run succeeded)");
  c.run->add_option("--cache-dir", o.cacheDir,
                    "kernel cache folder (default: /output/cache_dir of the study, .neuromkl_cache beside it); e.g. for a study in a read-only "
                    "folder such as an installed example");
}

void AddBatchCommands(CLI::App& app, Commands& c) {
  auto& o = c.batchOptions;
  c.batch = app.add_subcommand("batch", "run every study of a batch file; reruns skip completed studies and resume interrupted ones "
                                        "(under mpirun, studies and permutation blocks are spread over the ranks)");
  c.batch->add_option("BATCH.json", o.batchFile, "batch file")->required();
  c.batch->add_option("--threads", o.threads, "worker threads per process (0 = all cores)")->check(kThreadCount);
  c.batch->add_option("--shard", o.shard, "i/N: run only the i-th of N disjoint parts (0 <= i < N), e.g. one per job-array task; then `merge`");
  c.batch->add_flag("--force", o.force, "redo completed studies too");
  c.merge = app.add_subcommand("merge", "build the batch summary (TSV, JSON, index.html) from the studies completed so far");
  c.merge->add_option("BATCH.json", c.mergeFile, "batch file")->required();
  c.validate = app.add_subcommand("validate", "check a study or batch file and its inputs and print a summary, without computing");
  c.validate->add_option("STUDY.json", c.validateFile, "study or batch file")->required();
  c.validate->add_flag("--deep", c.validateDeep, "also decode every subject image (slower; catches truncated data and images with no finite voxel)");
}

void AddSimulate(CLI::App& app, Commands& c) {
  auto& cmd = c.simulateOptions;
  auto& sim = cmd.options;
  auto* s = c.simulate = app.add_subcommand("simulate", "write a synthetic cohort on the AAL 2 mm grid with known signal regions");
  s->add_option("--out", sim.outDir, "output folder")->required();
  s->add_option("--subjects", sim.subjects, "labelled subjects")->capture_default_str();
  s->add_option("--unlabelled", sim.unlabelled, "extra subjects with target n/a")->capture_default_str();
  s->add_option("--task", cmd.task, "classification or regression")->check(CLI::IsMember({"classification", "regression"}))->capture_default_str();
  s->add_option("--signal", cmd.signal,
                "comma-separated AAL region names carrying the effect (default: Hippocampus_L,Precuneus_R,Frontal_Mid_L; \"none\": no effect "
                "in these images); with --classes k > 2, k groups separated by ';', group i for the i-th class (A, B, ...), e.g. "
                "\"Hippocampus_L,Amygdala_L;Precuneus_R;Frontal_Mid_L\"");
  s->add_option("--classes", sim.classes, "number of classes (classification); > 2 writes a multiclass cohort with class-specific signal regions")
      ->check(CLI::Range(2, 26))
      ->capture_default_str();
  s->add_option("--positive-fraction", sim.positiveFraction, "binary classification: share of subjects in the positive class (default: half)");
  s->add_option("--effect", sim.effect, "effect size in noise-SD units")->capture_default_str();
  s->add_option("--noise", sim.noise, "noise SD")->capture_default_str();
  s->add_option("--nan-fraction", sim.nanFraction, "fraction of brain voxels set to NaN per image")->capture_default_str();
  s->add_option("--downsample", sim.downsample, "1 = AAL 2 mm grid; k = a coarser 2k mm grid")->capture_default_str();
  s->add_option("--seed", sim.seed, "random seed")->capture_default_str();
  s->add_flag("--uncompressed", cmd.uncompressed, "write .nii instead of .nii.gz");
  s->add_option("--age-regions", cmd.ageRegions, "comma-separated AAL regions driven by an \"age\" column correlated with the target (a confound)");
  s->add_option("--age-effect", sim.ageEffect, "voxel shift per age SD (8 years), in noise-SD units")->capture_default_str();
  s->add_option("--age-target-correlation", sim.ageTargetCorrelation, "correlation of age with the standardised target")->capture_default_str();
  s->add_flag("--second-modality", sim.secondModality, "also write a second image per subject (images_b/, column image_b)");
  s->add_option("--signal-b", cmd.signalB, "comma-separated AAL regions carrying the target effect in the second modality");
  s->add_option("--clinical-effect", sim.clinicalEffect, "write a \"clinical\" column = effect * standardised target + N(0, 1)");
  s->add_option("--suppressor", sim.suppressorRegion,
                "an AAL region sharing a subject-specific noise with the signal regions but no effect (a suppressor: large weights, no pattern)");
  s->add_option("--suppressor-noise", sim.suppressorNoise, "SD of the shared noise of --suppressor")->capture_default_str();
  s->add_option("--connectivity", sim.connectivityNodes,
                "also write a connectivity matrix per subject with this many nodes (connectomes/, column \"connectome\", nodes.tsv with 4 networks)");
  s->add_option("--connectivity-signal", cmd.connectivitySignal, "comma-separated node names (node01, node02, ...) whose connections carry the target effect");
  s->add_option("--sites", sim.sites, "a multi-site cohort with this many sites (column \"site\"): each site scans region r as shift + scale x value")
      ->capture_default_str();
  s->add_option("--site-shift", sim.siteShift, "SD of the sites' offsets per region, in noise-SD units")->capture_default_str();
  s->add_option("--site-scale", sim.siteScale, "SD of the log of the sites' gains per region")->capture_default_str();
  s->add_option("--site-imbalance", sim.siteImbalance,
                "in [0, 1): subjects above the target's median go to the first half of the sites with probability (1 + x) / 2 (a confound)")
      ->capture_default_str();
}

void AddPredict(CLI::App& app, Commands& c) {
  auto& o = c.predictOptions;
  c.predict = app.add_subcommand("predict", "apply a study's exported model (results/<study>/model) to new subjects: predictions.tsv and summary.json");
  c.predict->add_option("MODEL_DIR", o.modelDir, "model folder: results/<study>/model (every learner), model/<Learner> or model/<Learner>/folds/<k>")
      ->required();
  c.predict->add_option("TABLE", o.input, "subjects table (.tsv/.csv with the model's id and image columns) or a study file (its table or BIDS dataset)")
      ->required();
  c.predict->add_option("--out", o.outDir, "output folder (default: predictions_<study> beside TABLE)");
  c.predict->add_flag("--force", o.force, "replace an existing output folder");
  c.predict->add_option("--unseen-levels", o.unseenLevels,
                        "a categorical covariate level the model was not trained with (e.g. a new site): \"refuse\" (default: an error naming the "
                        "subject), \"reference\" (coded as the model's reference level, each such subject named in the warnings) or \"estimate\" "
                        "(the level's effect estimated from its own subjects: at least --new-site-min of them)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, pipeline::NewSubjects::UnseenLevels>{
          {"refuse", pipeline::NewSubjects::UnseenLevels::Refuse},
          {"reference", pipeline::NewSubjects::UnseenLevels::Reference},
          {"estimate", pipeline::NewSubjects::UnseenLevels::Estimate}}));
  c.predict->add_option("--new-sites", o.newSites,
                        "subjects of a site a harmonised model was not trained on: \"estimate\" (default: that site's ComBat effects are estimated "
                        "from its own subjects, named in the warnings) or \"refuse\" (an error)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, pipeline::NewSubjects::NewSites>{
          {"estimate", pipeline::NewSubjects::NewSites::Estimate}, {"refuse", pipeline::NewSubjects::NewSites::Refuse}}));
  c.predict->add_option("--new-site-min", o.newSiteMinimum, "fewest subjects a new site's (or, with --unseen-levels estimate, a new level's) effects are estimated from")
      ->check(CLI::Range(2, 1000000))
      ->capture_default_str();
  c.predict
      ->add_option_function<std::string>(
          "--new-site-reference",
          [&o](const std::string& v) {
            const auto eq = v.find('=');
            o.newSiteReference = {v.substr(0, eq), v.substr(eq + 1)};
          },
          "COLUMN=VALUE: a new site's (or level's) effects are estimated from its subjects of that group only (e.g. group=control), as "
          "the study's fit_on; every subject of the site is then harmonised (or corrected) with them")
      ->check(CLI::Validator(
          [](const std::string& v) { return v.find('=') == std::string::npos || v.front() == '=' ? "expected COLUMN=VALUE, found \"" + v + "\"" : std::string(); },
          "COLUMN=VALUE"));
  c.predict
      ->add_option_function<std::vector<std::string>>(
          "--kernel-rows",
          [&o](const std::vector<std::string>& values) {
            for (const auto& v : values) {
              const auto eq = v.find('=');  // kernel names have no '=', paths may
              o.kernelRows[v.substr(0, eq)] = v.substr(eq + 1);
            }
          },
          "KERNEL=FILE, for each precomputed kernel: a table of the new subjects' rows (first column their ids, \"self\" their "
          "self-similarities, then one column per training subject, headed by its id)")
      ->check(CLI::Validator(
          [](const std::string& v) { return v.find('=') == std::string::npos || v.front() == '=' ? "expected KERNEL=FILE, found \"" + v + "\"" : std::string(); },
          "KERNEL=FILE"));
  c.predict->add_option("--threads", c.predictThreads, "worker threads (0 = all cores)")->check(kThreadCount);
}

int RunChosen(const CLI::App& app, Commands& c, int argc, char** argv) {
  if (*c.run) return pipeline::RunCommand(c.runOptions, argc, argv);
  if (*c.batch) return pipeline::BatchCommand(c.batchOptions, argc, argv);
  if (*c.merge) return pipeline::MergeCommand(c.mergeFile);
  if (*c.validate) return pipeline::ValidateCommand(c.validateFile, c.validateDeep);
  if (*c.predict) return pipeline::PredictCommand(c.predictOptions, c.predictThreads);
  if (*c.simulate) return pipeline::SimulateCommand(c.simulateOptions);
  std::cout << app.help();
  return kExitOk;
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
  Commands commands;
  AddRun(app, commands);
  AddBatchCommands(app, commands);
  AddSimulate(app, commands);
  AddPredict(app, commands);

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
  try {
    if (version) return pipeline::VersionCommand();
    return RunChosen(app, commands, argc, argv);
  } catch (const Error& e) {
    spdlog::error("{} [{}]", e.what(), e.code());
    return e.ExitCode();
  } catch (const std::exception& e) {
    spdlog::error("unexpected failure: {}", e.what());
    return kExitFailure;
  }
}
