// A study from its config to its committed output folder, as the list of its stages.
#include "neuromkl/pipeline/study_run.hpp"

#include <chrono>
#include <filesystem>

#include "neuromkl/pipeline/model_export.hpp"
#include "neuromkl/pipeline/output_dir.hpp"
#include "neuromkl/pipeline/study_stages.hpp"

namespace neuromkl::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

/// Times the stages into the run record's "seconds".
class StageTimer {
 public:
  template <typename Stage>
  auto operator()(const std::string& name, Stage&& stage) {
    const auto t = Clock::now();
    struct Record {
      StageTimer* timer;
      std::string name;
      Clock::time_point t;
      ~Record() { timer->seconds[name] = std::chrono::duration<double>(Clock::now() - t).count(); }
    } record{this, name, t};
    return stage();
  }
  std::map<std::string, double> seconds;
};

/// Every file the study reads: a forced run never replaces a folder that holds one of them.
std::vector<std::string> StudyInputs(const StudyContext& ctx) {
  const auto& study = ctx.study;
  std::vector<std::string> in = {study.path,        study.subjects.table, ctx.cohort.sidecar, study.subjects.bids.root,
                                 study.atlas.image, study.atlas.labels,   study.mask,             study.kernels.tabular.table};
  for (const auto& part : study.atlas.parts) in.insert(in.end(), {part.image, part.labels});
  for (const auto& k : study.kernels.precomputed) in.push_back(k.file);
  in.push_back(study.kernels.intensity.referenceImage);
  in.insert(in.end(), ctx.cohort.images.begin(), ctx.cohort.images.end());
  return in;
}

}  // namespace

RunOutcome RunStudy(config::StudyConfig study, const RunOptions& options) {
  const auto start = Clock::now();
  if (!options.outDir.empty()) study.output.dir = std::filesystem::absolute(options.outDir).lexically_normal().string();
  if (options.threads >= 0) study.threads = options.threads;
  const ThreadLimit threadLimit(study.threads);
  StageTimer timed;

  StudyContext ctx = timed("subjects", [&] { return LoadStudyInputs(study); });
  AtomicOutputDir out(study.output.dir, options.force, StudyInputs(ctx));  // fails before any heavy work if it exists
  timed("kernels", [&] { AttachKernels(ctx, out.Path()); });
  timed.seconds["kernels_read_images"] = ctx.ks.report.readSeconds;
  timed.seconds["kernels_products"] = ctx.ks.report.productSeconds;
  CrossValidationResult cv = timed("nested_cv", [&] { return RunCrossValidation(ctx); });
  const std::string checkpointDir = options.checkpointDir.empty() ? DefaultCheckpointDir(study) : options.checkpointDir;
  PermutationResult permutations;
  if (study.permutations.count > 0) permutations = timed("permutations", [&] { return RunPermutationTest(ctx, cv.learners, checkpointDir); });
  const RegionWeightsResult weights = timed("weights", [&] { return RunRegionWeights(ctx, cv.learners); });
  exporting::RegionScanRecord regionScan;
  if (!study.regionScan.learner.empty()) regionScan = timed("region_scan", [&] { return RunRegionScan(ctx); });
  exporting::AblationRecord ablation;
  if (!study.ablation.learner.empty()) ablation = timed("ablation", [&] { return RunAblation(ctx, cv.learners, weights.tables); });
  std::vector<cv::OuterFoldResult> finals;
  const bool exportModel = study.output.model;
  if (exportModel) finals = timed("final_model", [&] { return FitFinalModels(ctx); });
  const int blocksReused = permutations.blocksReused;
  exporting::RunRecord record = DescribeRun(ctx, std::move(cv), std::move(permutations), weights, timed.seconds);
  record.regionScan = std::move(regionScan);
  record.ablation = std::move(ablation);
  if (exportModel) {
    timed("model_export", [&] { ExportModels(ctx, record, finals, out.Path()); });
    record.seconds["final_model"] = timed.seconds["final_model"];
    record.seconds["model_export"] = timed.seconds["model_export"];
  }
  WriteStudyOutputs(ctx, record, weights, {out.Path(), options.extraFiles}, start);
  out.Commit();
  if (study.permutations.count > 0) {
    std::error_code ec;
    std::filesystem::remove_all(checkpointDir, ec);  // the results hold everything the blocks held
  }
  return {out.FinalPath(), blocksReused, SummaryLines(record, ctx.outer.size())};
}

}  // namespace neuromkl::pipeline
