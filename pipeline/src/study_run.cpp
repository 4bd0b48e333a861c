#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <spdlog/spdlog.h>

#include "neuromkl/config/checkpoint.hpp"
#include "neuromkl/config/kernel_store.hpp"
#include "neuromkl/config/run_record.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/export/report.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/weights/weights.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/output_dir.hpp"
#include "neuromkl/pipeline/study_context.hpp"
#include "neuromkl/pipeline/study_run.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw IoError("output:Write", path, "cannot write the file (disk full?)");
}

std::string Tsv(const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (const auto& r : rows) out += Join(r, "\t") + "\n";
  return out;
}

std::string Cell(double v) { return std::isfinite(v) ? FormatDouble(v) : "NA"; }

std::string ParamsText(const learners::ParamMap& p, const std::map<std::string, std::vector<double>>& grid) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : p)
    if (grid.count(k)) parts.push_back(k + "=" + FormatDouble(v));
  return parts.empty() ? "fixed" : Join(parts, ";");
}

cv::SplitSpec ToSplit(const config::CvSchemeSpec& s) { return {s.scheme, s.k, s.repeats}; }

std::string DescribeSplit(const config::CvSchemeSpec& s) {
  std::string d = config::ToString(s.scheme);
  if (s.scheme != cv::Scheme::LeaveOneOut && s.scheme != cv::Scheme::LeaveOneGroupOut && s.scheme != cv::Scheme::Custom) d += " k=" + std::to_string(s.k);
  if (s.repeats > 1) d += " repeats=" + std::to_string(s.repeats);
  if (!s.groupColumn.empty()) d += " groups=" + s.groupColumn;
  if (!s.foldColumn.empty()) d += " folds=" + s.foldColumn;
  return d;
}

template <typename T>
std::vector<T> Pick(const std::vector<T>& v, const std::vector<int>& idx) {
  std::vector<T> out;
  if (v.empty()) return out;
  for (int i : idx) out.push_back(v[static_cast<std::size_t>(i)]);
  return out;
}

}  // namespace

cv::InnerSplitter StudyContext::Inner() const {
  const auto spec = ToSplit(study.cv.inner);
  return [this, spec](std::size_t f, const std::vector<int>& train, const Eigen::VectorXd& yTrain) {
    return cv::MakeFolds(spec, study.target.task, yTrain, Pick(cohort.groups, train), Pick(cohort.customFolds, train),
                         cv::DeriveSeed(study.cv.seed, 1000 + f), study.path + " /cv/inner (outer fold " + std::to_string(f) + ")");
  };
}

std::uint64_t StudyContext::PermutationSeed() const { return cv::DeriveSeed(study.seed, 0x5045524DULL); }  // "PERM"

std::string StudyContext::PermutationKey() const {
  config::StudyConfig neutral = study;
  neutral.output = {};
  neutral.threads = 0;
  Hasher h;
  h.Update(std::string_view("neuromkl-permutations-v1")).Update(ks.key).Update(HashFile(study.subjects.table));
  h.Update(config::ResolvedConfigJson(neutral)).Update(static_cast<std::uint64_t>(kPermutationBlock));
  return h.Hex();
}

std::vector<std::string> StudyContext::LearnerLabels() const {
  std::vector<std::string> labels;
  for (const auto& p : plans) labels.push_back(p.label);
  return labels;
}

StudyContext LoadStudyInputs(const config::StudyConfig& study) {
  StudyContext ctx;
  ctx.study = study;
  ctx.cohort = LoadCohort(study);
  ctx.n = static_cast<int>(ctx.cohort.y.size());
  // Splits before any heavy work: an impossible CV plan is a config/input error, found in seconds.
  ctx.outer = cv::MakeFolds(ToSplit(study.cv.outer), study.target.task, ctx.cohort.y, ctx.cohort.groups, ctx.cohort.customFolds, study.cv.seed,
                            study.path + " /cv/outer");
  for (const auto& spec : study.learners) {
    learners::ParamMap fixed = spec.params;
    for (const auto& [k, _] : spec.grid) fixed.erase(k);
    ctx.plans.push_back({spec.label, spec.name, cv::ExpandGrid(fixed, spec.grid)});
  }
  return ctx;
}

void AttachKernels(StudyContext& ctx, const std::string& scratchDir) {
  ctx.ks = RunKernelStage(ctx.study, ctx.cohort, scratchDir);
  // Labelled subjects first; subjects without a target follow when a semi-supervised learner
  // will use them as unlabelled data (they are never test subjects).
  bool semiSupervised = false;
  for (const auto& spec : ctx.study.learners)
    if (const auto* info = learners::FindLearner(spec.name); info && info->semiSupervised) semiSupervised = true;
  ctx.kernelRows = ctx.cohort.labelledRows;
  if (semiSupervised)
    for (std::size_t r = 0; r < ctx.cohort.ids.size(); ++r)
      if (!ctx.cohort.labelled[r]) ctx.kernelRows.push_back(static_cast<int>(r));
  ctx.unlabelledCount = static_cast<int>(ctx.kernelRows.size()) - ctx.n;
  ctx.kernels.clear();
  bool identity = ctx.kernelRows.size() == ctx.cohort.ids.size();
  for (std::size_t i = 0; identity && i < ctx.kernelRows.size(); ++i) identity = ctx.kernelRows[i] == static_cast<int>(i);
  if (identity) {  // every subject, in table order: the learners use the kernels themselves (no second copy)
    ctx.kernels = std::move(ctx.ks.set.kernels);
    ctx.kernelsMoved = true;
  } else {
    const Eigen::VectorXi rows = Eigen::Map<const Eigen::VectorXi>(ctx.kernelRows.data(), static_cast<Eigen::Index>(ctx.kernelRows.size()));
    for (const auto& K : ctx.ks.set.kernels) ctx.kernels.push_back(K(rows, rows));
  }
  ctx.nestedOptions = cv::NestedCvOptions{{ctx.study.kernels.centre, ctx.study.kernels.normalise}, ctx.unlabelledCount};
}

std::vector<std::vector<std::map<std::string, double>>> ComputePermutationBlock(const StudyContext& ctx, int first, int count) {
  std::vector<std::vector<std::map<std::string, double>>> out(static_cast<std::size_t>(count));
  const cv::InnerSplitter inner = ctx.Inner();
  const int n = ctx.n;
  tbb::parallel_for(0, count, [&](int i) {
    const int p = first + i;
    const auto perm = cv::PermuteWithinGroups(n, ctx.cohort.groups, cv::DeriveSeed(ctx.PermutationSeed(), static_cast<std::uint64_t>(p)));
    learners::Targets permuted{ctx.study.target.task, Eigen::VectorXd(n)};
    for (int k = 0; k < n; ++k) permuted.y[k] = ctx.cohort.y[perm[static_cast<std::size_t>(k)]];
    const auto res = cv::RunNestedCv(ctx.kernels, permuted, ctx.outer, inner, ctx.plans, ctx.nestedOptions);
    for (const auto& o : res) out[static_cast<std::size_t>(i)].push_back(cv::Summarise(o, permuted).pooled);
  });
  return out;
}

std::string DefaultCheckpointDir(const config::StudyConfig& study) { return study.output.dir + ".checkpoint"; }
std::string PermutationBlockPath(const std::string& checkpointDir, int block) { return checkpointDir + fmt::format("/permutations_{:05d}.json", block); }

RunOutcome RunStudy(config::StudyConfig study, const RunOptions& options) {
  const auto start = Clock::now();
  if (!options.outDir.empty()) study.output.dir = fs::absolute(options.outDir).lexically_normal().string();
  if (options.threads >= 0) study.threads = options.threads;
  std::unique_ptr<tbb::global_control> threadLimit;
  if (study.threads > 0) threadLimit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, study.threads);
  config::RunRecord record;
  RunOutcome outcome;

  auto t = Clock::now();
  StudyContext ctx = LoadStudyInputs(study);
  const Cohort& cohort = ctx.cohort;
  record.seconds["subjects"] = Since(t);
  const learners::Task task = study.target.task;
  const Eigen::VectorXd& y = cohort.y;
  const std::vector<cv::Fold>& outer = ctx.outer;
  AtomicOutputDir out(study.output.dir, options.force);  // fails before any heavy work if it exists

  t = Clock::now();
  AttachKernels(ctx, out.Path());
  const KernelStageResult& ks = ctx.ks;
  record.seconds["kernels"] = Since(t);
  record.seconds["kernels_read_images"] = ks.report.readSeconds;
  record.seconds["kernels_products"] = ks.report.productSeconds;

  // ---- nested cross-validation on the labelled subjects ----
  t = Clock::now();
  const learners::KernelList& labelled = ctx.kernels;
  const std::vector<int>& kernelRows = ctx.kernelRows;
  const int unlabelledCount = ctx.unlabelledCount;
  const auto& plans = ctx.plans;
  const learners::Targets targets{task, y};
  const auto outcomes = cv::RunNestedCv(labelled, targets, outer, ctx.Inner(), plans, ctx.nestedOptions);
  record.seconds["nested_cv"] = Since(t);

  for (std::size_t l = 0; l < outcomes.size(); ++l) {
    config::LearnerRecord lr;
    lr.outcome = outcomes[l];
    lr.summary = cv::Summarise(outcomes[l], targets);
    for (const auto& f : outcomes[l].folds)
      if (!f.error.empty()) record.warnings.push_back(fmt::format("learner {} fold {} failed: {}", outcomes[l].label, f.index, f.error));
    record.learners.push_back(std::move(lr));
  }

  // ---- permutation test: the whole nested CV on permuted targets, same outer folds ----
  // Computed in blocks; each finished block is checkpointed, so an interrupted run resumes with
  // at most one block lost, and batch workers can compute blocks of one study in parallel.
  const std::string checkpointDir = options.checkpointDir.empty() ? DefaultCheckpointDir(study) : options.checkpointDir;
  if (study.permutations.count > 0) {
    t = Clock::now();
    const int P = study.permutations.count;
    const std::uint64_t permSeed = ctx.PermutationSeed();
    const std::string key = ctx.PermutationKey();
    const auto labels = ctx.LearnerLabels();
    std::vector<std::vector<std::map<std::string, double>>> nulls(static_cast<std::size_t>(P));
    Progress progress("permutations", static_cast<std::size_t>(P));
    for (int first = 0, block = 0; first < P; first += kPermutationBlock, ++block) {
      const int count = std::min(kPermutationBlock, P - first);
      const std::string path = PermutationBlockPath(checkpointDir, block);
      std::vector<std::vector<std::map<std::string, double>>> pooled;
      if (auto saved = config::LoadPermutationBlock(path, key);
          saved && saved->first == first && saved->learners == labels && static_cast<int>(saved->pooled.size()) == count) {
        pooled = std::move(saved->pooled);
        ++outcome.permutationBlocksReused;
      } else {
        pooled = ComputePermutationBlock(ctx, first, count);
        try {
          config::SavePermutationBlock(path, {key, first, labels, pooled});
        } catch (const Error& e) {
          spdlog::warn("permutations: checkpoint not written ({}); the run continues without it", e.what());
        }
      }
      for (int i = 0; i < count; ++i) nulls[static_cast<std::size_t>(first + i)] = std::move(pooled[static_cast<std::size_t>(i)]);
      progress.Advance(static_cast<std::size_t>(count));
    }
    progress.Finish();
    if (outcome.permutationBlocksReused > 0)
      spdlog::info("permutations: {} of {} blocks reused from the checkpoint in {}", outcome.permutationBlocksReused,
                   (P + kPermutationBlock - 1) / kPermutationBlock, checkpointDir);
    for (std::size_t l = 0; l < record.learners.size(); ++l) {
      auto& pr = record.learners[l].permutations;
      pr.count = P;
      pr.seed = permSeed;
      pr.exchangeability = cohort.groups.empty() ? "all subjects" : "within groups of column " + study.cv.outer.groupColumn + study.cv.inner.groupColumn;
      for (const auto& [metric, higherIsBetter] : cv::PermutationMetrics(task)) {
        const double observed = record.learners[l].summary.pooled.at(metric);
        int atLeastAsGood = 0;
        for (int p = 0; p < P; ++p) {
          const double v = nulls[static_cast<std::size_t>(p)][l].at(metric);
          pr.null[metric].push_back(v);
          if (std::isfinite(v) && (higherIsBetter ? v >= observed : v <= observed)) ++atLeastAsGood;
        }
        pr.pValues[metric] = std::isfinite(observed) ? (atLeastAsGood + 1.0) / (P + 1.0) : std::nan("");
      }
    }
    record.seconds["permutations"] = Since(t);
  }

  // ---- which regions carry the prediction: region tables and voxel weight maps ----
  t = Clock::now();
  const std::size_t L = record.learners.size();
  std::vector<std::vector<std::vector<float>>> foldMaps(L);
  std::vector<std::vector<float>> meanMaps(L);
  const bool writeMaps = study.output.weightMaps && ks.regions.has_value();
  if (writeMaps) {
    std::vector<Eigen::MatrixXd> subjectWeights;
    std::vector<std::pair<std::size_t, std::size_t>> slot;  // (learner, fold) of each map
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t f = 0; f < record.learners[l].outcome.folds.size(); ++f) {
        const auto& fold = record.learners[l].outcome.folds[f];
        if (!fold.error.empty()) continue;
        std::vector<int> train = fold.train;
        train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
        subjectWeights.push_back(weights::SubjectWeights(labelled, {train, fold.test, fold.model.coef, fold.model.beta},
                                                         study.kernels.centre, study.kernels.normalise));
        slot.emplace_back(l, f);
      }
    std::vector<std::string> images;
    for (auto r : kernelRows) images.push_back(cohort.images[static_cast<std::size_t>(r)]);
    auto maps = weights::VoxelMaps(images, *ks.regions, ks.set.info, subjectWeights, study.kernels.nanPolicy);
    for (std::size_t k = 0; k < maps.size(); ++k) {
      auto& map = maps[k];
      if (study.output.weightMapUnitNorm) {
        double norm = 0;
        for (float v : map) norm += static_cast<double>(v) * v;
        if (norm > 0)
          for (float& v : map) v = static_cast<float>(v / std::sqrt(norm));
      }
      foldMaps[slot[k].first].push_back(std::move(map));
    }
    for (std::size_t l = 0; l < L; ++l) {
      if (foldMaps[l].empty()) continue;
      std::vector<double> mean(foldMaps[l][0].size(), 0.0);
      for (const auto& m : foldMaps[l])
        for (std::size_t v = 0; v < m.size(); ++v) mean[v] += m[v];
      meanMaps[l].resize(mean.size());
      for (std::size_t v = 0; v < mean.size(); ++v) meanMaps[l][v] = static_cast<float>(mean[v] / static_cast<double>(foldMaps[l].size()));
    }
  }
  for (std::size_t l = 0; l < L; ++l) {
    auto& lr = record.learners[l];
    const bool mkl = learners::FindLearner(lr.outcome.name)->multipleKernels;
    std::vector<Eigen::VectorXd> foldWeights;
    std::size_t mapIndex = 0;
    for (const auto& fold : lr.outcome.folds) {
      if (!fold.error.empty()) continue;
      if (mkl || !writeMaps) foldWeights.push_back(fold.model.beta);
      else foldWeights.push_back(weights::RegionShares(foldMaps[l][mapIndex], *ks.regions, ks.set.info));
      ++mapIndex;
    }
    lr.regions = weights::RegionTable(foldWeights);
    lr.regionSource = mkl ? "kernel weights (beta) per outer fold"
                          : writeMaps ? "voxel weight map per outer fold: mean |w| per voxel of each region, renormalised to 100 %"
                                      : "uniform: this learner has no kernel weights and no voxel map was computed";
  }
  record.seconds["weights"] = Since(t);

  // ---- the record ----
  record.study = study.name;
  record.version = NeuromklVersion();
  record.versions = Versions();
  record.configPath = fs::absolute(study.path).string();
  record.seed = study.seed;
  record.cvSeed = study.cv.seed;
  record.outerScheme = DescribeSplit(study.cv.outer);
  record.innerScheme = DescribeSplit(study.cv.inner);
  record.task = config::ToString(task);
  record.targetColumn = study.target.column;
  record.positiveClass = cohort.positiveClass;
  record.negativeClass = cohort.negativeClass;
  record.excludedSubjects = cohort.excluded;
  if (unlabelledCount > 0)
    for (auto& [id, why] : record.excludedSubjects) why += "; used as unlabelled data by the semi-supervised learners";
  for (auto r : cohort.labelledRows) record.labelledSubjects.push_back(cohort.ids[static_cast<std::size_t>(r)]);
  record.targets.assign(y.data(), y.data() + y.size());
  record.kernels = ks.set.info;
  record.excludedKernels = ks.set.excluded;
  record.kernelSource = config::ToString(study.kernels.source);
  record.kernelCache = ks.cacheHit ? "hit" : (study.kernels.cache ? "computed and stored" : "computed (cache off)");
  for (const auto& w : ks.warnings) record.warnings.push_back(w);
  record.centre = study.kernels.centre;
  record.normalise = study.kernels.normalise;
  record.threads = study.threads;
  record.description = study.description;
  record.atlas = study.kernels.source != config::KernelSource::Images ? "" : study.atlas.builtin.empty() ? study.atlas.image : study.atlas.builtin;
  record.mask = study.mask;
  {
    const std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    record.date = buf;
  }
  Hasher inputHash;
  inputHash.Update(ks.key).Update(HashFile(study.subjects.table)).Update(config::ResolvedConfigJson(study));
  record.inputHash = inputHash.Hex();

  // ---- outputs ----
  const std::string dir = out.Path();
  WriteText(dir + "/study.resolved.json", config::ResolvedConfigJson(study) + "\n");
  if (study.output.saveKernels) {
    if (ctx.kernelsMoved) std::swap(ctx.ks.set.kernels, ctx.kernels);  // lend the kernels back for writing
    config::SaveKernelStore(dir + "/kernels", ks.set, ks.key, "raw region kernels of study " + study.name);
    if (ctx.kernelsMoved) std::swap(ctx.ks.set.kernels, ctx.kernels);
  }
  {
    std::vector<std::vector<std::string>> rows = {{"subject", "used", "target", "reason"}};
    std::size_t e = 0;
    for (std::size_t r = 0; r < cohort.ids.size(); ++r) {
      const bool used = cohort.labelled[r];
      rows.push_back({cohort.ids[r], used ? "yes" : unlabelledCount > 0 ? "unlabelled" : "no", cohort.rawTargets[r],
                      used ? "" : record.excludedSubjects[e++].second});
    }
    WriteText(dir + "/subjects.tsv", Tsv(rows));
  }
  {
    std::vector<std::vector<std::string>> rows = {{"label", "name", "status", "voxels_used", "atlas_voxels", "non_finite_voxels", "zeroed_values", "reason"}};
    auto add = [&](const kernels::KernelInfo& k, const std::string& status, const std::string& reason) {
      rows.push_back({std::to_string(k.label), k.name, status, std::to_string(k.features), std::to_string(k.atlasVoxels),
                      std::to_string(k.nonFiniteVoxels), std::to_string(k.zeroedValues), reason});
    };
    for (const auto& k : ks.set.info) add(k, "used", "");
    for (const auto& k : ks.set.excluded) add(k.info, "excluded", k.reason);
    WriteText(dir + "/regions.tsv", Tsv(rows));
  }
  {
    std::vector<std::vector<std::string>> rows = {{"learner", "metric", "pooled", "fold_mean", "fold_sd", "permutation_p"}};
    for (const auto& lr : record.learners)
      for (const auto& [metric, v] : lr.summary.pooled) {
        const auto mean = lr.summary.foldMean.count(metric) ? lr.summary.foldMean.at(metric) : std::nan("");
        const auto sd = lr.summary.foldSd.count(metric) ? lr.summary.foldSd.at(metric) : std::nan("");
        const auto p = lr.permutations.pValues.count(metric) ? lr.permutations.pValues.at(metric) : std::nan("");
        rows.push_back({lr.outcome.label, metric, Cell(v), Cell(mean), Cell(sd), Cell(p)});
      }
    WriteText(dir + "/metrics.tsv", Tsv(rows));
  }
  {
    std::vector<std::vector<std::string>> rows = {{"subject", "learner", "repeat", "fold", "target", "decision", "predicted"}};
    for (const auto& lr : record.learners)
      for (const auto& f : lr.outcome.folds)
        for (std::size_t i = 0; i < f.test.size(); ++i) {
          const auto s = static_cast<std::size_t>(f.test[i]);
          const double d = f.decision[static_cast<Eigen::Index>(i)];
          const std::string predicted = !std::isfinite(d) ? "NA"
                                        : task == learners::Task::Classification ? (d >= 0 ? cohort.positiveClass : cohort.negativeClass)
                                                                                 : FormatDouble(d);
          rows.push_back({record.labelledSubjects[s], lr.outcome.label, std::to_string(f.repeat), std::to_string(f.index),
                          cohort.rawTargets[static_cast<std::size_t>(cohort.labelledRows[s])], Cell(d), predicted});
        }
    WriteText(dir + "/predictions.tsv", Tsv(rows));
  }
  {
    std::vector<std::vector<std::string>> rows = {{"learner", "fold", "repeat", "n_train", "n_test", "chosen", "inner_score", "status", "iterations", "kernels_selected"}};
    for (std::size_t l = 0; l < record.learners.size(); ++l) {
      const auto& o = record.learners[l].outcome;
      for (const auto& f : o.folds) {
        const double inner = f.innerScores.empty() ? std::nan("") : f.innerScores[f.chosen];
        rows.push_back({o.label, std::to_string(f.index), std::to_string(f.repeat), std::to_string(f.train.size()), std::to_string(f.test.size()),
                        ParamsText(o.grid[f.chosen], study.learners[l].grid), Cell(inner),
                        f.error.empty() ? std::string(learners::ToString(f.model.info.status)) : "failed",
                        std::to_string(f.model.info.iterations), std::to_string((f.model.beta.array() > 0).count())});
      }
    }
    WriteText(dir + "/folds.tsv", Tsv(rows));
  }
  for (std::size_t l = 0; l < L; ++l) {
    auto& lr = record.learners[l];
    std::vector<std::string> header = {"rank", "label", "name", "voxels", "non_finite_voxels", "mean_percent", "sd_percent", "folds_selected",
                                       "expected_ranking"};
    for (const auto& f : lr.outcome.folds)
      if (f.error.empty()) header.push_back(fmt::format("fold{}{}_percent", f.index, f.repeat > 0 ? "_r" + std::to_string(f.repeat) : ""));
    std::vector<std::vector<std::string>> rows = {header};
    for (std::size_t i = 0; i < lr.regions.size(); ++i) {
      const auto& row = lr.regions[i];
      const auto& k = ks.set.info[row.kernel];
      std::vector<std::string> cells = {std::to_string(i + 1), std::to_string(k.label), k.name, std::to_string(k.features),
                                        std::to_string(k.nonFiniteVoxels), Cell(row.meanPercent), Cell(row.sdPercent),
                                        std::to_string(row.foldsSelected), Cell(row.expectedRank)};
      for (double p : row.foldPercent) cells.push_back(Cell(p));
      rows.push_back(cells);
    }
    WriteText(dir + "/regions_" + lr.outcome.label + ".tsv", Tsv(rows));
    WriteText(dir + "/regions_" + lr.outcome.label + ".json",
              fmt::format("{{\n  \"learner\": \"{}\",\n  \"weights\": \"{}\",\n  \"percent\": \"each fold's weights as a percentage of that fold's total\",\n"
                          "  \"folds_selected\": \"outer folds in which the weight is > 0\",\n"
                          "  \"expected_ranking\": \"mean over outer folds of the region's rank; rank 1 = largest weight, ties share the average of their ranks\",\n"
                          "  \"order\": \"rows sorted by mean_percent, descending\"\n}}\n",
                          lr.outcome.label, lr.regionSource));
    if (writeMaps && !foldMaps[l].empty()) {
      std::error_code ec;
      fs::create_directories(dir + "/weights", ec);
      io::Volume v;
      v.geometry = ks.regions->grid;
      std::size_t k = 0;
      for (const auto& f : lr.outcome.folds) {
        if (!f.error.empty()) continue;
        const std::string name = fmt::format("weights/{}_fold{}{}.nii.gz", lr.outcome.label, f.index, f.repeat > 0 ? "_r" + std::to_string(f.repeat) : "");
        v.data = foldMaps[l][k++];
        io::WriteVolume(dir + "/" + name, v);
        lr.foldMaps.push_back(name);
      }
      v.data = meanMaps[l];
      lr.meanMap = "weights/" + lr.outcome.label + "_mean.nii.gz";
      io::WriteVolume(dir + "/" + lr.meanMap, v);
    }
  }
  if (study.permutations.count > 0) {
    std::vector<std::vector<std::string>> rows = {{"permutation", "learner", "metric", "value"}};
    for (const auto& lr : record.learners)
      for (const auto& [metric, values] : lr.permutations.null)
        for (std::size_t p = 0; p < values.size(); ++p) rows.push_back({std::to_string(p), lr.outcome.label, metric, Cell(values[p])});
    WriteText(dir + "/null_distribution.tsv", Tsv(rows));
  }
  record.seconds["total"] = Since(start);
  WriteText(dir + "/report.html", exporting::RenderReport(record, meanMaps, ks.regions ? &*ks.regions : nullptr));
  WriteText(dir + "/results.json", config::RunRecordJson(record));
  for (const auto& [name, content] : options.extraFiles) WriteText(dir + "/" + name, content);
  out.Commit();
  if (study.permutations.count > 0) {
    std::error_code ec;
    fs::remove_all(checkpointDir, ec);  // the results hold everything the blocks held
  }

  outcome.outputDir = out.FinalPath();
  for (const auto& lr : record.learners) {
    const auto& m = lr.summary.pooled;
    auto pv = [&](const char* k) { return lr.permutations.pValues.count(k) ? fmt::format(" (p = {:.3g})", lr.permutations.pValues.at(k)) : std::string(); };
    auto sd = [&](const char* k) { return lr.summary.foldSd.count(k) ? fmt::format(" +- {:.3f}", lr.summary.foldSd.at(k)) : std::string(); };
    if (task == learners::Task::Classification)
      outcome.summary.push_back(fmt::format("{:<12} balanced accuracy {:.3f}{}{}, AUC {:.3f}{}, accuracy {:.3f} [{:.3f}, {:.3f}]", lr.outcome.label,
                                            m.at("balanced_accuracy"), sd("balanced_accuracy"), pv("balanced_accuracy"), m.at("auc"), pv("auc"),
                                            m.at("accuracy"), m.at("accuracy_ci95_low"), m.at("accuracy_ci95_high")));
    else
      outcome.summary.push_back(fmt::format("{:<12} r {:.3f}{}{}, R^2 {:.3f}{}, MSE {:.4g}{}{}", lr.outcome.label, m.at("pearson_r"), sd("pearson_r"),
                                            pv("pearson_r"), m.at("r2"), pv("r2"), m.at("mse"), sd("mse"), pv("mse")));
  }
  outcome.summary.push_back(fmt::format("(pooled over out-of-fold predictions; +- SD over {} outer folds; {:.1f} s)", outer.size(), record.seconds["total"]));
  return outcome;
}

}  // namespace neuromkl::pipeline
