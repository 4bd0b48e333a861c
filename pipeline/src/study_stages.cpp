// Stages 3-7 of a study: nested CV, permutation test, region weights, the run record, outputs.
#include "neuromkl/pipeline/study_stages.hpp"


#include <algorithm>
#include <cmath>
#include <numeric>
#include <ctime>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/export/checkpoint.hpp"
#include "neuromkl/export/kernel_store.hpp"
#include "neuromkl/gram/owners.hpp"
#include "neuromkl/pipeline/connectivity.hpp"
#include "neuromkl/pipeline/study_run.hpp"
#include "neuromkl/weights/weights.hpp"
#include "neuromkl/ranks/held_kernels.hpp"

namespace neuromkl::pipeline {

namespace {

std::string DescribeSplit(const config::CvSchemeSpec& s) {
  std::string d = config::ToString(s.scheme);
  if (s.scheme != cv::Scheme::LeaveOneOut && s.scheme != cv::Scheme::LeaveOneGroupOut && s.scheme != cv::Scheme::Custom) d += " k=" + std::to_string(s.k);
  if (s.repeats > 1) d += " repeats=" + std::to_string(s.repeats);
  if (!s.groupColumn.empty()) d += " groups=" + s.groupColumn;
  if (!s.foldColumn.empty()) d += " folds=" + s.foldColumn;
  return d;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

/// A warning when a learner's outer folds did not all converge: their models are usable but not at
/// the optimum (capped, stalled) or missing (failed), which a reader must know.
std::optional<std::string> FitStatusWarning(const cv::LearnerOutcome& o) {
  const auto counts = cv::FoldStatusCounts(o);
  const int converged = counts.count("converged") ? counts.at("converged") : 0;
  if (converged == static_cast<int>(o.folds.size())) return std::nullopt;
  std::vector<std::string> parts;
  for (const auto& [status, count] : counts)
    if (status != "converged") parts.push_back(fmt::format("{} {}", count, status));
  return fmt::format("learner {}: {} of {} outer folds did not converge ({}); their models are not at the optimum{}", o.label,
                     o.folds.size() - static_cast<std::size_t>(converged), o.folds.size(), Join(parts, ", "),
                     counts.count("max_iterations_reached") ? ": raise max_iterations or loosen the tolerance" : "");
}

/// A warning when inner-CV fits did not converge: the parameter search then compared some grid points at models
/// short of their optimum (the outer folds' own models are reported by FitStatusWarning).
std::optional<std::string> InnerFitStatusWarning(const cv::LearnerOutcome& o) {
  if (o.innerNotConverged == 0) return std::nullopt;
  // Capped fits need more iterations; stalled ones (no descent at the inner solver's accuracy) a looser tolerance.
  const long stalled = o.innerNotConverged - o.innerCapped;
  std::vector<std::string> parts, advice;
  if (o.innerCapped > 0) {
    parts.push_back(fmt::format("{} capped at max_iterations", o.innerCapped));
    advice.push_back("raise max_iterations");
  }
  if (stalled > 0) {
    parts.push_back(fmt::format("{} stalled", stalled));
    advice.push_back("loosen the tolerance");
  }
  return fmt::format("learner {}: {} of {} inner-CV fits did not converge ({}); the parameter search compared some grid points at models short of "
                     "their optimum: {}",
                     o.label, o.innerNotConverged, o.innerFits, Join(parts, ", "), Join(advice, " or "));
}

/// Warnings for searched parameters chosen at the same end of their grid in most outer folds: the
/// best value may lie beyond the grid. Grids of fewer than 3 values have no interior, so no warning.
std::vector<std::string> GridEdgeWarnings(const cv::LearnerOutcome& o, const std::vector<std::string>& searched) {
  std::vector<std::string> out;
  const learners::LearnerInfo* info = learners::FindLearner(o.name);
  for (const auto& name : searched) {
    // An end that is the parameter's own bound (mu = 1 is l1-MKL, mu = 0 the uniform sum) cannot be extended.
    const learners::ParamSpec* spec = nullptr;
    if (info)
      for (const auto& p : info->params)
        if (p.name == name) spec = &p;
    double lo = INFINITY, hi = -INFINITY;
    std::set<double> values;
    for (const auto& point : o.grid) {
      const double v = point.at(name);
      values.insert(v);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (values.size() < 3) continue;
    int atLow = 0, atHigh = 0, folds = 0;
    for (const auto& f : o.folds) {
      if (!f.error.empty()) continue;
      ++folds;
      const double v = o.grid[f.chosen].at(name);
      atLow += v == lo;
      atHigh += v == hi;
    }
    for (const auto& [count, value, end] : {std::tuple{atLow, lo, "smallest"}, std::tuple{atHigh, hi, "largest"}})
      if (folds > 0 && 2 * count > folds && !(spec && (value == spec->lo || value == spec->hi)))
        out.push_back(fmt::format("learner {}: {} was chosen at the {} value of its grid ({}) in {} of {} outer folds; the best value may lie "
                                  "beyond the grid: extend it",
                                  o.label, name, end, FormatDouble(value), count, folds));
  }
  return out;
}

/// p = (count of permutations at least as good as the observed value + 1) / (P + 1), per metric.
exporting::PermutationRecord PermutationPValues(const StudyContext& ctx, const exporting::LearnerRecord& observed, const std::vector<PooledBlock>& blocks,
                                                std::size_t learner) {
  const auto& study = ctx.study;
  exporting::PermutationRecord pr;
  pr.count = study.permutations.count;
  pr.seed = ctx.PermutationSeed();
  pr.exchangeability = ctx.cohort.groups.empty() ? "all subjects" : "within groups of column " + study.cv.outer.groupColumn + study.cv.inner.groupColumn;
  for (const auto& [metric, higherIsBetter] : cv::PermutationMetrics(study.target.task)) {
    const double value = observed.summary.pooled.at(metric);
    int atLeastAsGood = 0;
    for (const auto& block : blocks)
      for (const auto& permutation : block) {
        // A permutation with a failed outer fold has no comparable metric (it enters the null as NaN)
        // and counts as scoring at least as well: dropping it would make p too small.
        const auto& pooled = permutation[learner];
        const auto failed = pooled.find("failed_folds");
        const bool failedFold = failed != pooled.end() && failed->second > 0;
        const double v = failedFold ? std::nan("") : pooled.at(metric);
        pr.null[metric].push_back(v);
        if (failedFold || (std::isfinite(v) && (higherIsBetter ? v >= value : v <= value))) ++atLeastAsGood;
      }
    pr.pValues[metric] = std::isfinite(value) ? (atLeastAsGood + 1.0) / (pr.count + 1.0) : std::nan("");
  }
  return pr;
}


/// The activation pattern of a fold model (Haufe et al. 2014): a = Cov(x~, f) / Var(f) over the fold's
/// training subjects, x~ the kernel features as the learner saw them (centred, normalised; before the
/// source scale, which is a weight, not data) and f the decision value. For linear kernels a = X~' c with
/// c = (f - mean f) / sum (f - mean f)^2, so a map is built from c exactly as a weight map is from the
/// coefficients (gram::KernelStore::SubjectWeights with unit kernel weights), and each kernel's part has norm
/// ||a_r|| = sqrt(c' K~_r c).
struct FoldPattern {
  Eigen::VectorXd c;      ///< per training subject (the fold's train, then unlabelled, order)
  Eigen::VectorXd norms;  ///< per kernel: ||a_r||
  /// Per kernel: coef' K~_r coef (K~_r with its source scale), the model's region shares (0 where beta_r = 0).
  Eigen::VectorXd modelQuadratics;
};
FoldPattern FoldActivationPattern(const StudyContext& ctx, const cv::OuterFoldResult& fold) {
  std::vector<int> train = fold.train;
  train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
  // Each kernel's part K~_r coef from the full kernel in place (no fold copies), several kernels at once,
  // summed in kernel order (results do not depend on the thread count).
  const auto view = ctx.OpenFold(train, fold.test);
  const Eigen::VectorXd scales = view->Scales();
  const auto R = ctx.KernelCount();
  std::vector<Eigen::VectorXd> parts(R);
  std::vector<std::size_t> used, every(R);
  for (std::size_t r = 0; r < R; ++r)
    if (fold.model.beta[static_cast<Eigen::Index>(r)] != 0.0) used.push_back(r);
  std::iota(every.begin(), every.end(), std::size_t{0});
  const auto products = view->Products(used, fold.model.coef, scales);
  for (std::size_t i = 0; i < used.size(); ++i) parts[used[i]] = products[i].col(0);
  Eigen::VectorXd f = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(train.size()));
  FoldPattern p;
  p.modelQuadratics = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(R));
  for (std::size_t r = 0; r < R; ++r)
    if (parts[r].size() > 0) {
      f += fold.model.beta[static_cast<Eigen::Index>(r)] * parts[r];
      p.modelQuadratics[static_cast<Eigen::Index>(r)] = fold.model.coef.dot(parts[r]);
    }
  const Eigen::VectorXd centred = f.array() - f.mean();
  const double ss = centred.squaredNorm();
  p.c = ss > 0 ? Eigen::VectorXd(centred / ss) : Eigen::VectorXd::Zero(f.size());  // a constant decision has no pattern
  p.norms.resize(static_cast<Eigen::Index>(R));
  const auto patternParts = view->Products(every, p.c, Eigen::VectorXd());
  for (std::size_t r = 0; r < R; ++r) p.norms[static_cast<Eigen::Index>(r)] = std::sqrt(std::max(0.0, p.c.dot(patternParts[r].col(0))));
  return p;
}

/// Fold maps of every learner's successful folds, computed in one pass over the images; with
/// `patterns` (binary and regression studies: [learner][successful fold]) the activation pattern maps too.
exporting::WeightMaps ComputeWeightMaps(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners,
                                        const std::vector<std::vector<FoldPattern>>& patterns) {
  const auto& study = ctx.study;
  const auto& ks = ctx.ks;
  exporting::WeightMaps maps;
  maps.folds.resize(learners.size());
  maps.mean.resize(learners.size());
  maps.classMean.resize(learners.size());
  std::vector<Eigen::MatrixXd> subjectWeights, patternWeights;  // patternWeights: one per entry of subjectWeights, or none
  std::vector<std::size_t> learnerOf;  // learner of each map
  std::vector<Eigen::Index> classOf;     // multiclass: class of each map
  for (std::size_t l = 0; l < learners.size(); ++l)
    for (const auto& fold : learners[l].outcome.folds) {
      if (!fold.error.empty()) continue;
      std::vector<int> train = fold.train;
      train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
      // Equal source weighting: the learner saw kernel r scaled by g_r, so its weight in the map is beta_r g_r.
      const Eigen::VectorXd scales = ctx.FoldScales(train, fold.test);
      if (fold.model.Multiclass()) {  // one map per class: its coefficients and (per-class) kernel weights
        for (Eigen::Index c = 0; c < fold.model.coefs.cols(); ++c) {
          const Eigen::VectorXd beta = fold.model.betas.cols() > c ? Eigen::VectorXd(fold.model.betas.col(c)) : fold.model.beta;
          subjectWeights.push_back(ctx.SubjectWeights({train, fold.test, fold.model.coefs.col(c), beta.cwiseProduct(scales)}));
          learnerOf.push_back(l);
          classOf.push_back(c);
        }
        continue;
      }
      subjectWeights.push_back(ctx.SubjectWeights({train, fold.test, fold.model.coef, fold.model.beta.cwiseProduct(scales)}));
      if (l < patterns.size()) {
        const std::size_t k = static_cast<std::size_t>(std::count(learnerOf.begin(), learnerOf.end(), l));  // this learner's successful fold k
        patternWeights.push_back(ctx.SubjectWeights({train, fold.test, patterns[l].at(k).c, Eigen::VectorXd::Ones(scales.size())}));
      }
      learnerOf.push_back(l);
    }
  // Intensity-scaled kernels are kernels of x_i / s_i: the map sum_i D_i (x_i / s_i) reads the raw images.
  if (!patternWeights.empty() && patternWeights.size() != subjectWeights.size())
    throw NumericalError("weights:Patterns", "activation patterns", "one pattern per fold map expected");  // a bug, not an input problem
  const std::size_t M = subjectWeights.size();
  subjectWeights.insert(subjectWeights.end(), std::make_move_iterator(patternWeights.begin()), std::make_move_iterator(patternWeights.end()));
  const bool withPatterns = subjectWeights.size() > M;
  // One pass over the images computes both kinds of map (weights first, then patterns); split them again.
  const auto split = [&](std::vector<std::vector<float>> computed) {
    std::vector<std::vector<float>> pattern(std::make_move_iterator(computed.begin() + static_cast<std::ptrdiff_t>(M)),
                                            std::make_move_iterator(computed.end()));
    computed.resize(M);
    return std::make_pair(std::move(computed), std::move(pattern));
  };
  if (!ks.set.intensityScale.empty())
    for (auto& D : subjectWeights)
      for (std::size_t i = 0; i < ctx.kernelRows.size(); ++i)
        D.row(static_cast<Eigen::Index>(i)) /= ks.set.intensityScale[static_cast<std::size_t>(ctx.kernelRows[i])];
  // The fold maps of one image grid -> per learner fold maps (unit norm if asked) and their mean;
  // multiclass: one mean map per class instead (`classMeans`, fold counts in `classFolds`).
  const auto collect = [&](std::vector<std::vector<float>> computed, std::vector<std::vector<std::vector<float>>>& folds,
                           std::vector<std::vector<float>>& means, std::vector<std::vector<std::vector<float>>>* classMeans, bool unitNorm = true) {
    folds.resize(learners.size());
    means.resize(learners.size());
    std::vector<int> classFolds(learners.size(), 0);
    for (std::size_t k = 0; k < computed.size(); ++k) {
      auto& map = computed[k];
      if (study.output.weightMapUnitNorm && unitNorm) {
        double norm = 0;
        for (float v : map) norm += static_cast<double>(v) * v;
        if (norm > 0)
          for (float& v : map) v = static_cast<float>(v / std::sqrt(norm));
      }
      if (!classOf.empty()) {  // multiclass: summed per class, averaged below
        if (!classMeans) continue;
        auto& perClass = (*classMeans)[learnerOf[k]];
        const auto c = static_cast<std::size_t>(classOf[k]);
        if (perClass.size() <= c) perClass.resize(c + 1);
        if (perClass[c].empty()) perClass[c].assign(map.size(), 0.0f);
        for (std::size_t v = 0; v < map.size(); ++v) perClass[c][v] += map[v];
        if (c == 0) ++classFolds[learnerOf[k]];
        continue;
      }
      folds[learnerOf[k]].push_back(std::move(map));
    }
    if (classMeans) {
      for (std::size_t l = 0; l < classMeans->size(); ++l)
        for (auto& m : (*classMeans)[l])
          for (float& v : m) v = static_cast<float>(v / std::max(1, classFolds[l]));
      if (!classOf.empty()) maps.classFolds = *std::max_element(classFolds.begin(), classFolds.end());
    }
    for (std::size_t l = 0; l < learners.size(); ++l) {
      if (folds[l].empty()) continue;
      std::vector<double> mean(folds[l][0].size(), 0.0);
      for (const auto& m : folds[l])
        for (std::size_t v = 0; v < m.size(); ++v) mean[v] += m[v];
      means[l].resize(mean.size());
      for (std::size_t v = 0; v < mean.size(); ++v) means[l][v] = static_cast<float>(mean[v] / static_cast<double>(folds[l].size()));
    }
  };
  if (ks.regions) {
    std::vector<std::string> images;
    for (auto r : ctx.kernelRows) images.push_back(ctx.cohort.images[static_cast<std::size_t>(r)]);
    auto [computed, pattern] = split(weights::VoxelMaps(images, *ks.regions, ks.set.info, subjectWeights, study.kernels.nanPolicy));
    collect(std::move(computed), maps.folds, maps.mean, &maps.classMean);
    if (withPatterns) collect(std::move(pattern), maps.patternFolds, maps.patternMean, nullptr, false);
  }
  // kernels.sources: each image source's kernels (a block of columns) mapped onto its own grid and
  // images (multiclass: one mean map per class).
  for (const auto& source : ks.imageSources) {
      const auto first = static_cast<Eigen::Index>(source.firstKernel), count = static_cast<Eigen::Index>(source.kernelCount);
      std::vector<Eigen::MatrixXd> sourceWeights;
      for (const auto& D : subjectWeights) sourceWeights.push_back(D.middleCols(first, count));
      const std::vector<kernels::KernelInfo> info(ks.set.info.begin() + first, ks.set.info.begin() + first + count);
      if (!source.intensityScale.empty())  // the source's own intensity scaling, as for a single image source above
        for (auto& D : sourceWeights)
          for (std::size_t i = 0; i < ctx.kernelRows.size(); ++i)
            D.row(static_cast<Eigen::Index>(i)) /= source.intensityScale[static_cast<std::size_t>(ctx.kernelRows[i])];
      std::vector<std::string> images;
      for (auto r : ctx.kernelRows) images.push_back(source.images[static_cast<std::size_t>(r)]);
      auto& out = maps.sources.emplace_back();
      out.name = source.name;
      out.regions = &source.regions;
      out.classMean.resize(learners.size());
      auto [computed, pattern] = split(weights::VoxelMaps(images, source.regions, info, sourceWeights, source.nanPolicy));
      collect(std::move(computed), out.folds, out.mean, classOf.empty() ? nullptr : &out.classMean);
      if (withPatterns) collect(std::move(pattern), out.patternFolds, out.patternMean, nullptr, false);
    }
  // Connectivity sources: the edge weights of the fold models (the matrices are read again, as the
  // images are for voxel maps), per learner and fold, and their mean.
  std::size_t first = 0;
  for (std::size_t s = 0; s < study.kernels.sources.size() && classOf.empty(); first += ks.sourceKernelCounts[s], ++s) {
    const auto& spec = study.kernels.sources[s];
    if (spec.kind != config::KernelSource::Connectivity) continue;
    const ConnectivityData data = ReadConnectivity(SourceStudy(study, spec), spec.connectivity, ctx.cohort);
    const ConnectivityKernelPlan plan = PlanConnectivityKernels(data, spec.connectivity.kernels);
    Eigen::VectorXi rows(static_cast<Eigen::Index>(ctx.kernelRows.size()));
    for (std::size_t i = 0; i < ctx.kernelRows.size(); ++i) rows[static_cast<Eigen::Index>(i)] = ctx.kernelRows[i];
    ConnectivityData inKernelOrder = data;
    inKernelOrder.edges = data.edges(rows, Eigen::all);
    // Kernel j of the set is the planned kernel of the same name (kernels that were all zero were excluded).
    std::vector<Eigen::Index> planOf;
    for (std::size_t j = first; j < first + ks.sourceKernelCounts[s]; ++j) {
      const std::string name = ks.set.info[j].name.substr(spec.name.size() + 1);
      planOf.push_back(std::find(plan.names.begin(), plan.names.end(), name) - plan.names.begin());
    }
    auto& out = maps.edges.emplace_back();
    out.name = spec.name;
    out.nodes = data.nodes;
    out.networks = data.networks;
    out.folds.resize(learners.size());
    out.mean.resize(learners.size());
    for (std::size_t k = 0; k < M; ++k) {  // weights only (a connection shared by two kernels would count twice in a pattern)
      Eigen::MatrixXd D = Eigen::MatrixXd::Zero(subjectWeights[k].rows(), static_cast<Eigen::Index>(plan.names.size()));
      for (std::size_t j = 0; j < planOf.size(); ++j) D.col(planOf[j]) = subjectWeights[k].col(static_cast<Eigen::Index>(first + j));
      out.folds[learnerOf[k]].push_back(WeightEdges(inKernelOrder, plan, D));
    }
    for (std::size_t l = 0; l < learners.size(); ++l) {
      if (out.folds[l].empty()) continue;
      Eigen::MatrixXd mean = Eigen::MatrixXd::Zero(out.folds[l][0].rows(), out.folds[l][0].cols());
      for (const auto& W : out.folds[l]) mean += W;
      out.mean[l] = mean / static_cast<double>(out.folds[l].size());
    }
  }
  return maps;
}

/// Multiclass metric keys with class names instead of label indices: recall_<class>, precision_<class>,
/// auc_<class>, confusion_<true>_<predicted>.
void NameClasses(cv::Summary& s, const std::vector<std::string>& names) {
  auto rename = [&](std::map<std::string, double>& m) {
    std::map<std::string, double> out;
    for (const auto& [k, v] : m) {
      std::string key = k;
      for (const std::string prefix : {"recall_", "precision_", "auc_"})
        if (k.rfind(prefix, 0) == 0 && std::isdigit(static_cast<unsigned char>(k[prefix.size()]))) key = prefix + names.at(std::stoul(k.substr(prefix.size())));
      if (k.rfind("confusion_", 0) == 0) {
        const auto parts = Split(k.substr(10), '_');
        key = "confusion_";
        key += names.at(std::stoul(parts.at(0)));
        key += "_";
        key += names.at(std::stoul(parts.at(1)));
      }
      out[key] = v;
    }
    m = std::move(out);
  };
  rename(s.pooled);
  rename(s.foldMean);
  rename(s.foldSd);
}

}  // namespace

CrossValidationResult RunCrossValidation(const StudyContext& ctx) {
  const learners::Targets targets = ctx.TargetsOf(ctx.cohort.y);
  CrossValidationResult result;
  auto outcomes = cv::RunNestedCv(*ctx.kernels, targets, ctx.outer, ctx.Inner(), ctx.plans, ctx.nestedOptions);
  for (std::size_t l = 0; l < outcomes.size(); ++l) {
    exporting::LearnerRecord lr;
    lr.summary = cv::Summarise(outcomes[l], targets);
    if (targets.task == learners::Task::Multiclass) NameClasses(lr.summary, ctx.cohort.classNames);
    for (const auto& [k, _] : ctx.study.learners[l].grid) lr.searched.push_back(k);
    if (ctx.study.learners[l].classWeightBalanced) lr.classWeight = "balanced";
    std::vector<std::string> given;
    for (const auto& [name, w] : ctx.study.learners[l].classWeights) given.push_back(name + " = " + FormatDouble(w));
    if (!given.empty()) lr.classWeight = Join(given, ", ");
    for (const auto& f : outcomes[l].folds)
      if (!f.error.empty()) result.warnings.push_back(fmt::format("learner {} fold {} failed: {}", outcomes[l].label, f.index, f.error));
    if (const double failed = lr.summary.pooled.at("failed_folds"); failed > 0)
      result.warnings.push_back(fmt::format("learner {}: {} of {} outer folds FAILED (no model, no prediction); its metrics are over the {} "
                                            "subjects of the successful folds only",
                                            outcomes[l].label, failed, outcomes[l].folds.size(), lr.summary.pooled.at("scored_subjects")));
    if (auto w = FitStatusWarning(outcomes[l])) result.warnings.push_back(*w);
    if (auto w = InnerFitStatusWarning(outcomes[l])) result.warnings.push_back(*w);
    for (auto& w : GridEdgeWarnings(outcomes[l], lr.searched)) result.warnings.push_back(std::move(w));
    lr.outcome = std::move(outcomes[l]);
    result.learners.push_back(std::move(lr));
  }
  for (const auto& w : result.warnings) spdlog::warn("{}", w);  // on the console too, not only in the outputs
  return result;
}

PooledBlock LoadOrComputePermutationBlock(const StudyContext& ctx, const std::string& checkpointDir, int block, bool* reused, Progress* progress) {
  const int first = block * kPermutationBlock;
  const int count = std::min(kPermutationBlock, ctx.study.permutations.count - first);
  const std::string path = PermutationBlockPath(checkpointDir, block);
  const std::string key = ctx.PermutationKey();
  const auto labels = ctx.LearnerLabels();
  if (reused) *reused = false;
  if (auto saved = exporting::LoadPermutationBlock(path, key);
      saved && saved->first == first && saved->learners == labels && static_cast<int>(saved->pooled.size()) == count) {
    if (reused) *reused = true;
    if (progress) progress->Advance(static_cast<std::size_t>(count));
    return std::move(saved->pooled);
  }
  PooledBlock pooled = ComputePermutationBlock(ctx, first, count, progress);
  try {
    exporting::SavePermutationBlock(path, {key, first, labels, pooled});
  } catch (const Error& e) {
    spdlog::warn("permutations: checkpoint not written ({}); the run continues without it", e.what());
  }
  return pooled;
}

PermutationResult RunPermutationTest(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& observed, const std::string& checkpointDir) {
  const int P = ctx.study.permutations.count;
  const int blockCount = (P + kPermutationBlock - 1) / kPermutationBlock;
  PermutationResult result;
  std::vector<PooledBlock> blocks;
  Progress progress("permutations", static_cast<std::size_t>(P));
  for (int b = 0; b < blockCount; ++b) {
    bool reused = false;
    blocks.push_back(LoadOrComputePermutationBlock(ctx, checkpointDir, b, &reused, &progress));
    result.blocksReused += reused;
  }
  progress.Finish();
  if (result.blocksReused > 0)
    spdlog::info("permutations: {} of {} blocks reused from the checkpoint in {}", result.blocksReused, blockCount, checkpointDir);
  for (std::size_t l = 0; l < observed.size(); ++l) result.learners.push_back(PermutationPValues(ctx, observed[l], blocks, l));
  return result;
}

RegionWeightsResult RunRegionWeights(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners) {
  RegionWeightsResult result;
  const bool multiclass = ctx.study.target.task == learners::Task::Multiclass;
  const bool perClass = multiclass && ctx.study.target.multiclassWeights == learners::MulticlassWeights::PerClass;
  const auto classes = static_cast<Eigen::Index>(ctx.cohort.classNames.size());
  const bool anyConnectivity = std::any_of(ctx.study.kernels.sources.begin(), ctx.study.kernels.sources.end(),
                                           [](const config::SourceSpec& s) { return s.kind == config::KernelSource::Connectivity; });
  // Activation patterns (binary and regression): per learner and successful fold, from the fold's training subjects.
  std::vector<std::vector<FoldPattern>> patterns;
  if (!multiclass) {
    patterns.resize(learners.size());
    result.patternTables.resize(learners.size());
    for (std::size_t l = 0; l < learners.size(); ++l) {
      std::vector<Eigen::VectorXd> norms;
      for (const auto& fold : learners[l].outcome.folds)
        if (fold.error.empty()) {
          patterns[l].push_back(FoldActivationPattern(ctx, fold));
          norms.push_back(patterns[l].back().norms);
        }
      result.patternTables[l] = weights::RegionTable(norms);
    }
  }
  if (ctx.study.output.weightMaps && (ctx.ks.regions.has_value() || !ctx.ks.imageSources.empty() || anyConnectivity)) {
    result.maps = ComputeWeightMaps(ctx, learners, patterns);  // multiclass: one mean map per class
    if (multiclass && anyConnectivity)
      result.warnings.push_back("multiclass study with a connectivity source: edge weights are not written for multiclass models yet (region tables rank every kernel)");
  }
  const gram::Preprocessing& preprocessing = ctx.nestedOptions.preprocessing;  // covariates included
  for (std::size_t l = 0; l < learners.size(); ++l) {
    const auto& lr = learners[l];
    const bool mkl = learners::FindLearner(lr.outcome.name)->multipleKernels;
    std::vector<Eigen::VectorXd> foldWeights;
    std::size_t successful = 0;  // this learner's successful folds so far (patterns[l] holds one per successful fold)
    std::vector<std::vector<Eigen::VectorXd>> classWeights(perClass ? static_cast<std::size_t>(classes) : 0);
    for (const auto& fold : lr.outcome.folds) {
      if (!fold.error.empty()) continue;
      const std::size_t k = successful++;
      if (mkl) {
        // Shared weights, or the mean of the per-class weights. With equal source weighting the learner saw
        // kernel r scaled by g_r: its share of the combined kernel is beta_r g_r (normalised to sum 1).
        Eigen::VectorXd scales;
        if (!preprocessing.kernelGroups.empty()) {
          std::vector<int> train = fold.train;
          train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
          scales = ctx.FoldScales(train, fold.test);
        }
        const auto share = [&](const Eigen::VectorXd& beta) -> Eigen::VectorXd {
          if (scales.size() == 0) return beta;
          const Eigen::VectorXd w = beta.cwiseProduct(scales);
          return w.sum() > 0 ? Eigen::VectorXd(w / w.sum()) : w;
        };
        foldWeights.push_back(share(fold.model.beta));
        for (Eigen::Index c = 0; c < static_cast<Eigen::Index>(classWeights.size()); ++c)
          classWeights[static_cast<std::size_t>(c)].push_back(share(fold.model.betas.cols() > c ? Eigen::VectorXd(fold.model.betas.col(c)) : fold.model.beta));
        continue;
      }
      if (multiclass) {
        // Per class ||w_rc|| = beta_r sqrt(coef_c' K_r coef_c); the shared share stacks the classes' parts:
        // ||w_r|| = sqrt(sum_c ||w_rc||^2) (the block the shared-weight MKL learners weigh, docs/learners.md).
        std::vector<int> train = fold.train;
        train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
        const auto R = static_cast<Eigen::Index>(ctx.KernelCount());
        const auto view = ctx.OpenFold(train, fold.test);
        const Eigen::VectorXd scales = view->Scales();
        Eigen::MatrixXd norms(R, classes);
        std::vector<std::size_t> every(static_cast<std::size_t>(R));
        std::iota(every.begin(), every.end(), std::size_t{0});
        const auto KC = view->Products(every, fold.model.coefs, scales);
        for (Eigen::Index r = 0; r < R; ++r)
          for (Eigen::Index c = 0; c < classes; ++c)
            norms(r, c) = weights::ModelNorm(fold.model.coefs.col(c).dot(KC[static_cast<std::size_t>(r)].col(c)), fold.model.beta[r]);
        foldWeights.push_back(norms.rowwise().norm());
        for (Eigen::Index c = 0; c < static_cast<Eigen::Index>(classWeights.size()); ++c) classWeights[static_cast<std::size_t>(c)].push_back(norms.col(c));
        continue;
      }
      // The region's share of the model, ||w_r||, from the fold's kernels as the learner saw them: the
      // quadratics coef' K~_r coef its activation pattern computed, else read from the kernels in place.
      Eigen::VectorXd norms(static_cast<Eigen::Index>(ctx.KernelCount()));
      if (l < patterns.size() && k < patterns[l].size()) {
        for (Eigen::Index j = 0; j < norms.size(); ++j) norms[j] = weights::ModelNorm(patterns[l][k].modelQuadratics[j], fold.model.beta[j]);
      } else {
        std::vector<int> train = fold.train;
        train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
        const auto view = ctx.OpenFold(train, fold.test);
        std::vector<std::size_t> every(ctx.KernelCount());
        std::iota(every.begin(), every.end(), std::size_t{0});
        const auto parts = view->Products(every, fold.model.coef, view->Scales());
        for (std::size_t r = 0; r < every.size(); ++r) {
          const auto j = static_cast<Eigen::Index>(r);
          norms[j] = weights::ModelNorm(fold.model.coef.dot(parts[r].col(0)), fold.model.beta[j]);
        }
      }
      foldWeights.push_back(std::move(norms));
    }
    result.tables.push_back(weights::RegionTable(foldWeights));
    result.classTables.emplace_back();
    for (const auto& w : classWeights) result.classTables.back().push_back(weights::RegionTable(w));
    const std::string scaled = preprocessing.kernelGroups.empty() ? "" : " times the fold's source scale g (source_weighting \"equal\"), renormalised";
    result.sources.push_back(mkl && perClass ? "mean of the per-class kernel weights (beta) per outer fold" + scaled + "; per class: regions_<learner>_class-<class>.tsv"
                             : mkl ? "kernel weights (beta) per outer fold" + scaled
                             : multiclass ? "share of the model per outer fold: ||w_r|| = sqrt(sum over classes of coef_c' K_r coef_c) with the fold's "
                                            "preprocessed training kernel, as a percentage of the fold's sum"
                                 : "share of the model per outer fold: ||w_r|| = sqrt(coef' K_r coef) with the fold's preprocessed training kernel "
                                   "(the norm of the region's part of the weight vector), as a percentage of the fold's sum");
  }
  return result;
}

exporting::RunRecord DescribeRun(const StudyContext& ctx, CrossValidationResult cv, PermutationResult permutations, const RegionWeightsResult& weights,
                                 std::map<std::string, double> seconds) {
  const auto& study = ctx.study;
  const auto& cohort = ctx.cohort;
  const auto& ks = ctx.ks;
  exporting::RunRecord record;
  record.learners = std::move(cv.learners);
  for (std::size_t l = 0; l < record.learners.size(); ++l) {
    auto& lr = record.learners[l];
    if (l < permutations.learners.size()) lr.permutations = std::move(permutations.learners[l]);
    lr.regions = weights.tables[l];
    lr.regionSource = weights.sources[l];
    if (l < weights.classTables.size()) lr.classRegions = weights.classTables[l];
    if (l < weights.patternTables.size()) lr.patternRegions = weights.patternTables[l];
  }
  for (const auto& w : weights.warnings) {
    cv.warnings.push_back(w);
    spdlog::warn("{}", w);
  }
  record.permutations = study.permutations.count;
  record.warnings = std::move(cv.warnings);
  for (const auto& w : ks.warnings) record.warnings.push_back(w);
  record.seconds = std::move(seconds);
  record.study = study.name;
  record.version = NeuromklVersion();
  record.versions = Versions();
  record.configPath = std::filesystem::absolute(study.path).string();
  record.seed = study.seed;
  record.cvSeed = study.cv.seed;
  record.outerScheme = DescribeSplit(study.cv.outer);
  record.innerScheme = DescribeSplit(study.cv.inner);
  record.task = config::ToString(study.target.task);
  record.targetColumn = study.target.column;
  record.positiveClass = cohort.positiveClass;
  if (study.target.task == learners::Task::Multiclass) {
    record.classNames = cohort.classNames;
    record.multiclassWeights = study.target.multiclassWeights == learners::MulticlassWeights::PerClass ? "per_class" : "shared";
  }
  record.innerCriterion = study.cv.criterion;
  record.negativeClass = cohort.negativeClass;
  record.excludedSubjects = cohort.excluded;
  record.droppedSubjects = cohort.dropped;
  if (ctx.unlabelledCount > 0)
    for (auto& [id, why] : record.excludedSubjects) why += "; used as unlabelled data by the semi-supervised learners";
  for (auto r : cohort.labelledRows) {
    record.labelledSubjects.push_back(cohort.ids[static_cast<std::size_t>(r)]);
    record.rawTargets.push_back(cohort.rawTargets[static_cast<std::size_t>(r)]);
  }
  record.targets.assign(cohort.y.data(), cohort.y.data() + cohort.y.size());
  for (std::size_t r = 0, e = 0; r < cohort.ids.size(); ++r) {
    const bool used = cohort.labelled[r];
    record.subjectTable.push_back({cohort.ids[r], used ? "yes" : ctx.unlabelledCount > 0 ? "unlabelled" : "no", cohort.rawTargets[r],
                                   used ? "" : record.excludedSubjects[e++].second});
  }
  record.kernels = ks.set.info;
  record.excludedKernels = ks.set.excluded;
  record.kernelSource = config::ToString(study.kernels.source);
  record.kernelCache = ks.cacheHit ? "hit" : (study.kernels.cache ? "computed and stored" : "computed (cache off)");
  record.kernelRanks = ks.owners ? ks.owners->Owners() : ks.cacheHit ? 1 : ks.report.ranks;
  record.kernelRankBudgetMb = study.kernels.memoryBudgetMb > 0 ? study.kernels.memoryBudgetMb : static_cast<double>(ks.report.rankBudgetBytes) / 1048576.0;
  if (!ks.set.intensityScale.empty()) {
    record.intensityScaling = study.kernels.intensity.scaling == kernels::IntensityScaling::GlobalMean
                                  ? "global_mean"
                                  : "reference_region: " + (study.kernels.intensity.referenceImage.empty() ? Join(study.kernels.intensity.referenceRegions, ", ")
                                                                                                            : study.kernels.intensity.referenceImage);
    for (auto r : ctx.kernelRows) record.intensityScale.push_back(ks.set.intensityScale[static_cast<std::size_t>(r)]);
  }
  record.subjectsWithSignal = ctx.subjectsWithSignal;
  if (ctx.kernels->Compact()) {
    record.compactBytes = gram::CompactBytes(ctx.kernels->Count(), static_cast<std::size_t>(ctx.kernels->Subjects()));
    record.compactCentred = ctx.kernels->Centred();
  }
  if (ks.owners) {
    record.kernelsHeldByRanks = true;
    record.kernelsHeldNote = ks.heldNote;
  }
  if (const auto total = ks.set.nonZeroInsideAtlas + ks.set.nonZeroOutsideAtlas; ks.set.nonZeroInsideAtlas >= 0 && total > 0)
    record.outsideAtlasShare = static_cast<double>(ks.set.nonZeroOutsideAtlas) / static_cast<double>(total);
  record.minSubjectsWithSignal = study.output.minSubjectsWithSignal;
  record.sourceWeighting = study.kernels.sourceWeighting == config::SourceWeighting::Equal ? "equal" : "none";
  for (std::size_t s = 0; s < ks.sourceNames.size(); ++s) {
    record.sourceNames.push_back(ks.sourceNames[s]);
    record.sourceKinds.push_back(config::ToString(study.kernels.sources[s].kind));
    record.sourceKernelCounts.push_back(ks.sourceKernelCounts[s]);
    record.sourceCache.push_back(ks.sourceCacheHits[s] ? "hit" : (study.kernels.cache ? "computed and stored" : "computed (cache off)"));
  }
  if (ctx.covariates) {
    record.covariateColumns = ctx.covariates->columns;
    record.covariateFitOn = ctx.covariates->fitOn;
    // Labelled subjects are the design's first n rows.
    record.covariateTargetR2 = gram::CovariateR2(ctx.covariates->covariates.design.topRows(ctx.n), cohort.y);
    if (record.covariateTargetR2 >= kCovariateR2Warning) {
      record.warnings.push_back(fmt::format("the covariates explain R^2 = {:.3f} of the target (warned from {}): regressing them out of the images "
                                            "removed most of what could predict it, so low performance may only mean that the covariates carry "
                                            "the target; check that no covariate recodes it",
                                            record.covariateTargetR2, kCovariateR2Warning));
      spdlog::warn("{}", record.warnings.back());
    }
  }
  record.centre = study.kernels.centre;
  record.normalise = study.kernels.normalise;
  record.threads = study.threads;
  record.description = study.description;
  if (study.kernels.source == config::KernelSource::Images) {
    std::vector<std::string> images;
    for (const auto& part : study.atlas.parts) images.push_back(part.image + (part.probabilistic ? " (probabilistic)" : ""));
    record.atlas = !study.atlas.builtin.empty() ? study.atlas.builtin : images.empty() ? study.atlas.image : Join(images, " + ");
    record.atlasSpace = study.atlas.space;
    record.builtinAtlas = study.atlas.builtin;
  }
  if (!study.subjects.bids.root.empty()) {
    record.bidsRoot = std::filesystem::absolute(study.subjects.bids.root).lexically_normal().string();
    if (!study.subjects.bids.derivatives.empty())
      record.bidsDerivatives = std::filesystem::absolute(study.subjects.bids.derivatives).lexically_normal().string();
  }
  record.weightMapUnitNorm = study.output.weightMapUnitNorm;
  record.nanPolicy = study.kernels.nanPolicy == kernels::NanPolicy::Zero ? "zero" : "drop_voxel";
  record.mask = study.mask;
  record.date = UtcNow();
  for (const auto& lr : record.learners) {
    std::vector<std::string> fragile;
    for (std::size_t i = 0; i < std::min<std::size_t>(10, lr.regions.size()); ++i)
      if (const auto k = lr.regions[i].kernel; exporting::LowCoverage(record, k) && lr.regions[i].meanPercent > 0)
        fragile.push_back(fmt::format("{} ({} subjects)", record.kernels[k].name, record.subjectsWithSignal[k]));
    if (!fragile.empty()) {
      record.warnings.push_back(fmt::format("learner {}: regions among its top 10 have non-zero data in fewer than {} subjects: {}; their weights rest "
                                            "on those few subjects",
                                            lr.outcome.label, record.minSubjectsWithSignal, Join(fragile, ", ")));
      spdlog::warn("{}", record.warnings.back());
    }
  }
  Hasher inputHash;
  // What was analysed, not how or where it was run: the thread count, the output and cache folders
  // (which change no result) stay out, so one analysis has one hash.
  config::StudyConfig hashed = study;
  hashed.threads = 0;
  hashed.output.dir.clear();
  hashed.output.cacheDir.clear();
  inputHash.Update(ks.key).Update(HashFile(study.subjects.table)).Update(config::ResolvedConfigJson(hashed, true));
  record.inputHash = inputHash.Hex();
  return record;
}

void WriteStudyOutputs(StudyContext& ctx, exporting::RunRecord& record, const RegionWeightsResult& weights, const OutputRequest& request,
                       std::chrono::steady_clock::time_point start) {
  const auto& study = ctx.study;
  WriteTextFile(request.dir + "/study.resolved.json", config::ResolvedConfigJson(study) + "\n");
  if (study.output.saveKernels) {
    // Held by MPI ranks: each writes its own; moved into the study's kernels: written from there.
    SaveStageKernels(request.dir + "/kernels", ctx.ks, "raw region kernels of study " + study.name, ctx.movedKernels);
  }
  const io::Geometry* grid = ctx.ks.regions ? &ctx.ks.regions->grid : nullptr;
  exporting::WriteStudyTables(request.dir, record, weights.maps, grid);
  record.seconds["total"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  exporting::WriteStudyRecord(request.dir, record, weights.maps, ctx.ks.regions ? &*ctx.ks.regions : nullptr);
  for (const auto& [name, content] : request.extraFiles) WriteTextFile(request.dir + "/" + name, content);
}

std::vector<std::string> SummaryLines(const exporting::RunRecord& record, std::size_t outerFolds) {
  std::vector<std::string> lines;
  for (const auto& lr : record.learners) {
    const auto& m = lr.summary.pooled;
    auto pv = [&](const char* k) { return lr.permutations.pValues.count(k) ? fmt::format(" (p = {:.3g})", lr.permutations.pValues.at(k)) : std::string(); };
    auto sd = [&](const char* k) { return lr.summary.foldSd.count(k) ? fmt::format(" +- {:.3f}", lr.summary.foldSd.at(k)) : std::string(); };
    if (record.task == "multiclass")
      lines.push_back(fmt::format("{:<12} macro balanced accuracy {:.3f}{}{}, macro AUC {:.3f}{}, kappa {:.3f}, accuracy {:.3f}", lr.outcome.label,
                                  m.at("balanced_accuracy"), sd("balanced_accuracy"), pv("balanced_accuracy"), m.at("macro_auc"), pv("macro_auc"),
                                  m.at("kappa"), m.at("accuracy")));
    else if (record.task == "classification")
      lines.push_back(fmt::format("{:<12} balanced accuracy {:.3f}{}{}, AUC {:.3f}{}, accuracy {:.3f} [{:.3f}, {:.3f}]", lr.outcome.label,
                                  m.at("balanced_accuracy"), sd("balanced_accuracy"), pv("balanced_accuracy"), m.at("auc"), pv("auc"), m.at("accuracy"),
                                  m.at("accuracy_ci95_low"), m.at("accuracy_ci95_high")));
    else
      lines.push_back(fmt::format("{:<12} r {:.3f}{}{}, R^2 {:.3f}{}, MSE {:.4g}{}{}", lr.outcome.label, m.at("pearson_r"), sd("pearson_r"),
                                  pv("pearson_r"), m.at("r2"), pv("r2"), m.at("mse"), sd("mse"), pv("mse")));
  }
  for (const auto& lr : record.learners)
    if (const auto f = lr.summary.pooled.find("failed_folds"); f != lr.summary.pooled.end() && f->second > 0)
      lines.push_back(fmt::format("{:<12} WARNING: {} of {} outer folds FAILED; metrics over the {} subjects of the successful folds only",
                                  lr.outcome.label, f->second, lr.outcome.folds.size(), lr.summary.pooled.at("scored_subjects")));
  lines.push_back(fmt::format("(pooled over out-of-fold predictions; +- SD over {} outer folds; {:.1f} s)", outerFolds, record.seconds.at("total")));
  return lines;
}

}  // namespace neuromkl::pipeline
