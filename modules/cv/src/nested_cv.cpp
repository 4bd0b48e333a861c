// The nested CV driver (nested_cv.hpp): phase 1, every (outer fold, inner fold) pair evaluates every grid point of
// every learner; phase 2, each outer fold chooses, refits and predicts. Fold tasks run in parallel, as many at once as
// the memory allows; every result lands in its own slot.
#include "neuromkl/cv/nested_cv.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <spdlog/spdlog.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "fold_indices.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/system.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/learners/feature_learners.hpp"
#include "neuromkl/metrics/metrics.hpp"

namespace neuromkl::cv {

using detail::Subset;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// -1: smaller values regularise more (listed first); +1: larger values regularise more.
int RegularisationDirection(const std::string& param) {
  if (param == "c") return -1;
  if (param == "lambda" || param == "mu") return +1;
  return 0;
}

std::vector<int> WithUnlabelled(std::vector<int> train, const std::vector<int>& unlabelled) {
  train.insert(train.end(), unlabelled.begin(), unlabelled.end());
  return train;
}

/// body(t) for every t < count, at most `limit` at once (a pipeline with `limit` tokens: a new task starts when one
/// ends). Each body is isolated: a thread waiting inside it (e.g. in the parallel loop over a fold's kernels) only helps
/// with that body's work and never starts another fold task, which would hold a second fold's copies on the same stack.
template <typename Body>
void ForEachLimited(std::size_t count, std::size_t limit, const Body& body) {
  const auto isolated = [&](std::size_t t) { tbb::this_task_arena::isolate([&] { body(t); }); };
  if (limit >= count) {
    tbb::parallel_for(std::size_t{0}, count, isolated);
    return;
  }
  // Only one thread at a time runs the serial filter; atomic all the same, since TBB's hand-over between them happens
  // in its library, where ThreadSanitizer does not see it.
  std::atomic<std::size_t> next{0};
  tbb::parallel_pipeline(limit, tbb::make_filter<void, std::size_t>(tbb::filter_mode::serial_in_order,
                                                                    [&](tbb::flow_control& fc) -> std::size_t {
                                                                      const std::size_t t = next.load(std::memory_order_relaxed);
                                                                      if (t == count) fc.stop();
                                                                      if (t < count) next.store(t + 1, std::memory_order_relaxed);
                                                                      return t < count ? t : count;
                                                                    }) &
                                    tbb::make_filter<std::size_t, void>(tbb::filter_mode::parallel, [&](std::size_t t) { isolated(t); }));
}

/// A fold task's kernels and the training targets, for the supervised learners and (if any learner needs them) with the
/// unlabelled subjects appended to the training set (prepared with that training set); [semi-supervised].
struct FoldViews {
  std::array<std::unique_ptr<gram::PreparedFold>, 2> fold;
  std::array<gram::FoldKernels, 2> summed;      ///< the summed kernel (learners of the unweighted sum)
  std::array<gram::WeightedKernels, 2> weighted;  ///< every kernel (learners of kernel weights)
  std::array<learners::Targets, 2> y;
};

/// The targets of `rows` as the fold with training set `train` sees them: the study's, or with the target's confounds
/// regressed out on `train` only.
Eigen::VectorXd FoldTargets(const Eigen::VectorXd& y, const gram::Covariates* confounds, const std::vector<int>& train, const std::vector<int>& rows) {
  return confounds ? AdjustedTargets(y, *confounds, train, rows) : Subset(y, rows);
}

/// Fills `v` (a previous task's views: the copies' storage is reused where sizes match).
void PrepareViews(const gram::KernelStore& kernels, const learners::Targets& targets, const gram::Covariates* confounds, const std::vector<int>& train,
                  const std::vector<int>& test, const gram::Preprocessing& pre, const std::vector<int>& unlabelled, const std::array<bool, 4>& needs,
                  gram::TrainingForm form, FoldViews& v) {
  for (const bool semi : {false, true}) {
    // The previous task's fold goes first (kernels held by owners: it is closed on them before a new one opens).
    v.weighted[semi].kernels.reset();
    v.weighted[semi].testOnDemand = nullptr;
    v.fold[semi].reset();
    const bool weighted = needs[gram::FoldNeed(semi, false)], summed = needs[gram::FoldNeed(semi, true)];
    if (!weighted && !summed) continue;
    const std::vector<int> rows = semi ? WithUnlabelled(train, unlabelled) : train;
    v.fold[semi] = kernels.OpenFold(rows, test, pre);
    if (summed) v.summed[semi] = v.fold[semi]->Summed();
    if (weighted) v.fold[semi]->Weighted(form, v.weighted[semi]);
    v.y[semi] = {targets.task, FoldTargets(targets.y, confounds, train, rows), targets.classes};
  }
}

/// The views of finished fold tasks, handed to the next task. There are never more than the fold tasks that ran at
/// once, so the memory budget of the folds in flight holds; a task of the same size then writes into memory already
/// mapped (on a virtual machine faulting in fresh pages cost as much as computing them).
class SpareViews {
 public:
  std::unique_ptr<FoldViews> Take() {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (spares_.empty()) return std::make_unique<FoldViews>();
    auto v = std::move(spares_.back());
    spares_.pop_back();
    return v;
  }
  void Give(std::unique_ptr<FoldViews> v) {
    const std::lock_guard<std::mutex> lock(mutex_);
    spares_.push_back(std::move(v));
  }
  void Clear() {
    const std::lock_guard<std::mutex> lock(mutex_);
    spares_.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<FoldViews>> spares_;
};

/// Inner criterion: balanced accuracy (higher is better; macro for multiclass) or MSE (lower is better) unless the study
/// names another (higher is better).
double InnerScore(const learners::Targets& targets, const std::string& criterion, const Eigen::VectorXd& y, const learners::Model& model,
                  const gram::TestBlocks& test) {
  if (targets.task == learners::Task::Multiclass)
    return metrics::AsMap(metrics::MultiClassify(y, model.Scores(test), targets.classes)).at(criterion.empty() ? "balanced_accuracy" : criterion);
  const Eigen::VectorXd f = model.Decision(test);
  if (!criterion.empty() && targets.task == learners::Task::Classification) return metrics::AsMap(metrics::Classify(y, f)).at(criterion);
  return targets.task == learners::Task::Classification ? metrics::Classify(y, f).balancedAccuracy : metrics::Regress(y, f).mse;
}

/// The previously fitted grid point closest to point g (fewest differing parameters, then the most recent): its model
/// warm-starts g's fit. Deterministic: it depends on the grid order only.
std::optional<std::size_t> NearestFitted(const std::vector<learners::ParamMap>& grid, const std::vector<bool>& ok, std::size_t g) {
  std::optional<std::size_t> best;
  int bestDiff = 0;
  for (std::size_t h = g; h-- > 0;) {
    if (!ok[h]) continue;
    int diff = 0;
    for (const auto& [k, v] : grid[g]) diff += grid[h].at(k) != v;
    if (!best || diff < bestDiff) {
      best = h;
      bestDiff = diff;
    }
  }
  return best;
}

/// A fitted point h of the grid whose model is also point g's: h differs from g in C only, with a smaller C, and its
/// solution has no dual variable at the box's bound (learners::FitInfo::solvesLargerC: the same solution meets g's
/// optimality conditions). With n much smaller than the voxels the SVMs interpolate from some C on, and every larger C
/// of the grid is that same fit. The smallest such C is taken (ties between equal scores then keep it).
std::optional<std::size_t> SameFitAtSmallerC(const std::vector<learners::ParamMap>& grid, const std::vector<learners::Model>& fitted,
                                             const std::vector<bool>& ok, std::size_t g) {
  const auto c = grid[g].find("c");
  if (c == grid[g].end()) return std::nullopt;
  std::optional<std::size_t> best;
  for (std::size_t h = 0; h < g; ++h) {
    if (!ok[h] || !fitted[h].info.solvesLargerC || fitted[h].info.status != learners::FitStatus::Converged) continue;
    const auto ch = grid[h].find("c");
    if (ch == grid[h].end() || !(ch->second < c->second) || grid[h].size() != grid[g].size()) continue;
    bool others = true;
    for (const auto& [k, v] : grid[g])
      if (k != "c") others = others && grid[h].count(k) && grid[h].at(k) == v;
    if (others && (!best || ch->second < grid[*best].at("c"))) best = h;
  }
  return best;
}

/// The training targets with the plan's class weights for this training set (a copy only when the plan has weights).
const learners::Targets& Weighted(const LearnerPlan& plan, const learners::Targets& y, learners::Targets& storage) {
  if (!plan.classWeights.Active()) return y;
  storage = y;
  storage.sampleWeights = learners::ClassSampleWeights(plan.classWeights, y);
  return storage;
}

bool Better(learners::Task task, double a, double b) {  // is a strictly better than b?
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return task != learners::Task::Regression ? a > b : a < b;
}

constexpr signed char kNotFitted = -1, kConverged = 0, kCapped = 1, kStalled = 2;

/// One nested CV: the plan of its learners and folds, then its two phases.
class NestedCvRun {
 public:
  NestedCvRun(const gram::KernelStore& kernels, const learners::Targets& targets, const std::vector<Fold>& outer, const InnerSplitter& inner,
              const std::vector<LearnerPlan>& plans, const NestedCvOptions& options);
  std::vector<LearnerOutcome> Run();

 private:
  void PlanLearners();
  void SplitInnerFolds(const InnerSplitter& inner);
  void PlanMemory();
  /// The training kernels' form for a phase: in place where the copies would not fit or are not needed.
  gram::TrainingForm FormFor(const std::vector<std::pair<std::size_t, std::size_t>>& shapes, const char* what) const;
  /// The bytes of the largest of these fold tasks (train, test sizes) in `form`.
  std::uint64_t TaskBytes(const std::vector<std::pair<std::size_t, std::size_t>>& shapes, gram::TrainingForm form) const;
  /// How many fold tasks of `bytes` may run at once (with a word when memory is short).
  std::size_t Limit(std::uint64_t bytes, std::size_t count, const char* what) const;
  void InnerPhase();
  /// Inner fold i of outer fold f: its training and test subjects (indices into the study's subjects).
  std::pair<std::vector<int>, std::vector<int>> InnerRows(std::size_t f, std::size_t i) const;
  /// Every grid point of every learner that searches (or calibrates) on inner fold i of outer fold f; `yTest`: its test
  /// subjects' targets.
  void InnerTask(std::size_t f, std::size_t i, const Eigen::VectorXd& yTest, const FoldViews& views);
  void OuterPhase(std::vector<LearnerOutcome>& out);
  void RefitOuterFold(std::size_t f, std::size_t l, const FoldViews& views, std::array<learners::TrainingKernelCache, 4>& caches,
                      Eigen::MatrixXd& testBuffer, OuterFoldResult& r) const;
  void Calibrate(std::size_t f, std::size_t l, OuterFoldResult& r) const;
  void CountFits(std::vector<LearnerOutcome>& out) const;
  /// Learner l's fit on a fold task's kernels (point `params`; `cache` for the view it reads).
  learners::Model FitOn(std::size_t l, std::size_t point, const FoldViews& views, const learners::Targets& y, learners::TrainingKernelCache* cache,
                        const learners::Model* warmStart) const;
  /// The test blocks learner l's decisions read in a fold task.
  gram::TestBlocks TestOf(std::size_t l, const FoldViews& views, Eigen::MatrixXd& buffer) const;

  const gram::KernelStore& kernels_;
  const learners::Targets& targets_;
  const std::vector<Fold>& outer_;
  const std::vector<LearnerPlan>& plans_;
  const NestedCvOptions& options_;
  std::size_t F_, L_;
  std::vector<std::unique_ptr<learners::Learner>> learnerObjects_;  ///< one per (plan, grid point), shared read-only
  std::vector<std::size_t> firstObject_;
  std::vector<bool> semi_, summed_;
  std::vector<std::size_t> viewOf_;
  std::array<bool, 4> needs_{};
  std::vector<int> unlabelled_;
  /// Probabilities (binary) and bias correction (regression) are fitted on the inner-CV out-of-fold predictions of the
  /// chosen parameters: the inner CV then runs for every learner.
  bool calibrate_ = false;
  std::vector<std::vector<Fold>> innerFolds_;
  std::vector<std::pair<std::size_t, std::size_t>> tasks_;  ///< (outer fold, inner fold)
  std::vector<std::vector<std::vector<std::vector<double>>>> scores_;  ///< [f][l][g][i]
  std::vector<std::vector<std::vector<std::vector<Eigen::VectorXd>>>> oof_;  ///< [f][l][g][i]: inner test decisions (calibration)
  std::vector<std::vector<std::vector<std::vector<signed char>>>> fitStatus_;  ///< [f][l][g][i]
  std::vector<std::atomic<long>> iterationSums_, solverIterationSums_;  ///< integer sums: independent of the task order
  std::vector<std::atomic<long>> reusedFits_;  ///< inner fits taken from a smaller C (SameFitAtSmallerC)
  std::uint64_t budget_ = 0;
  std::size_t threads_ = 1;
  bool inPlacePossible_ = false, float32Copies_ = false;
  SpareViews spares_;
};

NestedCvRun::NestedCvRun(const gram::KernelStore& kernels, const learners::Targets& targets, const std::vector<Fold>& outer, const InnerSplitter& inner,
                         const std::vector<LearnerPlan>& plans, const NestedCvOptions& options)
    : kernels_(kernels), targets_(targets), outer_(outer), plans_(plans), options_(options), F_(outer.size()), L_(plans.size()),
      iterationSums_(plans.size()), solverIterationSums_(plans.size()), reusedFits_(plans.size()) {
  for (int i = 0; i < options.unlabelled; ++i) unlabelled_.push_back(static_cast<int>(targets.y.size()) + i);
  calibrate_ = (options.probabilities && targets.task == learners::Task::Classification) ||
               (options.biasCorrection && targets.task == learners::Task::Regression);
  PlanLearners();
  SplitInnerFolds(inner);
  PlanMemory();
}

void NestedCvRun::PlanLearners() {
  firstObject_.resize(L_);
  semi_.assign(L_, false);
  summed_.assign(L_, false);
  viewOf_.resize(L_);
  for (std::size_t l = 0; l < L_; ++l) {
    firstObject_[l] = learnerObjects_.size();
    for (const auto& params : plans_[l].grid) learnerObjects_.push_back(learners::MakeLearner(plans_[l].name, params, options_.multiclassWeights));
    // Learners of kernel weights need every fold kernel; the others fit the sum, prepared without copies (always, so
    // that a learner's results do not depend on which other learners the study runs).
    const auto* info = learners::FindLearner(plans_[l].name);
    semi_[l] = info && info->semiSupervised && !unlabelled_.empty();
    summed_[l] = options_.sumKernelsInPlace && info && !info->multipleKernels && !kernels_.Features();
    if (kernels_.Features() && (!learners::HasFeatureForm(plans_[l].name) || semi_[l] || targets_.task == learners::Task::Multiclass))
      throw InputError("cv:NoFeatureForm", "learner " + plans_[l].label,
                       "kernels in feature form are fitted by svm, krr, enmkl_svm and enmkl_krr on binary or regression targets; found " +
                           plans_[l].name + (targets_.task == learners::Task::Multiclass ? " on a multiclass target" : ""));
    viewOf_[l] = gram::FoldNeed(semi_[l], summed_[l]);
    needs_[viewOf_[l]] = true;
  }
}

void NestedCvRun::SplitInnerFolds(const InnerSplitter& inner) {
  // Sequential: cheap, and errors surface in fold order.
  innerFolds_.resize(F_);
  bool anySearch = false;
  for (const auto& p : plans_) anySearch |= p.grid.size() > 1;
  if (anySearch)
    for (std::size_t f = 0; f < F_; ++f) innerFolds_[f] = inner(f, outer_[f].train, Subset(targets_.y, outer_[f].train));
  else if (calibrate_)
    for (std::size_t f = 0; f < F_; ++f) {
      try {
        innerFolds_[f] = inner(f, outer_[f].train, Subset(targets_.y, outer_[f].train));
      } catch (const Error&) {
        innerFolds_[f].clear();  // no inner split: this fold has no calibration (NaN), the study still runs
      }
    }
  scores_.resize(F_);
  fitStatus_.resize(F_);
  if (calibrate_) oof_.resize(F_);
  for (std::size_t f = 0; f < F_; ++f) {
    scores_[f].resize(L_);
    fitStatus_[f].resize(L_);
    if (calibrate_) oof_[f].resize(L_);
    for (std::size_t l = 0; l < L_; ++l) {
      scores_[f][l].assign(plans_[l].grid.size(), std::vector<double>(innerFolds_[f].size(), kNaN));
      fitStatus_[f][l].assign(plans_[l].grid.size(), std::vector<signed char>(innerFolds_[f].size(), kNotFitted));
      if (calibrate_) oof_[f][l].assign(plans_[l].grid.size(), std::vector<Eigen::VectorXd>(innerFolds_[f].size()));
    }
    for (std::size_t i = 0; i < innerFolds_[f].size(); ++i) tasks_.emplace_back(f, i);
  }
}

void NestedCvRun::PlanMemory() {
  budget_ = options_.memoryBudgetBytes > 0 ? options_.memoryBudgetBytes : AvailableMemoryBytes();
  threads_ = ActiveThreads();
  // Learners of kernel weights can read the training kernels in place where the preprocessing is vectors, unless a
  // learner that needs the matrices shares their view (sumKernelsInPlace off). Results are the same bit for bit; see
  // NestedCvOptions::columnsInPlace for when they do.
  bool weightedInPlace = true;  // every learner of kernel weights takes its training kernels in place
  for (std::size_t l = 0; l < L_; ++l)
    if (const auto* info = learners::FindLearner(plans_[l].name); !summed_[l] && !(info && info->kernelsInPlace)) weightedInPlace = false;
  if (kernels_.HeldByOwners() && !weightedInPlace)
    throw InputError("cv:OwnedKernelsNeedColumns", "nested CV",
                     "kernels held by several owners are fitted as distributed columns or as the fold's summed kernel; a learner that needs "
                     "every fold kernel as a matrix cannot be fitted on them");
  inPlacePossible_ = weightedInPlace && options_.columnsInPlace != ColumnsInPlace::Never && !options_.preprocessing.covariates;
  float32Copies_ = weightedInPlace && !kernels_.HeldByOwners() && kernels_.Compact() && options_.float32FoldCopies;
}

std::uint64_t NestedCvRun::TaskBytes(const std::vector<std::pair<std::size_t, std::size_t>>& shapes, gram::TrainingForm form) const {
  std::uint64_t bytes = 0;
  for (const auto& [train, test] : shapes) {
    gram::FoldTask task;
    task.train = train;
    task.test = test;
    task.unlabelled = unlabelled_.size();
    task.needs = needs_;
    task.form = form;
    task.covariates = options_.preprocessing.covariates != nullptr;
    if (task.covariates) task.covariateColumns = static_cast<std::size_t>(options_.preprocessing.covariates->design.cols());
    bytes = std::max(bytes, kernels_.FoldTaskBytes(task));
  }
  return bytes;
}

gram::TrainingForm NestedCvRun::FormFor(const std::vector<std::pair<std::size_t, std::size_t>>& shapes, const char* what) const {
  const gram::TrainingForm copies = float32Copies_ ? gram::TrainingForm::Float32Copies : gram::TrainingForm::Copies;
  if (kernels_.HeldByOwners()) return gram::TrainingForm::InPlace;
  if (!inPlacePossible_) return copies;
  if (options_.columnsInPlace == ColumnsInPlace::Always) return gram::TrainingForm::InPlace;
  const std::uint64_t copyBytes = TaskBytes(shapes, copies);
  // Below kPackedStackBelow every fit packs its fold's kernels anyway: packed from the study's kernels in place, the
  // training copies are not needed at all.
  std::size_t largestTrain = 0;
  for (const auto& [train, test] : shapes) largestTrain = std::max(largestTrain, train);
  const std::size_t withUnlabelled = largestTrain + (needs_[gram::FoldNeed(true, false)] ? unlabelled_.size() : 0);
  if (copyBytes <= budget_) return static_cast<Eigen::Index>(withUnlabelled) < gram::kPackedStackBelow ? gram::TrainingForm::InPlace : copies;
  static std::atomic<bool> told{false};  // once per process at info level (permutation tests run many)
  spdlog::log(told.exchange(true) ? spdlog::level::debug : spdlog::level::info,
              "nested CV, {}: one fold's kernel copies would need {:.1f} MiB but {:.1f} MiB are available: the learners of kernel "
              "weights read the training kernels in place (same results; from 1,024 training subjects each fit is slower)",
              what, static_cast<double>(copyBytes) / (1ULL << 20), static_cast<double>(budget_) / (1ULL << 20));
  return gram::TrainingForm::InPlace;
}

std::size_t NestedCvRun::Limit(std::uint64_t bytes, std::size_t count, const char* what) const {
  const std::size_t limit = FoldsInFlight(bytes, budget_, threads_);
  if (bytes > budget_) {
    // Even one fold does not fit: say so before the system's out-of-memory killer ends the run without a word.
    static std::atomic<bool> warned{false};
    spdlog::log(warned.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                "nested CV, {}: one fold's kernels need {:.1f} MiB but {:.1f} MiB are available; the run may run out of memory "
                "(each fold prepares its training and test blocks of every kernel)",
                what, static_cast<double>(bytes) / (1ULL << 20), static_cast<double>(budget_) / (1ULL << 20));
  } else if (limit < std::min(threads_, count)) {
    // Once per process at info level: a permutation test runs hundreds of nested CVs.
    static std::atomic<bool> told{false};
    spdlog::log(told.exchange(true) ? spdlog::level::debug : spdlog::level::info,
                "nested CV, {}: {} at a time instead of {} (each copies {:.1f} MiB of fold kernels; {:.1f} MiB available)", what, limit,
                std::min(threads_, count), static_cast<double>(bytes) / (1ULL << 20), static_cast<double>(budget_) / (1ULL << 20));
  }
  return limit;
}

learners::Model NestedCvRun::FitOn(std::size_t l, std::size_t point, const FoldViews& views, const learners::Targets& y, learners::TrainingKernelCache* cache,
                                   const learners::Model* warmStart) const {
  learners::FitOptions fitOptions;
  fitOptions.warmStart = warmStart;
  if (options_.shareFoldWork) fitOptions.cache = cache;
  if (const gram::FoldFeatures* features = views.fold[semi_[l]]->Features())
    return learners::FitFeatures(plans_[l].name, plans_[l].grid[point], *features, y, warmStart);
  if (summed_[l]) return learnerObjects_[firstObject_[l] + point]->Fit(views.summed[semi_[l]].train, y, fitOptions);
  const gram::WeightedKernels& w = views.weighted[semi_[l]];
  fitOptions.kernels = w.kernels.get();
  return learnerObjects_[firstObject_[l] + point]->Fit(w.train, y, fitOptions);
}

gram::TestBlocks NestedCvRun::TestOf(std::size_t l, const FoldViews& views, Eigen::MatrixXd& buffer) const {
  if (summed_[l]) return gram::HeldBlocks(views.summed[semi_[l]].test);
  return views.weighted[semi_[l]].Test(buffer);
}

std::pair<std::vector<int>, std::vector<int>> NestedCvRun::InnerRows(std::size_t f, std::size_t i) const {
  const Fold& fold = innerFolds_[f][i];
  std::vector<int> tr, te;
  for (int k : fold.train) tr.push_back(outer_[f].train[static_cast<std::size_t>(k)]);
  for (int k : fold.test) te.push_back(outer_[f].train[static_cast<std::size_t>(k)]);
  return {std::move(tr), std::move(te)};
}

void NestedCvRun::InnerTask(std::size_t f, std::size_t i, const Eigen::VectorXd& yTest, const FoldViews& views) {
  // Every fit on this fold's kernels (all grid points of all learners) shares their check and packed stack.
  std::array<learners::TrainingKernelCache, 4> caches;  // one per view: a cache is bound to one kernel list
  Eigen::MatrixXd testBuffer;  // kernels in place: the test block a decision reads, one kernel at a time
  for (std::size_t l = 0; l < L_; ++l) {
    const auto& grid = plans_[l].grid;
    if (grid.size() < 2 && !calibrate_) continue;
    const gram::TestBlocks blocks = TestOf(l, views, testBuffer);
    learners::Targets weighted;
    const learners::Targets& yTrain = Weighted(plans_[l], views.y[semi_[l]], weighted);
    std::vector<learners::Model> fitted(grid.size());
    std::vector<bool> ok(grid.size(), false);
    for (std::size_t g = 0; g < grid.size(); ++g) {
      if (const auto same = options_.reuseLargerC ? SameFitAtSmallerC(grid, fitted, ok, g) : std::nullopt) {
        fitted[g] = fitted[*same];
        ok[g] = true;
        fitStatus_[f][l][g][i] = fitStatus_[f][l][*same][i];
        scores_[f][l][g][i] = scores_[f][l][*same][i];
        if (calibrate_) oof_[f][l][g][i] = oof_[f][l][*same][i];
        ++reusedFits_[l];
        continue;
      }
      const auto warm = NearestFitted(grid, ok, g);
      try {
        fitted[g] = FitOn(l, g, views, yTrain, &caches[viewOf_[l]], warm ? &fitted[*warm] : nullptr);
        ok[g] = true;
        const learners::FitStatus status = fitted[g].info.status;
        fitStatus_[f][l][g][i] = status == learners::FitStatus::Converged ? kConverged : status == learners::FitStatus::MaxIterReached ? kCapped : kStalled;
        iterationSums_[l] += fitted[g].info.iterations;
        solverIterationSums_[l] += fitted[g].info.innerIterations;
        scores_[f][l][g][i] = InnerScore(targets_, options_.criterion, yTest, fitted[g], blocks);
        if (calibrate_) oof_[f][l][g][i] = fitted[g].Decision(blocks);
      } catch (const Error&) {
        // e.g. a single class in a small inner training set: this point scores NaN (never chosen)
      }
    }
  }
}

void NestedCvRun::InnerPhase() {
  std::vector<std::pair<std::size_t, std::size_t>> shapes;
  for (const auto& [f, i] : tasks_) shapes.emplace_back(innerFolds_[f][i].train.size(), innerFolds_[f][i].test.size());
  const gram::TrainingForm form = FormFor(shapes, "inner folds");
  ForEachLimited(tasks_.size(), Limit(TaskBytes(shapes, form), tasks_.size(), "inner folds"), [&](std::size_t t) {
    const auto [f, i] = tasks_[t];
    const auto [tr, te] = InnerRows(f, i);
    std::unique_ptr<FoldViews> views = spares_.Take();
    PrepareViews(kernels_, targets_, options_.targetConfounds.get(), tr, te, options_.preprocessing, unlabelled_, needs_, form, *views);
    InnerTask(f, i, FoldTargets(targets_.y, options_.targetConfounds.get(), tr, te), *views);
    spares_.Give(std::move(views));
  });
  spares_.Clear();  // the outer folds' training sets are larger: their copies are new memory
}

void NestedCvRun::Calibrate(std::size_t f, std::size_t l, OuterFoldResult& r) const {
  // The chosen point's out-of-fold decision values over the inner folds: this outer fold's training subjects only, so
  // nothing of its test subjects enters the calibration.
  std::vector<double> fo, yo;
  for (std::size_t i = 0; i < innerFolds_[f].size(); ++i) {
    const Eigen::VectorXd& d = oof_[f][l][r.chosen][i];
    const auto [tr, te] = InnerRows(f, i);
    const Eigen::VectorXd y = FoldTargets(targets_.y, options_.targetConfounds.get(), tr, te);
    for (std::size_t k = 0; k < te.size(); ++k) {
      fo.push_back(d.size() > 0 ? d[static_cast<Eigen::Index>(k)] : kNaN);
      yo.push_back(y[static_cast<Eigen::Index>(k)]);
    }
  }
  const Eigen::Map<const Eigen::VectorXd> fv(fo.data(), static_cast<Eigen::Index>(fo.size())), yv(yo.data(), static_cast<Eigen::Index>(yo.size()));
  if (targets_.task == learners::Task::Classification) {
    if (r.error.empty()) r.platt = metrics::FitPlatt(fv, yv);
    r.probability = metrics::PlattProbabilities(r.platt, r.decision);
  } else {
    if (r.error.empty()) r.bias = metrics::FitBiasCorrection(yv, fv);
    r.corrected = metrics::ApplyBiasCorrection(r.bias, r.decision);
  }
}

void NestedCvRun::RefitOuterFold(std::size_t f, std::size_t l, const FoldViews& views, std::array<learners::TrainingKernelCache, 4>& caches,
                                 Eigen::MatrixXd& testBuffer, OuterFoldResult& r) const {
  r.index = static_cast<int>(f);
  r.repeat = outer_[f].repeat;
  r.train = outer_[f].train;
  r.test = outer_[f].test;
  if (options_.targetConfounds) r.target = AdjustedTargets(targets_.y, *options_.targetConfounds, r.train, r.test);
  if (semi_[l]) r.unlabelled = unlabelled_;
  if (plans_[l].grid.size() > 1) {
    r.innerScores.resize(plans_[l].grid.size());
    for (std::size_t g = 0; g < plans_[l].grid.size(); ++g) {
      const auto& s = scores_[f][l][g];
      double sum = 0;
      std::size_t count = 0;
      for (double v : s)
        if (!std::isnan(v)) sum += v, ++count;
      r.innerScores[g] = count == s.size() && count > 0 ? sum / static_cast<double>(count) : kNaN;
    }
    r.chosen = 0;
    for (std::size_t g = 1; g < r.innerScores.size(); ++g)
      if (Better(targets_.task, r.innerScores[g], r.innerScores[r.chosen])) r.chosen = g;  // strict: ties keep the earlier point
  }
  const gram::TestBlocks test = TestOf(l, views, testBuffer);
  learners::Targets weighted;
  const learners::Targets& yTrain = Weighted(plans_[l], views.y[semi_[l]], weighted);
  try {
    r.model = FitOn(l, r.chosen, views, yTrain, &caches[viewOf_[l]], nullptr);
    if (targets_.task == learners::Task::Multiclass) {
      r.scores = r.model.Scores(test);
      r.decision = metrics::PredictedClasses(r.scores);  // NaN where a score is not finite
    } else {
      r.decision = r.model.Decision(test);
    }
    // A fit on the summed kernel reports the model over the study's kernels (weights, maps, export).
    if (summed_[l]) r.model = ExpandSummedModel(std::move(r.model), static_cast<Eigen::Index>(kernels_.Count()));
    // One definition of a failed fold everywhere (status, warnings, maps, metrics): a model whose predictions are not
    // finite failed, even if the solver returned.
    if (!r.decision.allFinite())
      throw NumericalError("cv:NonFiniteDecision", "outer fold " + std::to_string(r.index), "the refitted model's decision values are not finite (NaN or infinite)");
  } catch (const Error& e) {
    r.error = e.what();
    r.decision = Eigen::VectorXd::Constant(static_cast<Eigen::Index>(r.test.size()), kNaN);
    if (targets_.task == learners::Task::Multiclass) r.scores = Eigen::MatrixXd::Constant(static_cast<Eigen::Index>(r.test.size()), targets_.classes, kNaN);
  }
  if (calibrate_) Calibrate(f, l, r);
}

void NestedCvRun::OuterPhase(std::vector<LearnerOutcome>& out) {
  for (std::size_t l = 0; l < L_; ++l) {
    out[l].label = plans_[l].label;
    out[l].name = plans_[l].name;
    out[l].grid = plans_[l].grid;
    out[l].folds.resize(F_);
  }
  std::vector<std::pair<std::size_t, std::size_t>> shapes;
  for (const auto& fold : outer_) shapes.emplace_back(fold.train.size(), fold.test.size());
  const gram::TrainingForm form = FormFor(shapes, "outer folds");
  ForEachLimited(F_, Limit(TaskBytes(shapes, form), F_, "outer folds"), [&](std::size_t f) {
    std::unique_ptr<FoldViews> views = spares_.Take();
    PrepareViews(kernels_, targets_, options_.targetConfounds.get(), outer_[f].train, outer_[f].test, options_.preprocessing, unlabelled_, needs_, form,
                 *views);
    std::array<learners::TrainingKernelCache, 4> caches;  // one per view: a cache is bound to one kernel list
    Eigen::MatrixXd testBuffer;  // kernels in place: the test block a decision reads, one kernel at a time
    for (std::size_t l = 0; l < L_; ++l) RefitOuterFold(f, l, *views, caches, testBuffer, out[l].folds[f]);
    spares_.Give(std::move(views));
  });
}

void NestedCvRun::CountFits(std::vector<LearnerOutcome>& out) const {
  for (std::size_t l = 0; l < L_; ++l) {
    long fits = static_cast<long>(F_);
    if (plans_[l].grid.size() > 1 || calibrate_)
      for (std::size_t f = 0; f < F_; ++f) fits += static_cast<long>(innerFolds_[f].size() * plans_[l].grid.size());
    out[l].fits = fits;
    out[l].innerIterations = iterationSums_[l];
    out[l].innerSolverIterations = solverIterationSums_[l];
    out[l].innerReused = reusedFits_[l];
    for (std::size_t f = 0; f < F_; ++f)
      for (const auto& point : fitStatus_[f][l])
        for (const signed char status : point) {
          out[l].innerFits += status != kNotFitted;
          out[l].innerNotConverged += status == kCapped || status == kStalled;
          out[l].innerCapped += status == kCapped;
        }
  }
}

std::vector<LearnerOutcome> NestedCvRun::Run() {
  InnerPhase();
  std::vector<LearnerOutcome> out(L_);
  OuterPhase(out);
  CountFits(out);
  return out;
}
}  // namespace

std::vector<learners::ParamMap> ExpandGrid(const learners::ParamMap& fixed, const std::map<std::string, std::vector<double>>& grid) {
  std::vector<learners::ParamMap> points = {fixed};
  for (const auto& [name, raw] : grid) {  // std::map: alphabetical
    std::vector<double> values = raw;
    const int dir = RegularisationDirection(name);
    if (dir < 0) std::stable_sort(values.begin(), values.end());
    if (dir > 0) std::stable_sort(values.begin(), values.end(), std::greater<>());
    std::vector<learners::ParamMap> next;
    for (const auto& p : points)
      for (double v : values) {
        auto q = p;
        q[name] = v;
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  return points;
}

namespace {
Eigen::VectorXi IndexVector(const std::vector<int>& v) { return Eigen::Map<const Eigen::VectorXi>(v.data(), static_cast<Eigen::Index>(v.size())); }

/// The fit of the target's confounds on `train`, evaluated for `rows` (all of them labelled).
struct ConfoundFit {
  gram::FoldResidualiser residualiser;
  Eigen::VectorXd yFit;  ///< the targets of the fit rows
};
ConfoundFit FitConfounds(const Eigen::VectorXd& y, const gram::Covariates& confounds, const std::vector<int>& train, const std::vector<int>& rows,
                         const char* where) {
  for (int i : train)
    if (i < 0 || i >= y.size()) throw InvalidParameter("cv:TargetConfounds", where, "a training row is not a labelled subject");
  ConfoundFit fit{gram::MakeFoldResidualiser(confounds, IndexVector(train), IndexVector(rows), where), {}};
  fit.yFit.resize(static_cast<Eigen::Index>(fit.residualiser.fitPositions.size()));
  for (std::size_t k = 0; k < fit.residualiser.fitPositions.size(); ++k)
    fit.yFit[static_cast<Eigen::Index>(k)] = y[train[static_cast<std::size_t>(fit.residualiser.fitPositions[k])]];
  return fit;
}
}  // namespace

Eigen::VectorXd AdjustedTargets(const Eigen::VectorXd& y, const gram::Covariates& confounds, const std::vector<int>& train, const std::vector<int>& rows,
                                const char* where) {
  std::vector<int> labelled;
  for (int r : rows)
    if (r < y.size()) labelled.push_back(r);
  const ConfoundFit fit = FitConfounds(y, confounds, train, labelled, where);
  const Eigen::VectorXd adjusted = Subset(y, labelled) - fit.residualiser.testA * fit.yFit;
  Eigen::VectorXd out = Eigen::VectorXd::Constant(static_cast<Eigen::Index>(rows.size()), kNaN);
  for (std::size_t i = 0, k = 0; i < rows.size(); ++i)
    if (rows[i] < y.size()) out[static_cast<Eigen::Index>(i)] = adjusted[static_cast<Eigen::Index>(k++)];
  return out;
}

Eigen::VectorXd TargetConfoundCoefficients(const Eigen::VectorXd& y, const gram::Covariates& confounds, const std::vector<int>& train, const char* where) {
  const ConfoundFit fit = FitConfounds(y, confounds, train, {}, where);
  return fit.residualiser.P * fit.yFit;
}

Eigen::VectorXd HeldOutTargets(const OuterFoldResult& fold, const Eigen::VectorXd& y) {
  return fold.target.size() > 0 ? fold.target : Subset(y, fold.test);
}

learners::Model ExpandSummedModel(learners::Model model, Eigen::Index kernels) {
  const double k = static_cast<double>(kernels);
  model.beta = Eigen::VectorXd::Constant(kernels, 1.0 / k);
  model.coef *= k;
  model.coefs *= k;
  if (model.betas.size() > 0) model.betas = Eigen::MatrixXd::Constant(kernels, model.betas.cols(), 1.0 / k);
  return model;
}

std::size_t FoldsInFlight(std::uint64_t bytesPerTask, std::uint64_t budgetBytes, std::size_t threads) {
  const std::size_t fit = bytesPerTask == 0 ? threads : static_cast<std::size_t>(budgetBytes / bytesPerTask);
  return std::max<std::size_t>(1, std::min(fit, std::max<std::size_t>(threads, 1)));
}

std::size_t ActiveThreads() {
  return std::max<std::size_t>(1, std::min(static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency())),
                                           tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)));
}

std::vector<LearnerOutcome> RunNestedCv(const gram::KernelStore& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                        const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options) {
  kernels.CheckPreprocessing(options.preprocessing);
  return NestedCvRun(kernels, targets, outer, inner, plans, options).Run();
}

std::vector<LearnerOutcome> RunNestedCv(const learners::KernelList& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                        const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options) {
  return RunNestedCv(gram::MemoryKernels(kernels), targets, outer, inner, plans, options);
}

}  // namespace neuromkl::cv
