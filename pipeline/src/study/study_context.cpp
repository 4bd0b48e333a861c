// Stages 1 and 2 of a study (inputs and kernels) and the permutation blocks, shared by RunStudy
// and the batch workers.
#include "neuromkl/pipeline/study_context.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/system.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/gram/owners.hpp"
#include "neuromkl/pipeline/harmonisation.hpp"
#include "neuromkl/pipeline/sources.hpp"
#include "neuromkl/ranks/held_kernels.hpp"

namespace neuromkl::pipeline {

namespace {

cv::SplitSpec ToSplit(const config::CvSchemeSpec& s) { return {s.scheme, s.k, s.repeats}; }

template <typename T>
std::vector<T> Pick(const std::vector<T>& v, const std::vector<int>& idx) {
  std::vector<T> out;
  if (v.empty()) return out;
  for (int i : idx) out.push_back(v[static_cast<std::size_t>(i)]);
  return out;
}

/// The cohort rows the kernels cover: labelled subjects first; subjects without a target follow when a
/// semi-supervised learner will use them as unlabelled data (they are never test subjects).
std::vector<int> KernelRows(const config::StudyConfig& study, const Cohort& cohort) {
  bool semiSupervised = false;
  for (const auto& spec : study.learners)
    if (const auto* info = learners::FindLearner(spec.name); info && info->semiSupervised) semiSupervised = true;
  std::vector<int> rows = cohort.labelledRows;
  if (semiSupervised)
    for (std::size_t r = 0; r < cohort.ids.size(); ++r)
      if (!cohort.labelled[r]) rows.push_back(static_cast<int>(r));
  return rows;
}

}  // namespace

ThreadLimit::ThreadLimit(int threads) {
  if (threads > 0) control_ = std::make_shared<tbb::global_control>(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
}

cv::InnerSplitter StudyContext::Inner() const {
  const auto spec = ToSplit(study.cv.inner);
  return [this, spec](std::size_t f, const std::vector<int>& train, const Eigen::VectorXd& yTrain) {
    return cv::MakeFolds(spec, study.target.task, yTrain, Pick(cohort.groups, train), Pick(cohort.customFolds, train),
                         cv::DeriveSeed(study.cv.seed, 1000 + f), study.path + " /cv/inner (outer fold " + std::to_string(f) + ")");
  };
}

cv::InnerSplitter StudyContext::FinalInner() const {
  const auto spec = ToSplit(study.cv.inner);
  return [this, spec](std::size_t, const std::vector<int>& train, const Eigen::VectorXd& yTrain) {
    return cv::MakeFolds(spec, study.target.task, yTrain, Pick(cohort.groups, train), Pick(cohort.customFolds, train),
                         cv::DeriveSeed(study.cv.seed, 0x46494E414CULL), study.path + " /cv/inner (final model)");  // "FINAL"
  };
}

std::uint64_t StudyContext::PermutationSeed() const { return cv::DeriveSeed(study.seed, 0x5045524DULL); }  // "PERM"

std::string StudyContext::PermutationKey() const {
  config::StudyConfig neutral = study;
  neutral.output = {};
  neutral.threads = 0;
  neutral.statistics = {};  // statistics and analyses after the nested CV: no permutation depends on them
  neutral.regionScan = {};
  neutral.ablation = {};
  Hasher h;
  // v2: the blocks keep the kernel shares besides the metrics.
  h.Update(std::string_view("neuromkl-permutations-v2")).Update(ks.key).Update(HashFile(study.subjects.table));
  h.Update(config::ResolvedConfigJson(neutral, true)).Update(static_cast<std::uint64_t>(kPermutationBlock));
  return h.Hex();
}

std::vector<std::string> StudyContext::LearnerLabels() const {
  std::vector<std::string> labels;
  for (const auto& p : plans) labels.push_back(p.label);
  return labels;
}

std::unique_ptr<gram::PreparedFold> StudyContext::OpenFold(const std::vector<int>& train, const std::vector<int>& test) const {
  return kernels->OpenFold(train, test, nestedOptions.preprocessing);
}

Eigen::VectorXd StudyContext::FoldScales(const std::vector<int>& train, const std::vector<int>& test) const {
  return gram::FoldScales(*kernels, train, test, nestedOptions.preprocessing);
}

std::vector<char> StudyContext::SourceRowsPresent(const std::string& name) const {
  const auto at = static_cast<std::size_t>(std::find(ks.sourceNames.begin(), ks.sourceNames.end(), name) - ks.sourceNames.begin());
  std::vector<char> present(kernelRows.size(), 1);
  if (at >= ks.sourcePresent.size() || ks.sourcePresent[at].empty()) return present;
  for (std::size_t i = 0; i < kernelRows.size(); ++i) present[i] = ks.sourcePresent[at][static_cast<std::size_t>(kernelRows[i])];
  return present;
}

Eigen::MatrixXd StudyContext::SubjectWeights(const gram::FoldModel& model) const { return kernels->SubjectWeights(model, nestedOptions.preprocessing); }

Eigen::VectorXd StudyContext::LargestTrainingSelfSimilarity(const std::vector<int>& train) const {
  return kernels->LargestCentredSelfSimilarities(train, nestedOptions.preprocessing);
}

learners::Targets StudyContext::TargetsOf(const Eigen::VectorXd& y) const {
  return {study.target.task, y, study.target.task == learners::Task::Multiclass ? static_cast<int>(cohort.classNames.size()) : 0};
}

namespace {
bool Stratified(cv::Scheme s) { return s == cv::Scheme::StratifiedKFold || s == cv::Scheme::RepeatedKFold; }

/// Multiclass: every class must fill the stratified folds, outer and (where a grid is searched)
/// inner; the error names the class.
void CheckClassSizes(const StudyContext& ctx) {
  const auto& study = ctx.study;
  const auto& names = ctx.cohort.classNames;
  if (study.target.task != learners::Task::Multiclass) return;
  const int outerK = study.cv.outer.k, innerK = study.cv.inner.k;
  for (const auto& [name, count] : ctx.cohort.classCounts)
    if (Stratified(study.cv.outer.scheme) && count < outerK)
      throw InputError("subjects:ClassTooSmall", study.subjects.table,
                       fmt::format("class \"{}\" of column \"{}\" has {} subjects, fewer than the {} outer folds (/cv/outer/k): each fold needs "
                                   "one; use a smaller k, leave_one_out, or set this class to n/a",
                                   name, study.target.column, count, outerK));
  bool search = false;
  for (const auto& p : ctx.plans) search |= p.grid.size() > 1;
  if (!search || !Stratified(study.cv.inner.scheme)) return;
  for (const auto& fold : ctx.outer)
    for (std::size_t c = 0; c < names.size(); ++c) {
      int count = 0;
      for (int i : fold.train) count += ctx.cohort.y[i] == static_cast<double>(c) ? 1 : 0;
      if (count < innerK)
        throw InputError("subjects:ClassTooSmall", study.subjects.table,
                         fmt::format("class \"{}\" of column \"{}\" has {} subjects in the training set of outer fold {}, fewer than the {} "
                                     "inner folds (/cv/inner/k); use a smaller inner k, fix the parameters (no inner search), or set this "
                                     "class to n/a",
                                     names[c], study.target.column, count, &fold - ctx.outer.data(), innerK));
    }
}
}  // namespace

namespace {
/// A learner's class_weight with class names turned into labels (+1 / -1, or the multiclass index);
/// ConfigError at the JSON pointer for a name that is not a class of the target.
learners::ClassWeights ClassWeightsOf(const config::StudyConfig& study, const Cohort& cohort, std::size_t learner) {
  const auto& spec = study.learners[learner];
  learners::ClassWeights w;
  w.balanced = spec.classWeightBalanced;
  std::vector<std::string> classes;
  for (const auto& [name, count] : cohort.classCounts) classes.push_back(name);
  for (const auto& [name, weight] : spec.classWeights) {
    double label = std::nan("");
    if (study.target.task == learners::Task::Multiclass) {
      for (std::size_t c = 0; c < cohort.classNames.size(); ++c)
        if (cohort.classNames[c] == name) label = static_cast<double>(c);
    } else if (name == cohort.positiveClass) {
      label = 1.0;
    } else if (name == cohort.negativeClass) {
      label = -1.0;
    }
    if (std::isnan(label)) {
      std::string where = "/learners/";
      where += std::to_string(learner);
      where += "/class_weight/";
      where += name;
      throw ConfigError("config:Value", study.path,
                        fmt::format("{}: \"{}\" is not a class of column \"{}\"; its classes: {}", where, name, study.target.column, Join(classes, ", ")));
    }
    w.given[label] = weight;
  }
  return w;
}
}  // namespace

namespace {
/// Calls visit(train, test, name) for every training set the study fits on, its test (or validation) subjects, and a
/// name for messages: the outer folds, their inner folds where parameters are searched, and the final model's inner folds.
template <typename Visit>
void ForEachTrainingSet(const StudyContext& ctx, const Visit& visit) {
  const auto innerFolds = [&](const cv::InnerSplitter& inner, std::size_t outer, const std::vector<int>& train, const std::string& name) {
    Eigen::VectorXd y(static_cast<Eigen::Index>(train.size()));
    for (std::size_t i = 0; i < train.size(); ++i) y[static_cast<Eigen::Index>(i)] = ctx.cohort.y[train[i]];
    const auto folds = inner(outer, train, y);
    for (std::size_t k = 0; k < folds.size(); ++k) {
      std::vector<int> innerTrain, innerTest;
      for (const int position : folds[k].train) innerTrain.push_back(train[static_cast<std::size_t>(position)]);
      for (const int position : folds[k].test) innerTest.push_back(train[static_cast<std::size_t>(position)]);
      visit(innerTrain, innerTest, fmt::format("inner fold {} of {}", k + 1, name));
    }
  };
  bool search = false;
  for (const auto& p : ctx.plans) search |= p.grid.size() > 1;
  for (std::size_t f = 0; f < ctx.outer.size(); ++f) {
    const std::string name = fmt::format("outer fold {} (of {})", f + 1, ctx.outer.size());
    visit(ctx.outer[f].train, ctx.outer[f].test, name);
    if (search) innerFolds(ctx.Inner(), f, ctx.outer[f].train, name);
  }
  if (ctx.study.output.model) {
    std::vector<int> all(static_cast<std::size_t>(ctx.n));
    for (int i = 0; i < ctx.n; ++i) all[static_cast<std::size_t>(i)] = i;
    if (search) innerFolds(ctx.FinalInner(), 0, all, "the final model's inner CV");
  }
}

/// covariates.fit_on (and target.confounds.fit_on): every training set must hold some of the subjects the coefficients
/// are fitted on. Checked here, before any heavy work, naming the fold.
void CheckFitRowsInEveryFold(const StudyContext& ctx, const CovariateDesign* design, const config::CovariateSpec& spec) {
  if (!design || design->covariates.fitRow.empty()) return;
  const auto& fitRow = design->covariates.fitRow;
  ForEachTrainingSet(ctx, [&](const std::vector<int>& train, const std::vector<int>&, const std::string& fold) {
    for (const int i : train)
      if (fitRow[static_cast<std::size_t>(i)]) return;
    throw InputError("covariates:NoFitRows", ctx.study.path + " " + spec.fitOnPointer,
                     fmt::format("no training subject of {} ({} subjects) has \"{}\" in column \"{}\", so the {} coefficients cannot be "
                                 "fitted there; use fit_on \"all\", or a split that keeps such subjects in every training set (e.g. stratify "
                                 "or group by that column)",
                                 fold, train.size(), spec.fitOnValue, spec.fitOnColumn, &spec == &ctx.study.covariates ? "covariate" : "confound"));
  });
}

/// /target/confounds: their design over the labelled subjects, refused when they determine the target (nothing would be
/// left to predict).
std::shared_ptr<const CovariateDesign> TargetConfoundDesign(const StudyContext& ctx) {
  const config::StudyConfig& study = ctx.study;
  auto design = std::make_shared<const CovariateDesign>(BuildCovariateDesign(study, study.target.confounds, ctx.cohort, ctx.cohort.labelledRows));
  const double r2 = gram::CovariateR2(CohortImputedDesign(*design), ctx.cohort.y);
  if (r2 >= kCovariateR2Refused)
    throw InputError("target:ConfoundsExplainTarget", study.path + " /target/confounds",
                     fmt::format("the confounds ({}) explain R^2 = {:.3f} of the target \"{}\" (at most {} accepted): regressed out, they leave "
                                 "nothing to predict. A confound copies or recodes the target: remove it",
                                 Join(design->columns, ", "), r2, study.target.column, kCovariateR2Refused));
  return design;
}

/// A fold imputes a missing value from its training subjects, so every training set needs some value in each column
/// (`columns`: over the kernels' rows, NaN = missing). Checked before any heavy work: InputError `code` at `pointer`,
/// naming the fold, the column (`nameOf`, a `kind` of column) and the test subjects lacking it.
template <typename NameOf>
void CheckValuesInEveryTrainingSet(const StudyContext& ctx, const Eigen::MatrixXd& columns, const NameOf& nameOf, const char* kind, const char* code,
                                   const std::string& pointer) {
  if (!columns.hasNaN()) return;
  const std::vector<int> rows = KernelRows(ctx.study, ctx.cohort);
  ForEachTrainingSet(ctx, [&](const std::vector<int>& train, const std::vector<int>& test, const std::string& fold) {
    for (Eigen::Index j = 0; j < columns.cols(); ++j) {
      if (!columns.col(j).hasNaN() || std::any_of(train.begin(), train.end(), [&](int i) { return !std::isnan(columns(i, j)); })) continue;
      std::vector<std::string> lacking;
      for (const int i : test)
        if (std::isnan(columns(i, j))) lacking.push_back(ctx.cohort.ids[static_cast<std::size_t>(rows[static_cast<std::size_t>(i)])]);
      throw InputError(code, ctx.study.path + " " + pointer,
                       fmt::format("none of the {} training subjects of {} has a value in {} \"{}\", so its missing values there cannot be imputed "
                                   "(test subjects lacking it: {}); fill in some of them, or use a split that spreads them",
                                   train.size(), fold, kind, nameOf(j), lacking.empty() ? std::string("none") : Join(lacking, ", ")));
    }
  });
}

/// covariates.impute (and harmonisation.covariates.impute). `columns`: the design's columns without the intercept (rows:
/// the kernels' rows); `categoryOf`: per column.
void CheckImputationInEveryFold(const StudyContext& ctx, const Eigen::MatrixXd& columns, const std::vector<int>& categoryOf,
                                const config::CovariateSpec& spec) {
  auto nameOf = [&](Eigen::Index j) {
    const auto c = static_cast<std::size_t>(j);
    return c < spec.columns.size() ? spec.columns[c] : spec.categorical[static_cast<std::size_t>(categoryOf[c])];
  };
  CheckValuesInEveryTrainingSet(ctx, columns, nameOf, "covariate column", "covariates:NothingToImpute", spec.pointer + "/impute");
}

/// kernels.tabular.impute: the same for every tabular source imputed inside the folds.
void CheckTabularImputationInEveryFold(const StudyContext& ctx) {
  const std::vector<int> rows = KernelRows(ctx.study, ctx.cohort);
  for (const TabularSection& part : TabularSections(ctx.study)) {
    if (!part.study.kernels.tabular.imputeMedian) continue;
    const TabularFeatureTable table = TabularFeatures(part.study, ctx.cohort);
    const Eigen::MatrixXd X = table.X(Eigen::Map<const Eigen::VectorXi>(rows.data(), static_cast<Eigen::Index>(rows.size())), Eigen::all);
    CheckValuesInEveryTrainingSet(
        ctx, X, [&](Eigen::Index j) { return table.columns[static_cast<std::size_t>(j)]; }, "feature column", "tabular:NothingToImpute", part.pointer + "/impute");
  }
}

/// kernels.missing_source "impute": every training set imputes a source's lacking subjects from its subjects having it.
void CheckSourcesInEveryTrainingSet(const StudyContext& ctx) {
  if (ctx.cohort.imputedSources.empty()) return;
  const std::vector<int> rows = KernelRows(ctx.study, ctx.cohort);
  std::vector<std::string> names;
  Eigen::MatrixXd has = Eigen::MatrixXd::Ones(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(ctx.cohort.imputedSources.size()));
  for (const auto& [name, lacking] : ctx.cohort.imputedSources) {
    std::set<std::string> ids;
    for (const auto& [id, why] : lacking) ids.insert(id);
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (ids.count(ctx.cohort.ids[static_cast<std::size_t>(rows[i])]))
        has(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(names.size())) = std::numeric_limits<double>::quiet_NaN();
    names.push_back(name);
  }
  CheckValuesInEveryTrainingSet(
      ctx, has, [&](Eigen::Index j) { return names[static_cast<std::size_t>(j)]; }, "source", "sources:NoneToImpute", "/kernels/missing_source");
}

/// harmonisation: ComBat estimates each site's effects from the training subjects (of the reference group) of every
/// fold, and applies them to the fold's test subjects: every site among a fold's subjects needs at least two of them in
/// its training set. Checked here, before any heavy work, naming the fold, the site and the subjects.
void CheckSitesInEveryFold(const StudyContext& ctx) {
  if (!ctx.harmonisation) return;
  const gram::Harmonisation& h = *ctx.harmonisation;
  const auto& spec = ctx.study.harmonisation;
  const std::string reference =
      spec.preserve.fitOnColumn.empty() ? "" : fmt::format(" with \"{}\" in column \"{}\" (fit_on)", spec.preserve.fitOnValue, spec.preserve.fitOnColumn);
  ForEachTrainingSet(ctx, [&](const std::vector<int>& train, const std::vector<int>& test, const std::string& fold) {
    std::vector<int> fitting(h.siteNames.size(), 0), present(h.siteNames.size(), 0);
    for (const int i : train) {
      const auto s = static_cast<std::size_t>(h.sites[static_cast<std::size_t>(i)]);
      ++present[s];
      if (h.fitRow.empty() || h.fitRow[static_cast<std::size_t>(i)]) ++fitting[s];
    }
    for (const int i : test) ++present[static_cast<std::size_t>(h.sites[static_cast<std::size_t>(i)])];
    for (std::size_t s = 0; s < present.size(); ++s) {
      if (present[s] == 0 || fitting[s] >= 2) continue;
      std::vector<std::string> ids;
      for (const int i : test)  // labelled subjects: position i is cohort row labelledRows[i]
        if (static_cast<std::size_t>(h.sites[static_cast<std::size_t>(i)]) == s)
          ids.push_back(ctx.cohort.ids[static_cast<std::size_t>(ctx.cohort.labelledRows[static_cast<std::size_t>(i)])]);
      throw InputError("harmonisation:SiteTooSmall", ctx.study.path + " /harmonisation/site_column",
                       fmt::format("site \"{}\" (column \"{}\") has {} training subject(s){} in {}, and ComBat needs at least 2 to estimate its "
                                   "effects{}; merge small sites, or use a split that keeps every site in every training set (stratify or group "
                                   "by the site column)",
                                   h.siteNames[s], spec.siteColumn, fitting[s], reference, fold,
                                   ids.empty() ? std::string() : fmt::format(" (its test subjects there: {})", Join(ids, ", "))));
    }
  });
}
}  // namespace

StudyContext LoadStudyInputs(const config::StudyConfig& study) {
  StudyContext ctx;
  ctx.study = study;
  ctx.cohort = LoadStudyCohort(study);
  ctx.study.subjects.idColumn = ctx.cohort.idColumn;  // as the table decided it: the resolved study and the exported model name it
  ctx.n = static_cast<int>(ctx.cohort.y.size());
  // Splits before any heavy work: an impossible CV plan is a config/input error, found in seconds.
  if (study.target.task == learners::Task::Multiclass && Stratified(study.cv.outer.scheme))
    for (const auto& [name, count] : ctx.cohort.classCounts)
      if (count < study.cv.outer.k) CheckClassSizes(ctx);  // names the class (before MakeFolds' generic message)
  ctx.outer = cv::MakeFolds(ToSplit(study.cv.outer), study.target.task, ctx.cohort.y, ctx.cohort.groups, ctx.cohort.customFolds, study.cv.seed,
                            study.path + " /cv/outer");
  if (study.covariates.Active()) {
    ctx.covariates = std::make_shared<const CovariateDesign>(BuildCovariateDesign(study, study.covariates, ctx.cohort, KernelRows(study, ctx.cohort)));
    // Covariates are regressed out of the images: when they determine the target, nothing that predicts it is left.
    const double r2 = gram::CovariateR2(CohortImputedDesign(*ctx.covariates).topRows(ctx.n), ctx.cohort.y);
    if (r2 >= kCovariateR2Refused)
      throw InputError("covariates:ExplainTarget", study.path,
                       fmt::format("/covariates: the covariates ({}) explain R^2 = {:.3f} of the target \"{}\" over the labelled subjects (at most {} "
                                   "accepted): regressing them out of the images would remove everything that could predict it. A covariate "
                                   "copies or recodes the target, or is confounded with it completely: remove it",
                                   Join(ctx.covariates->columns, ", "), r2, study.target.column, kCovariateR2Refused));
  }
  if (study.target.confounds.Active()) ctx.targetConfounds = TargetConfoundDesign(ctx);
  if (study.harmonisation.Active()) ctx.harmonisation = BuildHarmonisationDesign(study, ctx.cohort, KernelRows(study, ctx.cohort));
  for (std::size_t l = 0; l < study.learners.size(); ++l) {
    const auto& spec = study.learners[l];
    learners::ParamMap fixed = spec.params;
    for (const auto& [k, _] : spec.grid) fixed.erase(k);
    ctx.plans.push_back({spec.label, spec.name, cv::ExpandGrid(fixed, spec.grid), ClassWeightsOf(study, ctx.cohort, l)});
  }
  CheckClassSizes(ctx);
  CheckFitRowsInEveryFold(ctx, ctx.covariates.get(), study.covariates);
  CheckFitRowsInEveryFold(ctx, ctx.targetConfounds.get(), study.target.confounds);
  for (const auto& [design, spec] : {std::pair{ctx.covariates.get(), &study.covariates}, std::pair{ctx.targetConfounds.get(), &study.target.confounds}})
    if (design) {
      const gram::Covariates& c = design->covariates;
      CheckImputationInEveryFold(ctx, c.design.rightCols(c.design.cols() - 1), std::vector<int>(c.categoryOf.begin() + 1, c.categoryOf.end()), *spec);
    }
  if (ctx.harmonisation) CheckImputationInEveryFold(ctx, ctx.harmonisation->covariates, ctx.harmonisation->categoryOf, study.harmonisation.preserve);
  CheckTabularImputationInEveryFold(ctx);
  CheckSourcesInEveryTrainingSet(ctx);
  CheckSitesInEveryFold(ctx);
  return ctx;
}

void AttachKernels(StudyContext& ctx, const std::string& scratchDir) {
  ctx.ks = RunKernelStage(ctx.study, ctx.cohort, scratchDir);
  ctx.kernelRows = KernelRows(ctx.study, ctx.cohort);
  ctx.unlabelledCount = static_cast<int>(ctx.kernelRows.size()) - ctx.n;
  ctx.kernels.reset();
  ctx.foldFormedKernels.reset();
  ctx.movedKernels = nullptr;
  bool identity = ctx.kernelRows.size() == ctx.cohort.ids.size();
  for (std::size_t i = 0; identity && i < ctx.kernelRows.size(); ++i) identity = ctx.kernelRows[i] == static_cast<int>(i);
  const Eigen::VectorXi rows = Eigen::Map<const Eigen::VectorXi>(ctx.kernelRows.data(), static_cast<Eigen::Index>(ctx.kernelRows.size()));
  ctx.subjectsWithSignal.clear();
  if (ctx.ks.features) {
    // Kernels in feature form: the voxels of the rows the learners see, kept in place (at the sizes features are for, a
    // copy of the matrix would not fit beside it).
    for (const auto& d : ctx.ks.set.rawDiagonals) ctx.subjectsWithSignal.push_back(static_cast<int>((d(rows).array() > 0).count()));
    std::shared_ptr<gram::FeatureMatrix> features = std::move(ctx.ks.features);
    if (!identity) features->KeepRows(ctx.kernelRows);
    // A fold whose kernels fit the budget (kernels.memory_budget_mb, else an eighth of the memory) forms them: far
    // faster at small n; at the sizes the feature form is for, the learners run on the features.
    const std::uint64_t budget = ctx.study.kernels.memoryBudgetMb > 0 ? static_cast<std::uint64_t>(ctx.study.kernels.memoryBudgetMb * 1048576.0)
                                                                      : PhysicalMemoryBytes() / 8;
    ctx.kernels = gram::MakeFeatureKernels(std::move(features), budget);
  } else if (ctx.ks.owners) {
    // Kernels that do not fit one rank (under mpirun): the ranks hold them; they keep the rows the learners see.
    for (const auto& d : ctx.ks.set.rawDiagonals) ctx.subjectsWithSignal.push_back(static_cast<int>((d(rows).array() > 0).count()));
    if (!identity) ctx.ks.owners->SelectRows(ctx.kernelRows);
    ctx.kernels = ctx.ks.owners;
  } else if (ctx.ks.set.Compact()) {
    // A float32 study: the kernel stage rounded each kernel into the compact store as it was formed (centred with
    // the mean over every cohort subject when the folds centre: the precision argument of gram::CompactKernel,
    // exact for any subset of rows), so the study never held all its float64 kernels. A subset of rows
    // (semi-supervised order) is taken from the store, one kernel at a time.
    for (const auto& d : ctx.ks.set.rawDiagonals) ctx.subjectsWithSignal.push_back(static_cast<int>((d(rows).array() > 0).count()));
    gram::CompactKernelList compact = std::move(ctx.ks.set.compact);
    ctx.ks.set.compact = {};
    if (!identity)
      for (auto& K : compact.kernels) K = Eigen::MatrixXf(K(rows, rows));
    ctx.kernels = std::make_shared<const gram::MemoryKernels>(std::move(compact));
  } else {
    for (const auto& K : ctx.ks.set.kernels) ctx.subjectsWithSignal.push_back(static_cast<int>((K.diagonal()(rows).array() > 0).count()));
    learners::KernelList kernels;
    if (identity) {  // every subject, in table order: the learners use the kernels themselves (no second copy)
      kernels = std::move(ctx.ks.set.kernels);
    } else {
      for (const auto& K : ctx.ks.set.kernels) kernels.push_back(K(rows, rows));
    }
    if (FoldsFormKernels(ctx.study, ctx.cohort)) {
      // The harmonised sources' kernels are formed in every fold from their voxels, harmonised with that fold's ComBat
      // estimates, and standardised or imputed tabular kernels from their columns with that fold's statistics; the other
      // sources' kernels are read as they are.
      auto list = std::make_shared<const learners::KernelList>(std::move(kernels));
      if (identity) ctx.movedKernels = list.get();
      ctx.harmonisedSources.clear();
      ctx.foldFormedKernels = FoldFormedStudyKernels(ctx, std::move(list), scratchDir, ctx.harmonisedSources);
      ctx.kernels = ctx.foldFormedKernels;
    } else {
      auto memory = std::make_shared<const gram::MemoryKernels>(std::move(kernels));
      if (identity) ctx.movedKernels = memory->Float64();
      ctx.kernels = std::move(memory);
    }
  }
  ctx.nestedOptions = cv::NestedCvOptions{};
  ctx.nestedOptions.preprocessing = {ctx.study.kernels.centre, ctx.study.kernels.normalise, nullptr, {}};
  ctx.nestedOptions.unlabelled = ctx.unlabelledCount;
  ctx.nestedOptions.multiclassWeights = ctx.study.target.multiclassWeights;
  ctx.nestedOptions.criterion = ctx.study.cv.criterion;
  if (ctx.study.kernels.sourceWeighting == config::SourceWeighting::Equal)
    for (std::size_t s = 0; s < ctx.ks.sourceKernelCounts.size(); ++s)
      ctx.nestedOptions.preprocessing.kernelGroups.insert(ctx.nestedOptions.preprocessing.kernelGroups.end(), ctx.ks.sourceKernelCounts[s], static_cast<int>(s));
  if (ctx.covariates) ctx.nestedOptions.preprocessing.covariates = std::shared_ptr<const gram::Covariates>(ctx.covariates, &ctx.covariates->covariates);
  if (ctx.ks.owners) ctx.ks.owners->SetPreprocessing(ctx.nestedOptions.preprocessing);
  if (ctx.targetConfounds) ctx.nestedOptions.targetConfounds = std::shared_ptr<const gram::Covariates>(ctx.targetConfounds, &ctx.targetConfounds->covariates);
  // Probabilities for every binary study; bias correction when the study asks for it.
  ctx.nestedOptions.probabilities = ctx.study.target.task == learners::Task::Classification;
  ctx.nestedOptions.biasCorrection = ctx.study.target.biasCorrection;
}

PooledBlock ComputePermutationBlock(const StudyContext& ctx, int first, int count, Progress* progress) {
  PooledBlock out;
  out.pooled.resize(static_cast<std::size_t>(count));
  out.shares.resize(static_cast<std::size_t>(count));
  const cv::InnerSplitter inner = ctx.Inner();
  const int n = ctx.n;
  // The permutation metrics (balanced accuracy, AUC, ...; r, MSE) do not use probabilities or the bias
  // correction: the permuted runs skip their inner fits.
  cv::NestedCvOptions options = ctx.nestedOptions;
  options.probabilities = false;
  options.biasCorrection = false;
  // Up to one permutation per thread runs at once: each gets its share of the memory for its fold kernels.
  const auto threads = static_cast<std::uint64_t>(cv::ActiveThreads());
  const std::uint64_t available = ctx.nestedOptions.memoryBudgetBytes > 0 ? ctx.nestedOptions.memoryBudgetBytes : AvailableMemoryBytes();
  options.memoryBudgetBytes = std::max<std::uint64_t>(1, available / threads);
  // When memory is tight, a thread waiting inside one permutation's nested CV must not start another
  // permutation (a second set of fold kernels beyond that share); otherwise it may, and keeps busy. Fold
  // tasks copy every kernel for a learner of kernel weights, unless the copies do not fit the share and the
  // learners can read them in place (NestedCvOptions::columnsInPlace): then they copy the test blocks and,
  // at small n, pack the training triangles (together at most half the kernels). Learners of the sum
  // prepare one summed kernel.
  bool copies = false, columnsPossible = options.columnsInPlace != cv::ColumnsInPlace::Never && !options.preprocessing.covariates;
  for (const auto& plan : ctx.plans) {
    const auto* info = learners::FindLearner(plan.name);
    const bool weighted = !info || info->multipleKernels || !options.sumKernelsInPlace;
    copies |= weighted;
    if (weighted && !(info && info->kernelsInPlace)) columnsPossible = false;
  }
  std::uint64_t kernelBytes = 0, largestKernel = 0;
  // Fold copies counted as float64 (on the store the MKL learners' training copies may be float32: an
  // overestimate, which at worst isolates permutations that need not be).
  for (std::size_t j = 0; j < ctx.KernelCount(); ++j) {
    const auto rowsOf = static_cast<std::size_t>(ctx.kernels->Subjects());
    const auto bytes = static_cast<std::uint64_t>(rowsOf * rowsOf) * sizeof(double);
    kernelBytes += bytes;
    largestKernel = std::max(largestKernel, bytes);
  }
  // (Below kPackedStackBelow training subjects nested CV reads them in place too.)
  std::size_t largestTrain = 0, largestFold = 0;
  for (const auto& fold : ctx.outer) {
    largestTrain = std::max(largestTrain, fold.train.size() + static_cast<std::size_t>(ctx.unlabelledCount));
    largestFold = std::max(largestFold, fold.train.size() + fold.test.size());
  }
  const bool inPlace = columnsPossible && (options.columnsInPlace == cv::ColumnsInPlace::Always || kernelBytes > options.memoryBudgetBytes ||
                                           static_cast<Eigen::Index>(largestTrain) < gram::kPackedStackBelow);
  // Kernels held by MPI ranks: a fold task here holds a fit's n x n work and a summed kernel, never kernel copies.
  const std::uint64_t foldBytes = ctx.kernels->Features()       ? ctx.kernels->FoldTaskBytes({largestFold, 0, 0, {}, {}, false})
                                  : ctx.kernels->HeldByOwners() ? 3 * largestKernel
                                  : copies                      ? (inPlace ? kernelBytes / 2 : kernelBytes)
                                                                : largestKernel;
  const bool tight = 2 * foldBytes * threads * threads > available;
  // With target confounds the target's residuals on them are permuted and added back to their fitted values (Freedman
  // & Lane 1983): the null is that the images say nothing of the target beyond the confounds, which keep their effect.
  Eigen::VectorXd fitted = Eigen::VectorXd::Zero(n), residual = ctx.cohort.y;
  if (ctx.targetConfounds) {
    std::vector<int> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    residual = cv::AdjustedTargets(ctx.cohort.y, ctx.targetConfounds->covariates, all, all, "the permutation test");
    fitted = ctx.cohort.y - residual;
  }
  tbb::parallel_for(0, count, [&](int i) {
    const auto permutation = [&] {
      const int p = first + i;
      const auto perm = cv::PermuteWithinGroups(n, ctx.cohort.groups, cv::DeriveSeed(ctx.PermutationSeed(), static_cast<std::uint64_t>(p)));
      learners::Targets permuted = ctx.TargetsOf(Eigen::VectorXd(n));
      for (int k = 0; k < n; ++k) permuted.y[k] = fitted[k] + residual[perm[static_cast<std::size_t>(k)]];
      const auto res = cv::RunNestedCv(*ctx.kernels, permuted, ctx.outer, inner, ctx.plans, options);
      for (const auto& o : res) {
        out.pooled[static_cast<std::size_t>(i)].push_back(cv::Summarise(o, permuted).pooled);
        // The region tables' statistic on the permuted targets, for the regions' and sources' permutation p-values.
        out.shares[static_cast<std::size_t>(i)].push_back(MeanKernelShares(ctx, o));
      }
      if (progress) progress->Advance();
    };
    if (tight) {
      tbb::this_task_arena::isolate(permutation);
    } else {
      permutation();
    }
  });
  return out;
}

std::string DefaultCheckpointDir(const config::StudyConfig& study) { return study.output.dir + ".checkpoint"; }
std::string PermutationBlockPath(const std::string& checkpointDir, int block) { return checkpointDir + fmt::format("/permutations_{:05d}.json", block); }

}  // namespace neuromkl::pipeline
