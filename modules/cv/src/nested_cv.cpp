#include "neuromkl/cv/nested_cv.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <type_traits>

#include <spdlog/spdlog.h>
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/stats.hpp"
#include "neuromkl/kernels/huge_pages.hpp"
#include "neuromkl/kernels/preprocess.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/cv/kernel_owners.hpp"
#include "neuromkl/metrics/metrics.hpp"
#include "fold_preparation.hpp"

namespace neuromkl::cv {

using namespace detail;  // the fold preparation shared with kernel_owners.cpp

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// -1: smaller values regularise more (listed first); +1: larger values regularise more.
int RegularisationDirection(const std::string& param) {
  if (param == "c") return -1;
  if (param == "lambda" || param == "mu") return +1;
  return 0;
}

Eigen::VectorXd Subset(const Eigen::VectorXd& v, const std::vector<int>& idx) {
  Eigen::VectorXd out(static_cast<Eigen::Index>(idx.size()));
  for (std::size_t i = 0; i < idx.size(); ++i) out[static_cast<Eigen::Index>(i)] = idx[i] < v.size() ? v[idx[i]] : kNaN;
  return out;
}

std::vector<int> WithUnlabelled(std::vector<int> train, const std::vector<int>& unlabelled) {
  train.insert(train.end(), unlabelled.begin(), unlabelled.end());
  return train;
}

/// The fold kernels a fold task prepares, indexed by ViewIndex: for supervised learners and (with unlabelled
/// subjects) semi-supervised ones, a copy of every kernel (learners of kernel weights) and the summed
/// kernel (PrepareSummedFold: the learners of the unweighted sum), each only if some learner needs it.
using FoldNeeds = std::array<bool, 4>;
constexpr std::size_t ViewIndex(bool semiSupervised, bool summed) { return 2 * static_cast<std::size_t>(semiSupervised) + static_cast<std::size_t>(summed); }

/// Bytes of one fold task's kernels (training l x l and test m x l per kernel copied, once for a summed
/// kernel; with `columns` one test block, or below learners::kPackedStackBelow every test block and the packed stack; with
/// `float32Copies` float32 training copies, float64 test blocks and below kPackedStackBelow the packed stack)
/// plus a fit's own l x l work (the combined kernel of an MKL learner and a spare).
std::uint64_t FoldTaskBytes(std::size_t kernelCount, std::size_t train, std::size_t test, std::size_t unlabelled, const FoldNeeds& needs,
                            bool columns, bool float32Copies) {
  double doubles = 0;
  std::size_t largest = 0;
  for (const bool semi : {false, true})
    for (const bool summed : {false, true}) {
      if (!needs[ViewIndex(semi, summed)]) continue;
      const std::size_t l = train + (semi ? unlabelled : 0);
      largest = std::max(largest, l);
      const double dl = static_cast<double>(l);
      const double packed = static_cast<Eigen::Index>(l) < learners::kPackedStackBelow ? dl * (dl + 1) / 2 : 0.0;
      const double perKernel = columns && !summed          ? packed
                               : float32Copies && !summed ? dl * dl / 2 + dl * static_cast<double>(test) + packed
                                                          : dl * (dl + static_cast<double>(test));
      // In place: the one test block a decision prepares at a time, or below kPackedStackBelow all of them (held).
      if (columns && !summed) doubles += (packed > 0 ? static_cast<double>(kernelCount) : 1.0) * dl * static_cast<double>(test);
      doubles += (summed ? 1.0 : static_cast<double>(kernelCount)) * perKernel;
    }
  const double l = static_cast<double>(largest);
  doubles += 2.0 * l * l;
  return static_cast<std::uint64_t>(8.0 * doubles);
}

/// body(t) for every t < count, at most `limit` at once (a pipeline with `limit` tokens: a new task starts
/// when one ends). Each body is isolated: a thread waiting inside it (e.g. in the parallel loop over a
/// fold's kernels) only helps with that body's work and never starts another fold task, which would hold
/// a second fold's copies on the same stack.
template <typename Body>
void ForEachLimited(std::size_t count, std::size_t limit, const Body& body) {
  const auto isolated = [&](std::size_t t) { tbb::this_task_arena::isolate([&] { body(t); }); };
  if (limit >= count) {
    tbb::parallel_for(std::size_t{0}, count, isolated);
    return;
  }
  std::size_t next = 0;
  tbb::parallel_pipeline(limit, tbb::make_filter<void, std::size_t>(tbb::filter_mode::serial_in_order,
                                                                    [&](tbb::flow_control& fc) -> std::size_t {
                                                                      if (next == count) fc.stop();
                                                                      return next < count ? next++ : count;
                                                                    }) &
                                    tbb::make_filter<std::size_t, void>(tbb::filter_mode::parallel, [&](std::size_t t) { isolated(t); }));
}

/// A fold's kernels (FoldNeeds) and the training targets of the supervised learners and, if any learner
/// needs them, with the unlabelled subjects appended to the training set (preprocessed with that training set).
struct FoldViews {
  std::array<FoldKernels, 4> kernels;  ///< with columns: no training copies; the test blocks held below kPackedStackBelow, else none
  std::array<std::unique_ptr<FoldColumns>, 2> columns;  ///< [semi-supervised]: training and test kernels in place, or null
  /// [semi-supervised]: NestedCvOptions::float32FoldCopies, the float32 training copies (test blocks in `kernels`), or empty
  std::array<std::vector<Eigen::MatrixXf>, 2> train32;
  std::array<std::unique_ptr<learners::Float32Columns>, 2> columns32;
  std::array<learners::Targets, 2> y;  ///< [semi-supervised]
  /// [semi-supervised]: kernels held by their owners (kernel_owners.hpp): the fold opened on them, and its training
  /// kernels as distributed columns for the learners of kernel weights (or null)
  std::array<std::shared_ptr<OwnedFold>, 2> owned;
  std::array<std::unique_ptr<OwnedFoldColumns>, 2> ownedColumns;
  /// The training kernels of the learners of kernel weights as columns (in place, float32 copies or held by their
  /// owners), or null: copies in `kernels`.
  const learners::KernelColumns* TrainingColumns(bool semi) const {
    if (columns[semi]) return columns[semi].get();
    if (ownedColumns[semi]) return ownedColumns[semi].get();
    return columns32[semi].get();
  }
  /// The test blocks of a learner of kernel weights: held in `fk`, else prepared (in place) or fetched (from their
  /// owners) one at a time into `buffer`.
  learners::TestBlocks Test(bool semi, const FoldKernels& fk, Eigen::MatrixXd& buffer) const {
    if (fk.test.empty() && columns[semi]) return columns[semi]->Test(buffer);
    if (fk.test.empty() && ownedColumns[semi]) return ownedColumns[semi]->Test(buffer);
    return learners::HeldBlocks(fk.test);
  }
};

/// NestedCvOptions::float32FoldCopies: the fold's training kernels rounded to float32 (defined below).
template <typename KernelVec>
void PrepareFloat32FoldInto(const KernelVec& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre,
                            std::vector<Eigen::MatrixXf>& train32, learners::KernelList& testBlocks);
/// Fills `v` (a previous task's views: the copies' storage is reused where sizes match).
template <typename KernelVec>
void PrepareViews(const KernelVec& kernels, const learners::Targets& targets, const std::vector<int>& train, const std::vector<int>& test,
                  const Preprocessing& pre, const std::vector<int>& unlabelled, const FoldNeeds& needs, bool columns, bool float32Copies,
                  FoldViews& v) {
  for (const bool semi : {false, true}) {
    const std::vector<int> rows = semi ? WithUnlabelled(train, unlabelled) : train;
    if (needs[ViewIndex(semi, true)]) v.kernels[ViewIndex(semi, true)] = PrepareSummedFold(kernels, rows, test, pre);
    v.columns[semi].reset();
    v.columns32[semi].reset();
    if (needs[ViewIndex(semi, false)] && !columns && float32Copies) {
      FoldKernels& fk = v.kernels[ViewIndex(semi, false)];
      fk.train.clear();
      PrepareFloat32FoldInto(kernels, rows, test, pre, v.train32[semi], fk.test);
      v.columns32[semi] = std::make_unique<learners::Float32Columns>(v.train32[semi]);
    } else if (needs[ViewIndex(semi, false)] && columns) {
      FoldKernels& fk = v.kernels[ViewIndex(semi, false)];
      v.columns[semi] = std::make_unique<FoldColumns>(kernels, Eigen::Map<const Eigen::VectorXi>(rows.data(), static_cast<Eigen::Index>(rows.size())),
                                                      Eigen::Map<const Eigen::VectorXi>(test.data(), static_cast<Eigen::Index>(test.size())), pre);
      fk.train.clear();
      fk.test.clear();
      // Below kPackedStackBelow the test blocks are small beside the packed stack: held, so the many decisions
      // of a grid search do not prepare them again each time.
      if (static_cast<Eigen::Index>(rows.size()) < learners::kPackedStackBelow) v.columns[semi]->WriteTestBlocks(fk.test);
    } else if (needs[ViewIndex(semi, false)]) {
      PrepareFoldInto(kernels, rows, test, pre, v.kernels[ViewIndex(semi, false)]);
    }
    if (needs[ViewIndex(semi, false)] || needs[ViewIndex(semi, true)]) v.y[semi] = {targets.task, Subset(targets.y, rows), targets.classes};
  }
}

/// The views of a fold of kernels held by their owners: the fold is opened on the owners once for both the summed
/// kernel (their partial sums added) and the distributed columns of the learners of kernel weights, whose decisions
/// ask the owners for the products of the test blocks with the model's coefficients.
void PrepareViews(const KernelOwners& owners, const learners::Targets& targets, const std::vector<int>& train, const std::vector<int>& test,
                  const Preprocessing&, const std::vector<int>& unlabelled, const FoldNeeds& needs, bool, bool, FoldViews& v) {
  for (const bool semi : {false, true}) {
    v.ownedColumns[semi].reset();
    v.owned[semi].reset();  // closes the previous task's fold on the owners
    v.columns[semi].reset();
    v.columns32[semi].reset();
    const bool weighted = needs[ViewIndex(semi, false)], summed = needs[ViewIndex(semi, true)];
    if (!weighted && !summed) continue;
    const std::vector<int> rows = semi ? WithUnlabelled(train, unlabelled) : train;
    v.owned[semi] = owners.OpenFold(rows, test);
    if (summed) v.kernels[ViewIndex(semi, true)] = v.owned[semi]->Summed();
    if (weighted) {
      FoldKernels& fk = v.kernels[ViewIndex(semi, false)];
      fk.train.clear();
      fk.test.clear();
      v.ownedColumns[semi] = std::make_unique<OwnedFoldColumns>(v.owned[semi]);  // decisions: products from the owners
    }
    v.y[semi] = {targets.task, Subset(targets.y, rows), targets.classes};
  }
}

/// The bytes of one fold task on kernels held by their owners, on the rank that needs the most: owner 0 holds the
/// summed kernel (l x l and m x l) and a fit's own l x l work (the combined kernel, a spare and an owner's reply being
/// added); an owner of `share` kernels holds its partial sums (l x l), and per kernel the packed training triangle
/// and the test block below kPackedStackBelow, or with covariates the prepared copies (l x l and m x l).
std::uint64_t OwnedFoldTaskBytes(std::size_t share, bool covariates, std::size_t train, std::size_t test, std::size_t unlabelled, const FoldNeeds& needs) {
  double first = 0, owner = 0;
  std::size_t largest = 0;
  for (const bool semi : {false, true})
    for (const bool summed : {false, true}) {
      if (!needs[ViewIndex(semi, summed)]) continue;
      const std::size_t l = train + (semi ? unlabelled : 0);
      largest = std::max(largest, l);
      const double dl = static_cast<double>(l), dm = static_cast<double>(test);
      if (summed) {
        first += dl * (dl + dm);
        owner += dl * (dl + dm);
        continue;
      }
      const double perKernel = covariates ? dl * (dl + dm) : static_cast<Eigen::Index>(l) < learners::kPackedStackBelow ? dl * (dl + 1) / 2 + dl * dm : dl * dm;
      owner += static_cast<double>(share) * perKernel + dl * dl;
    }
  const double l = static_cast<double>(largest);
  first += 3.0 * l * l;
  return static_cast<std::uint64_t>(8.0 * std::max(first, owner));
}

/// The views of finished fold tasks, handed to the next task. There are never more than the fold tasks
/// that ran at once, so the memory budget of the folds in flight holds; a task of the same size then
/// writes into memory already mapped (on this VM faulting in fresh pages cost as much as computing them).
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

/// Inner criterion: balanced accuracy (higher is better; macro for multiclass) or MSE (lower is
/// better) unless the study names another (higher is better).
double InnerScore(const learners::Targets& targets, const std::string& criterion, const Eigen::VectorXd& y, const learners::Model& model,
                  const learners::TestBlocks& test) {
  if (targets.task == learners::Task::Multiclass)
    return metrics::AsMap(metrics::MultiClassify(y, model.Scores(test), targets.classes)).at(criterion.empty() ? "balanced_accuracy" : criterion);
  const Eigen::VectorXd f = model.Decision(test);
  if (!criterion.empty() && targets.task == learners::Task::Classification) return metrics::AsMap(metrics::Classify(y, f)).at(criterion);
  return targets.task == learners::Task::Classification ? metrics::Classify(y, f).balancedAccuracy : metrics::Regress(y, f).mse;
}
/// The previously fitted grid point closest to point g (fewest differing parameters, then the most
/// recent): its model warm-starts g's fit. Deterministic: it depends on the grid order only.
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
/// The fold's training kernels prepared as PrepareFoldInto prepares them (fold vectors, or with covariates one
/// kernel at a time; scaled by the fold's source scales), each rounded to float32 into `train32` once prepared
/// in double; the test blocks (double) into `test`. Only one prepared column per thread (with covariates, one
/// prepared kernel) is held in double at a time.
template <typename KernelVec>
void PrepareFloat32FoldInto(const KernelVec& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre,
                            std::vector<Eigen::MatrixXf>& train32, learners::KernelList& testBlocks) {
  const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(train.data(), static_cast<Eigen::Index>(train.size()));
  const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(test.data(), static_cast<Eigen::Index>(test.size()));
  train32.resize(kernels.size());
  testBlocks.resize(kernels.size());
  if (!pre.covariates) {
    const std::vector<kernels::FoldVectors> vectors = AllFoldVectors(kernels, tr, te, pre);
    const Eigen::VectorXd g = VectorScales(vectors, pre.kernelGroups);
    const Eigen::Index l = tr.size(), m = te.size();
    tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
      // Column by column (PreparedTrainingColumn, as WritePreparedBlocks writes them): one prepared column in
      // double at a time, not a whole kernel.
      const double gj = g[static_cast<Eigen::Index>(j)];
      std::vector<double> column(static_cast<std::size_t>(l));
      train32[j].resize(l, l);
      testBlocks[j].resize(m, l);
      for (Eigen::Index b = 0; b < l; ++b) {
        const auto* full = kernels[j].col(tr[b]).data();
        kernels::PreparedTrainingColumn(full, tr, vectors[j], b, l, gj, column.data());
        train32[j].col(b) = Eigen::Map<const Eigen::VectorXd>(column.data(), l).cast<float>();
        kernels::PreparedTestColumn(full, te, vectors[j], b, gj, testBlocks[j].col(b).data());
      }
    });
    return;
  }
  const kernels::FoldResidualiser residualiser = kernels::MakeFoldResidualiser(*pre.covariates, tr, te);
  CheckShiftCancels(kernels, residualiser);
  const Eigen::VectorXd g = ResidualisedScales(kernels, tr, te, residualiser, pre);
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
    kernels::FoldKernel fk = PrepareResidualised(kernels[j], tr, te, residualiser, pre);
    const double gj = g[static_cast<Eigen::Index>(j)];
    if (gj != 1.0) {  // as PrepareFoldInto: scaled in double, before the rounding
      fk.train *= gj;
      fk.testTrain *= gj;
    }
    train32[j] = fk.train.cast<float>();
    testBlocks[j] = std::move(fk.testTrain);
  });
}

}  // namespace

FoldColumns::FoldColumns(const learners::KernelList& kernels, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                         const Preprocessing& pre)
    : kernels_(&kernels), train_(train), test_(test) {
  Init(pre);
}

FoldColumns::FoldColumns(const kernels::CompactKernelList& kernels, const Eigen::Ref<const Eigen::VectorXi>& train,
                         const Eigen::Ref<const Eigen::VectorXi>& test, const Preprocessing& pre)
    : compact_(&kernels), train_(train), test_(test) {
  CheckStoreFits(kernels, pre);
  Init(pre);
}

FoldColumns::FoldColumns(const learners::KernelList& kernels, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                         std::vector<kernels::FoldVectors> vectors, Eigen::VectorXd scales)
    : kernels_(&kernels), train_(train), test_(test), vectors_(std::move(vectors)), scales_(std::move(scales)) {}

FoldColumns::FoldColumns(const kernels::CompactKernelList& kernels, const Eigen::Ref<const Eigen::VectorXi>& train,
                         const Eigen::Ref<const Eigen::VectorXi>& test, std::vector<kernels::FoldVectors> vectors, Eigen::VectorXd scales)
    : compact_(&kernels), train_(train), test_(test), vectors_(std::move(vectors)), scales_(std::move(scales)) {}

template <typename F>
decltype(auto) FoldColumns::WithKernels(const F& f) const {
  return kernels_ ? f(*kernels_) : f(*compact_);
}

void FoldColumns::Init(const Preprocessing& pre) {
  if (pre.covariates)
    throw InputError("cv:ColumnsWithCovariates", "fold columns", "fold kernels with covariates are not columns of the study's kernels (residualising mixes rows)");
  vectors_ = WithKernels([&](const auto& kernels) { return AllFoldVectors(kernels, train_, test_, pre); });
  scales_ = VectorScales(vectors_, pre.kernelGroups);
}

Eigen::Index FoldColumns::Count() const {
  return WithKernels([](const auto& kernels) { return static_cast<Eigen::Index>(kernels.size()); });
}

void FoldColumns::UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const {
  // Rows 0..j of the column WritePreparedBlocks writes into PrepareFold's copy.
  const auto r = static_cast<std::size_t>(k);
  WithKernels([&](const auto& kernels) {
    kernels::PreparedTrainingColumn(kernels[r].col(train_[j]).data(), train_, vectors_[r], j, j + 1, scales_[k], out);
  });
}

void FoldColumns::WriteTestBlocks(learners::KernelList& out) const {
  out.resize(vectors_.size());
  tbb::parallel_for(std::size_t{0}, vectors_.size(), [&](std::size_t j) {
    WithKernels([&](const auto& kernels) {
      kernels::WritePreparedTestBlock(kernels[j], train_, test_, vectors_[j], scales_[static_cast<Eigen::Index>(j)], out[j]);
    });
  });
}

learners::TestBlocks FoldColumns::Test(Eigen::MatrixXd& buffer) const {
  return {Count(), test_.size(),
          [this, &buffer](Eigen::Index k) -> const Eigen::MatrixXd& {
            const auto j = static_cast<std::size_t>(k);
            WithKernels([&](const auto& kernels) { kernels::WritePreparedTestBlock(kernels[j], train_, test_, vectors_[j], scales_[k], buffer); });
            return buffer;
          },
          {}};
}

FoldKernels PrepareFold(const learners::KernelList& kernels, const std::vector<int>& train, const std::vector<int>& test,
                        const Preprocessing& pre) {
  FoldKernels out;
  PrepareFoldInto(kernels, train, test, pre, out);
  return out;
}

namespace {
template <typename KernelVec>
void PrepareFoldIntoOf(const KernelVec& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre,
                       FoldKernels& out) {
  const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(train.data(), static_cast<Eigen::Index>(train.size()));
  const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(test.data(), static_cast<Eigen::Index>(test.size()));
  out.train.resize(kernels.size());
  out.test.resize(kernels.size());
  // Kernels are independent: several at once (a large study may run one fold at a time, see
  // NestedCvOptions::memoryBudgetBytes); each lands in its own slot.
  if (!pre.covariates) {
    // From each kernel's fold vectors: one pass to read the statistics, one to write the blocks.
    const std::vector<kernels::FoldVectors> vectors = AllFoldVectors(kernels, tr, te, pre);
    const Eigen::VectorXd g = VectorScales(vectors, pre.kernelGroups);
    tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
      kernels::WritePreparedBlocks(kernels[j], tr, te, vectors[j], g[static_cast<Eigen::Index>(j)], out.train[j], out.test[j]);
    });
    return;
  }
  // Covariates: residualising mixes rows, so each kernel is sliced, residualised, centred and normalised.
  const kernels::FoldResidualiser residualiser = kernels::MakeFoldResidualiser(*pre.covariates, tr, te);
  CheckShiftCancels(kernels, residualiser);
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
    kernels::FoldKernel fk = PrepareResidualised(kernels[j], tr, te, residualiser, pre);
    out.train[j] = std::move(fk.train);
    out.test[j] = std::move(fk.testTrain);
  });
  if (!pre.kernelGroups.empty()) {
    std::vector<double> traces;
    for (const auto& K : out.train) traces.push_back(K.trace());
    const Eigen::VectorXd g = GroupScales(traces, pre.kernelGroups);
    for (std::size_t j = 0; j < out.train.size(); ++j) {
      out.train[j] *= g[static_cast<Eigen::Index>(j)];
      out.test[j] *= g[static_cast<Eigen::Index>(j)];
    }
  }
}
}  // namespace

void PrepareFoldInto(const learners::KernelList& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre,
                     FoldKernels& out) {
  PrepareFoldIntoOf(kernels, train, test, pre, out);
}
void PrepareFoldInto(const kernels::CompactKernelList& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre,
                     FoldKernels& out) {
  CheckStoreFits(kernels, pre);
  PrepareFoldIntoOf(kernels, train, test, pre, out);
}

namespace {
/// With covariates the preprocessing is not a matter of vectors (residualising mixes rows): each kernel
/// is prepared as PrepareFold prepares it, a few at a time, and added in kernel order, so the sum is
/// PrepareFold's (then CombineKernels') exactly while only a window of prepared kernels is held.
template <typename KernelVec>
FoldKernels SumPreparedKernels(const KernelVec& kernels, const Eigen::VectorXi& tr, const Eigen::VectorXi& te, const Preprocessing& pre) {
  const kernels::FoldResidualiser residualiser = kernels::MakeFoldResidualiser(*pre.covariates, tr, te);
  CheckShiftCancels(kernels, residualiser);
  const auto prepare = [&](std::size_t j) { return PrepareResidualised(kernels[j], tr, te, residualiser, pre); };
  constexpr std::size_t kWindow = 4;  // fixed, so results do not depend on the thread count
  const std::size_t R = kernels.size();
  const Eigen::VectorXd scales = ResidualisedScales(kernels, tr, te, residualiser, pre);
  FoldKernels out;
  out.train.assign(1, Eigen::MatrixXd::Zero(tr.size(), tr.size()));
  out.test.assign(1, Eigen::MatrixXd::Zero(te.size(), tr.size()));
  std::vector<kernels::FoldKernel> window(kWindow);
  for (std::size_t first = 0; first < R; first += kWindow) {
    const std::size_t count = std::min(kWindow, R - first);
    tbb::parallel_for(std::size_t{0}, count, [&](std::size_t w) { window[w] = prepare(first + w); });
    for (std::size_t w = 0; w < count; ++w) {
      const double g = scales[static_cast<Eigen::Index>(first + w)];
      // As PrepareFold (K_j *= g_j) then CombineKernels (K += 1 * K_j).
      if (g != 1.0) {
        window[w].train *= g;
        window[w].testTrain *= g;
      }
      out.train[0].noalias() += window[w].train;
      out.test[0].noalias() += window[w].testTrain;
    }
  }
  return out;
}

template <typename KernelVec>
FoldKernels PrepareSummedFoldOf(const KernelVec& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) {
  const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(train.data(), static_cast<Eigen::Index>(train.size()));
  const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(test.data(), static_cast<Eigen::Index>(test.size()));
  if (kernels.empty()) return {};  // no kernel is not a zero kernel: the learner reports it
  if (pre.covariates) return SumPreparedKernels(kernels, tr, te, pre);
  const std::size_t R = kernels.size();
  const Eigen::Index l = tr.size(), m = te.size();
  const std::vector<kernels::FoldVectors> vectors = AllFoldVectors(kernels, tr, te, pre);
  const Eigen::VectorXd scales = VectorScales(vectors, pre.kernelGroups);
  FoldKernels out;
  out.train.assign(1, Eigen::MatrixXd(l, l));
  out.test.assign(1, Eigen::MatrixXd(m, l));
  Eigen::MatrixXd& sumTrain = out.train[0];
  Eigen::MatrixXd& sumTest = out.test[0];
  kernels::AdviseHugePages(sumTrain.data(), static_cast<std::size_t>(l * l) * sizeof(double));
  // Each output column is summed by one thread over the kernels in order: the result does not depend on
  // how columns are shared out. Column b of every kernel is one contiguous column of the full kernel
  // (read at the fold's rows), and the output column stays in cache while the kernels are added.
  tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, l, 8), [&](const tbb::blocked_range<Eigen::Index>& cols) {
    for (Eigen::Index b = cols.begin(); b != cols.end(); ++b) {
      double* outTrain = sumTrain.col(b).data();
      double* outTest = sumTest.col(b).data();
      std::fill(outTrain, outTrain + l, 0.0);
      std::fill(outTest, outTest + m, 0.0);
      for (std::size_t j = 0; j < R; ++j) {
        const kernels::FoldVectors& v = vectors[j];
        const double g = scales[static_cast<Eigen::Index>(j)];
        const auto* col = kernels[j].col(tr[b]).data();
        const double cb = v.colMean[b], ib = v.invTrain[b], grand = v.grand;
        const double* c = v.colMean.data();
        const double* inv = v.invTrain.data();
        for (Eigen::Index a = 0; a < l; ++a) outTrain[a] += kernels::PreparedEntry(static_cast<double>(col[tr[a]]), cb, c[a], grand, inv[a], ib, g);
        const double* r = v.testMean.data();
        const double* invTest = v.invTest.data();
        for (Eigen::Index i = 0; i < m; ++i) outTest[i] += kernels::PreparedEntry(static_cast<double>(col[te[i]]), cb, r[i], grand, invTest[i], ib, g);
      }
    }
  });
  return out;
}
}  // namespace

FoldKernels PrepareSummedFold(const learners::KernelList& kernels, const std::vector<int>& train, const std::vector<int>& test,
                              const Preprocessing& pre) {
  return PrepareSummedFoldOf(kernels, train, test, pre);
}
FoldKernels PrepareSummedFold(const kernels::CompactKernelList& kernels, const std::vector<int>& train, const std::vector<int>& test,
                              const Preprocessing& pre) {
  CheckStoreFits(kernels, pre);
  return PrepareSummedFoldOf(kernels, train, test, pre);
}

learners::Model ExpandSummedModel(learners::Model model, Eigen::Index kernels) {
  const double k = static_cast<double>(kernels);
  model.beta = Eigen::VectorXd::Constant(kernels, 1.0 / k);
  model.coef *= k;
  model.coefs *= k;
  if (model.betas.size() > 0) model.betas = Eigen::MatrixXd::Constant(kernels, model.betas.cols(), 1.0 / k);
  return model;
}

Eigen::VectorXd GroupScales(const std::vector<double>& traces, const std::vector<int>& groups) {
  Eigen::VectorXd g = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(traces.size()));
  if (groups.empty()) return g;
  if (groups.size() != traces.size())
  {
    std::string what = std::to_string(groups.size());
    what += " kernel groups for " + std::to_string(traces.size()) + " kernels";
    throw InputError("cv:KernelGroups", "kernel groups", what);
  }
  std::map<int, double> total;
  for (std::size_t j = 0; j < traces.size(); ++j) total[groups[j]] += traces[j];
  double sum = 0;
  int used = 0;
  for (const auto& [group, t] : total)
    if (t > 0) sum += t, ++used;
  if (used == 0) return g;
  const double target = sum / used;
  for (std::size_t j = 0; j < traces.size(); ++j)
    if (const double t = total[groups[j]]; t > 0) g[static_cast<Eigen::Index>(j)] = target / t;
  return g;
}

namespace {
template <typename KernelVec>
Eigen::VectorXd FoldScalesOf(const KernelVec& kernels, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                             const Preprocessing& pre) {
  if (pre.kernelGroups.empty()) return Eigen::VectorXd::Ones(static_cast<Eigen::Index>(kernels.size()));
  if (pre.covariates) return ResidualisedScales(kernels, train, test, kernels::MakeFoldResidualiser(*pre.covariates, train, test), pre);
  std::vector<double> traces(kernels.size());
  tbb::parallel_for(std::size_t{0}, kernels.size(),
                    [&](std::size_t j) { traces[j] = kernels::MakeFoldVectors(kernels[j], train, test, pre.centre, pre.normalise).Trace(); });
  return GroupScales(traces, pre.kernelGroups);
}
}  // namespace

namespace {
template <typename Kernel>
double LargestCentredSelfSimilarityOf(const Kernel& kernel, const Eigen::Ref<const Eigen::VectorXi>& train, const Preprocessing& pre) {
  if (train.size() == 0) return 0.0;
  const Eigen::VectorXi none(0);
  if (!pre.covariates) return kernels::MakeFoldVectors(kernel, train, none, pre.centre, false).trainDiag.maxCoeff();
  kernels::FoldKernel fk = kernels::SliceFold(kernel, train, none);
  kernels::ResidualiseFold(fk, kernels::MakeFoldResidualiser(*pre.covariates, train, none));
  if (pre.centre) kernels::CentreFold(fk);
  return fk.train.diagonal().maxCoeff();
}
}  // namespace

double LargestCentredSelfSimilarity(const Eigen::MatrixXd& kernel, const Eigen::Ref<const Eigen::VectorXi>& train, const Preprocessing& pre) {
  return LargestCentredSelfSimilarityOf(kernel, train, pre);
}
double LargestCentredSelfSimilarity(const Eigen::MatrixXf& kernel, const Eigen::Ref<const Eigen::VectorXi>& train, const Preprocessing& pre) {
  return LargestCentredSelfSimilarityOf(kernel, train, pre);
}

kernels::FoldKernel PrepareFoldKernel(const Eigen::MatrixXd& kernel, const Eigen::Ref<const Eigen::VectorXi>& train,
                                      const Eigen::Ref<const Eigen::VectorXi>& test, const Preprocessing& pre, double scale) {
  return PrepareFoldKernelOf(kernel, train, test, pre, scale);
}

Eigen::VectorXd FoldScales(const learners::KernelList& kernels, const Eigen::Ref<const Eigen::VectorXi>& train,
                           const Eigen::Ref<const Eigen::VectorXi>& test, const Preprocessing& pre) {
  return FoldScalesOf(kernels, train, test, pre);
}

Eigen::VectorXd FoldScales(const kernels::CompactKernelList& kernels, const Eigen::Ref<const Eigen::VectorXi>& train,
                           const Eigen::Ref<const Eigen::VectorXi>& test, const Preprocessing& pre) {
  CheckStoreFold(kernels, train, test, pre);
  return FoldScalesOf(kernels, train, test, pre);
}

FoldKernelView::FoldKernelView(const learners::KernelList& kernels, const Eigen::Ref<const Eigen::VectorXi>& train,
                               const Eigen::Ref<const Eigen::VectorXi>& test, const Preprocessing& preprocessing)
    : kernels_(&kernels), train_(train), test_(test), preprocessing_(preprocessing) {
  Init();
}

FoldKernelView::FoldKernelView(const kernels::CompactKernelList& kernels, const Eigen::Ref<const Eigen::VectorXi>& train,
                               const Eigen::Ref<const Eigen::VectorXi>& test, const Preprocessing& preprocessing)
    : compact_(&kernels), train_(train), test_(test), preprocessing_(preprocessing) {
  CheckStoreFold(kernels, train_, test_, preprocessing_);
  Init();
}

template <typename F>
decltype(auto) FoldKernelView::WithKernels(const F& f) const {
  return kernels_ ? f(*kernels_) : f(*compact_);
}

void FoldKernelView::Init() {
  if (!preprocessing_.covariates) vectors_ = WithKernels([&](const auto& kernels) { return AllFoldVectors(kernels, train_, test_, preprocessing_); });
}

FoldKernelView::FoldKernelView(const KernelOwners& kernels, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                               const Preprocessing& preprocessing)
    : train_(train), test_(test), preprocessing_(preprocessing) {
  owned_ = kernels.OpenFold(std::vector<int>(train.data(), train.data() + train.size()), std::vector<int>(test.data(), test.data() + test.size()));
}

Eigen::MatrixXd FoldKernelView::Products(std::size_t r, const Eigen::Ref<const Eigen::MatrixXd>& A, double scale) const {
  if (owned_) return owned_->ViewProducts({static_cast<Eigen::Index>(r)}, A, {scale})[0];
  return WithKernels([&](const auto& kernels) -> Eigen::MatrixXd {
    if (vectors_.empty()) return PrepareFoldKernelOf(kernels[r], train_, test_, preprocessing_, scale).train * A;
    Eigen::MatrixXd P = kernels::PreparedProducts(kernels[r], train_, vectors_[r], A);
    if (scale != 1.0) P *= scale;
    return P;
  });
}

std::vector<Eigen::MatrixXd> FoldKernelView::Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                                      const Eigen::VectorXd& scales) const {
  const auto scaleOf = [&](std::size_t r) { return scales.size() > 0 ? scales[static_cast<Eigen::Index>(r)] : 1.0; };
  if (owned_) {
    std::vector<Eigen::Index> kernels;
    std::vector<double> s;
    for (const std::size_t r : which) {
      kernels.push_back(static_cast<Eigen::Index>(r));
      s.push_back(scaleOf(r));
    }
    return owned_->ViewProducts(kernels, A, s);
  }
  std::vector<Eigen::MatrixXd> out(which.size());
  tbb::parallel_for(std::size_t{0}, which.size(), [&](std::size_t i) { out[i] = Products(which[i], A, scaleOf(which[i])); });
  return out;
}

Eigen::VectorXd FoldKernelView::Scales() const {
  if (owned_) return owned_->Scales();
  if (vectors_.empty() || preprocessing_.kernelGroups.empty())
    return WithKernels([&](const auto& kernels) { return FoldScalesOf(kernels, train_, test_, preprocessing_); });
  return VectorScales(vectors_, preprocessing_.kernelGroups);
}

std::string FoldStatus(const OuterFoldResult& fold) { return fold.error.empty() ? std::string(learners::ToString(fold.model.info.status)) : "failed"; }

std::map<std::string, int> FoldStatusCounts(const LearnerOutcome& outcome) {
  std::map<std::string, int> counts;
  for (const auto& f : outcome.folds) ++counts[FoldStatus(f)];
  return counts;
}

std::size_t FoldsInFlight(std::uint64_t bytesPerTask, std::uint64_t budgetBytes, std::size_t threads) {
  const std::size_t fit = bytesPerTask == 0 ? threads : static_cast<std::size_t>(budgetBytes / bytesPerTask);
  return std::max<std::size_t>(1, std::min(fit, std::max<std::size_t>(threads, 1)));
}

namespace {
/// The first number in a file (e.g. a cgroup's memory limit); nullopt if unreadable or not a number ("max").
std::optional<std::uint64_t> ReadNumber(const char* path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}
}  // namespace

std::size_t ActiveThreads() {
  return std::max<std::size_t>(1, std::min(static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency())),
                                           tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)));
}

std::uint64_t AvailableMemoryBytes() {
  std::uint64_t available = 0;
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    std::uint64_t kib = 0;
    while (meminfo >> key >> kib >> unit)
      if (key == "MemAvailable:") {
        available = kib * 1024;
        break;
      }
  }
  if (available == 0) available = kernels::PhysicalMemoryBytes() / 2;
  // A job's memory limit (cgroup v2 or v1, e.g. a cluster scheduler's --mem) is what the run may use,
  // whatever the node has free.
  const std::pair<const char*, const char*> cgroups[] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                                                         {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limitPath, usagePath] : cgroups) {
    const auto limit = ReadNumber(limitPath), usage = ReadNumber(usagePath);
    if (limit && usage && *limit < (1ULL << 60)) available = std::min(available, *limit > *usage ? *limit - *usage : 0);
  }
  return available;
}

namespace {
template <typename KernelVec>
std::vector<LearnerOutcome> RunNestedCvOn(const KernelVec& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                          const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options) {
  const std::size_t F = outer.size(), L = plans.size();
  std::vector<std::unique_ptr<learners::Learner>> learnerObjects;  // one per (plan, grid point), shared read-only
  std::vector<std::size_t> firstObject(L);
  for (std::size_t l = 0; l < L; ++l) {
    firstObject[l] = learnerObjects.size();
    for (const auto& params : plans[l].grid) learnerObjects.push_back(learners::MakeLearner(plans[l].name, params, options.multiclassWeights));
  }
  std::vector<bool> semi(L, false);
  std::vector<int> unlabelled;
  for (int i = 0; i < options.unlabelled; ++i) unlabelled.push_back(static_cast<int>(targets.y.size()) + i);
  // Learners of kernel weights need every fold kernel; the others fit the sum, prepared without copies
  // (always, so that a learner's results do not depend on which other learners the study runs).
  std::vector<std::size_t> viewOf(L);
  std::vector<bool> summed(L);
  FoldNeeds needs{};
  for (std::size_t l = 0; l < L; ++l) {
    const auto* info = learners::FindLearner(plans[l].name);
    semi[l] = info && info->semiSupervised && !unlabelled.empty();
    summed[l] = options.sumKernelsInPlace && info && !info->multipleKernels;
    viewOf[l] = ViewIndex(semi[l], summed[l]);
    needs[viewOf[l]] = true;
  }
  // Probabilities (binary) and bias correction (regression) are fitted on the inner-CV out-of-fold
  // predictions of the chosen parameters: the inner CV then runs for every learner.
  const bool calibrate = (options.probabilities && targets.task == learners::Task::Classification) ||
                         (options.biasCorrection && targets.task == learners::Task::Regression);
  // ---- inner splits (sequential: cheap, and errors surface in fold order) ----
  std::vector<std::vector<Fold>> innerFolds(F);
  bool anySearch = false;
  for (const auto& p : plans) anySearch |= p.grid.size() > 1;
  if (anySearch)
    for (std::size_t f = 0; f < F; ++f) innerFolds[f] = inner(f, outer[f].train, Subset(targets.y, outer[f].train));
  else if (calibrate)
    for (std::size_t f = 0; f < F; ++f) {
      try {
        innerFolds[f] = inner(f, outer[f].train, Subset(targets.y, outer[f].train));
      } catch (const Error&) {
        innerFolds[f].clear();  // no inner split: this fold has no calibration (NaN), the study still runs
      }
    }

  // ---- phase 1: every (outer fold, inner fold) pair evaluates every grid point ----
  // scores[f][l][g][i]
  std::vector<std::vector<std::vector<std::vector<double>>>> scores(F);
  // oof[f][l][g][i]: decision values of inner fold i's test subjects (calibration only; empty = fit failed)
  std::vector<std::vector<std::vector<std::vector<Eigen::VectorXd>>>> oof(F);
  // fitStatus[f][l][g][i]: kNotFitted, or how the fit ended (counted in LearnerOutcome)
  constexpr signed char kNotFitted = -1, kConverged = 0, kCapped = 1, kStalled = 2;
  std::vector<std::vector<std::vector<std::vector<signed char>>>> fitStatus(F);
  // Iterations of the inner fits, per learner (integer sums: the same whatever order the fold tasks run in).
  std::vector<std::atomic<long>> iterationSums(L), solverIterationSums(L);
  std::vector<std::pair<std::size_t, std::size_t>> tasks;
  for (std::size_t f = 0; f < F; ++f) {
    scores[f].resize(L);
    fitStatus[f].resize(L);
    if (calibrate) oof[f].resize(L);
    for (std::size_t l = 0; l < L; ++l) {
      scores[f][l].assign(plans[l].grid.size(), std::vector<double>(innerFolds[f].size(), kNaN));
      fitStatus[f][l].assign(plans[l].grid.size(), std::vector<signed char>(innerFolds[f].size(), kNotFitted));
      if (calibrate) oof[f][l].assign(plans[l].grid.size(), std::vector<Eigen::VectorXd>(innerFolds[f].size()));
    }
    for (std::size_t i = 0; i < innerFolds[f].size(); ++i) tasks.emplace_back(f, i);
  }
  // Folds in flight: as many as the threads, unless their kernel copies would not fit the memory budget.
  const std::uint64_t budget = options.memoryBudgetBytes > 0 ? options.memoryBudgetBytes : AvailableMemoryBytes();
  const std::size_t threads = ActiveThreads();
  const auto limitFor = [&](std::uint64_t bytes, std::size_t count, const char* what) {
    const std::size_t limit = FoldsInFlight(bytes, budget, threads);
    if (bytes > budget) {
      // Even one fold does not fit: say so before the system's out-of-memory killer ends the run without a word.
      static std::atomic<bool> warned{false};
      spdlog::log(warned.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                  "nested CV, {}: one fold's kernels need {:.1f} MiB but {:.1f} MiB are available; the run may run out of memory "
                  "(each fold prepares its training and test blocks of every kernel)",
                  what, static_cast<double>(bytes) / (1ULL << 20), static_cast<double>(budget) / (1ULL << 20));
    } else if (limit < std::min(threads, count)) {
      // Once per process at info level: a permutation test runs hundreds of nested CVs.
      static std::atomic<bool> told{false};
      spdlog::log(told.exchange(true) ? spdlog::level::debug : spdlog::level::info,
                  "nested CV, {}: {} at a time instead of {} (each copies {:.1f} MiB of fold kernels; {:.1f} MiB available)", what, limit,
                  std::min(threads, count), static_cast<double>(bytes) / (1ULL << 20), static_cast<double>(budget) / (1ULL << 20));
    }
    return limit;
  };
  SpareViews spares;
  // Learners of kernel weights can read the training kernels in place where the preprocessing is vectors,
  // unless a learner that needs the matrices shares their view (sumKernelsInPlace off). Results are the same
  // bit for bit; see NestedCvOptions::columnsInPlace for when they do.
  bool weightedReadColumns = true;  // every learner of kernel weights takes its training kernels as columns
  for (std::size_t l = 0; l < L; ++l)
    if (const auto* info = learners::FindLearner(plans[l].name); !summed[l] && !(info && info->readsColumns)) weightedReadColumns = false;
  constexpr bool owned = std::is_same_v<KernelVec, KernelOwners>;  // kernels held by their owners: always "columns"
  if (owned && !weightedReadColumns)
    throw InputError("cv:OwnedKernelsNeedColumns", "nested CV",
                     "kernels held by several owners are fitted as distributed columns or as the fold's summed kernel; a learner that needs "
                     "every fold kernel as a matrix cannot be fitted on them");
  const bool columnsPossible = weightedReadColumns && options.columnsInPlace != ColumnsInPlace::Never && !options.preprocessing.covariates;
  const bool covariates = options.preprocessing.covariates != nullptr;
  std::size_t share = kernels.size();  // the most kernels one owner holds
  if constexpr (owned) share = (kernels.size() + static_cast<std::size_t>(kernels.Owners()) - 1) / static_cast<std::size_t>(kernels.Owners());
  // Float32 training copies: compact store only.
  const bool float32Copies = weightedReadColumns && std::is_same_v<KernelVec, kernels::CompactKernelList> && options.float32FoldCopies;
  const auto readColumns = [&](const auto& bytesOf, std::size_t largestTrain, const char* what) {
    if (owned) return true;
    if (!columnsPossible) return false;
    if (options.columnsInPlace == ColumnsInPlace::Always) return true;
    const std::uint64_t copies = bytesOf(false);
    // Below kPackedStackBelow every fit packs its fold's kernels anyway: packed from the study's kernels in
    // place, the training copies are not needed at all.
    const std::size_t withUnlabelled = largestTrain + (needs[ViewIndex(true, false)] ? unlabelled.size() : 0);
    if (copies <= budget) return static_cast<Eigen::Index>(withUnlabelled) < learners::kPackedStackBelow;
    static std::atomic<bool> told{false};  // once per process at info level (permutation tests run many)
    spdlog::log(told.exchange(true) ? spdlog::level::debug : spdlog::level::info,
                "nested CV, {}: one fold's kernel copies would need {:.1f} MiB but {:.1f} MiB are available: the learners of kernel "
                "weights read the training kernels in place (same results; from 1,024 training subjects each fit is slower)",
                what, static_cast<double>(copies) / (1ULL << 20), static_cast<double>(budget) / (1ULL << 20));
    return true;
  };
  const auto innerBytesOf = [&](bool withColumns) {
    std::uint64_t bytes = 0;
    for (const auto& [f, i] : tasks)
      bytes = std::max(bytes, owned ? OwnedFoldTaskBytes(share, covariates, innerFolds[f][i].train.size(), innerFolds[f][i].test.size(), unlabelled.size(), needs)
                                    : FoldTaskBytes(kernels.size(), innerFolds[f][i].train.size(), innerFolds[f][i].test.size(), unlabelled.size(), needs,
                                                    withColumns, float32Copies));
    return bytes;
  };
  std::size_t largestInner = 0;
  for (const auto& [f, i] : tasks) largestInner = std::max(largestInner, innerFolds[f][i].train.size());
  bool columns = readColumns(innerBytesOf, largestInner, "inner folds");
  const std::uint64_t innerBytes = innerBytesOf(columns);
  ForEachLimited(tasks.size(), limitFor(innerBytes, tasks.size(), "inner folds"), [&](std::size_t t) {
    const auto [f, i] = tasks[t];
    const Fold& fold = innerFolds[f][i];
    std::vector<int> tr, te;
    for (int k : fold.train) tr.push_back(outer[f].train[static_cast<std::size_t>(k)]);
    for (int k : fold.test) te.push_back(outer[f].train[static_cast<std::size_t>(k)]);
    std::unique_ptr<FoldViews> spare = spares.Take();
    PrepareViews(kernels, targets, tr, te, options.preprocessing, unlabelled, needs, columns, float32Copies, *spare);
    const FoldViews& views = *spare;
    const Eigen::VectorXd yTest = Subset(targets.y, te);
    // Every fit on this fold's kernels (all grid points of all learners) shares their check and packed stack.
    std::array<learners::TrainingKernelCache, 4> caches;  // one per view: a cache is bound to one kernel list
    Eigen::MatrixXd testBuffer;  // with columns: the test block a decision reads, one kernel at a time
    for (std::size_t l = 0; l < L; ++l) {
      const auto& grid = plans[l].grid;
      if (grid.size() < 2 && !calibrate) continue;
      const FoldKernels& fk = views.kernels[viewOf[l]];
      const learners::KernelColumns* trainColumns = summed[l] ? nullptr : views.TrainingColumns(semi[l]);
      const learners::TestBlocks test = summed[l] ? learners::HeldBlocks(fk.test) : views.Test(semi[l], fk, testBuffer);
      learners::Targets weighted;
      const learners::Targets& yTrain = Weighted(plans[l], views.y[semi[l]], weighted);
      std::vector<learners::Model> fitted(grid.size());
      std::vector<bool> ok(grid.size(), false);
      for (std::size_t g = 0; g < grid.size(); ++g) {
        learners::FitOptions fitOptions;
        if (options.shareFoldWork) fitOptions.cache = &caches[viewOf[l]];
        fitOptions.columns = trainColumns;
        if (const auto w = NearestFitted(grid, ok, g)) fitOptions.warmStart = &fitted[*w];
        try {
          fitted[g] = learnerObjects[firstObject[l] + g]->Fit(fk.train, yTrain, fitOptions);
          ok[g] = true;
          const learners::FitStatus status = fitted[g].info.status;
          fitStatus[f][l][g][i] = status == learners::FitStatus::Converged ? kConverged : status == learners::FitStatus::MaxIterReached ? kCapped : kStalled;
          iterationSums[l] += fitted[g].info.iterations;
          solverIterationSums[l] += fitted[g].info.innerIterations;
          scores[f][l][g][i] = InnerScore(targets, options.criterion, yTest, fitted[g], test);
          if (calibrate) oof[f][l][g][i] = fitted[g].Decision(test);
        } catch (const Error&) {
          // e.g. a single class in a small inner training set: this point scores NaN (never chosen)
        }
      }
    }
    spares.Give(std::move(spare));
  });
  spares.Clear();  // the outer folds' training sets are larger: their copies are new memory

  // ---- phase 2: choose per outer fold, refit on the outer training set, predict the test set ----
  std::vector<LearnerOutcome> out(L);
  for (std::size_t l = 0; l < L; ++l) {
    out[l].label = plans[l].label;
    out[l].name = plans[l].name;
    out[l].grid = plans[l].grid;
    out[l].folds.resize(F);
  }
  const auto outerBytesOf = [&](bool withColumns) {
    std::uint64_t bytes = 0;
    for (const auto& fold : outer)
      bytes = std::max(bytes, owned ? OwnedFoldTaskBytes(share, covariates, fold.train.size(), fold.test.size(), unlabelled.size(), needs)
                                    : FoldTaskBytes(kernels.size(), fold.train.size(), fold.test.size(), unlabelled.size(), needs, withColumns, float32Copies));
    return bytes;
  };
  std::size_t largestOuter = 0;
  for (const auto& fold : outer) largestOuter = std::max(largestOuter, fold.train.size());
  columns = readColumns(outerBytesOf, largestOuter, "outer folds");
  const std::uint64_t outerBytes = outerBytesOf(columns);
  ForEachLimited(F, limitFor(outerBytes, F, "outer folds"), [&](std::size_t f) {
    std::unique_ptr<FoldViews> spare = spares.Take();
    PrepareViews(kernels, targets, outer[f].train, outer[f].test, options.preprocessing, unlabelled, needs, columns, float32Copies, *spare);
    const FoldViews& views = *spare;
    std::array<learners::TrainingKernelCache, 4> caches;  // one per view: a cache is bound to one kernel list
    Eigen::MatrixXd testBuffer;  // with columns: the test block a decision reads, one kernel at a time
    for (std::size_t l = 0; l < L; ++l) {
      const FoldKernels& fk = views.kernels[viewOf[l]];
      const learners::KernelColumns* trainColumns = summed[l] ? nullptr : views.TrainingColumns(semi[l]);
      const learners::TestBlocks test = summed[l] ? learners::HeldBlocks(fk.test) : views.Test(semi[l], fk, testBuffer);
      learners::Targets weighted;
      const learners::Targets& yTrain = Weighted(plans[l], views.y[semi[l]], weighted);
      OuterFoldResult& r = out[l].folds[f];
      r.index = static_cast<int>(f);
      r.repeat = outer[f].repeat;
      r.train = outer[f].train;
      r.test = outer[f].test;
      if (semi[l]) r.unlabelled = unlabelled;
      if (plans[l].grid.size() > 1) {
        r.innerScores.resize(plans[l].grid.size());
        for (std::size_t g = 0; g < plans[l].grid.size(); ++g) {
          const auto& s = scores[f][l][g];
          double sum = 0;
          std::size_t count = 0;
          for (double v : s)
            if (!std::isnan(v)) sum += v, ++count;
          r.innerScores[g] = count == s.size() && count > 0 ? sum / static_cast<double>(count) : kNaN;
        }
        r.chosen = 0;
        for (std::size_t g = 1; g < r.innerScores.size(); ++g)
          if (Better(targets.task, r.innerScores[g], r.innerScores[r.chosen])) r.chosen = g;  // strict: ties keep the earlier point
      }
      try {
        r.model = learnerObjects[firstObject[l] + r.chosen]->Fit(
            fk.train, yTrain,
            learners::FitOptions{nullptr, options.shareFoldWork ? &caches[viewOf[l]] : nullptr, trainColumns});
        if (targets.task == learners::Task::Multiclass) {
          r.scores = r.model.Scores(test);
          r.decision = metrics::PredictedClasses(r.scores);  // NaN where a score is not finite
        } else {
          r.decision = r.model.Decision(test);
        }
        // A fit on the summed kernel reports the model over the study's kernels (weights, maps, export).
        if (summed[l]) r.model = ExpandSummedModel(std::move(r.model), static_cast<Eigen::Index>(kernels.size()));
        // One definition of a failed fold everywhere (status, warnings, maps, metrics): a model whose
        // predictions are not finite failed, even if the solver returned.
        if (!r.decision.allFinite())
          throw NumericalError("cv:NonFiniteDecision", "outer fold " + std::to_string(r.index),
                               "the refitted model's decision values are not finite (NaN or infinite)");
      } catch (const Error& e) {
        r.error = e.what();
        r.decision = Eigen::VectorXd::Constant(static_cast<Eigen::Index>(r.test.size()), kNaN);
        if (targets.task == learners::Task::Multiclass) r.scores = Eigen::MatrixXd::Constant(static_cast<Eigen::Index>(r.test.size()), targets.classes, kNaN);
      }
      if (calibrate) {
        // The chosen point's out-of-fold decision values over the inner folds: this outer fold's training
        // subjects only, so nothing of its test subjects enters the calibration.
        std::vector<double> fo, yo;
        for (std::size_t i = 0; i < innerFolds[f].size(); ++i) {
          const Eigen::VectorXd& d = oof[f][l][r.chosen][i];
          const Fold& fold = innerFolds[f][i];
          for (std::size_t k = 0; k < fold.test.size(); ++k) {
            fo.push_back(d.size() > 0 ? d[static_cast<Eigen::Index>(k)] : kNaN);
            yo.push_back(targets.y[outer[f].train[static_cast<std::size_t>(fold.test[k])]]);
          }
        }
        const Eigen::Map<const Eigen::VectorXd> fv(fo.data(), static_cast<Eigen::Index>(fo.size())), yv(yo.data(), static_cast<Eigen::Index>(yo.size()));
        if (targets.task == learners::Task::Classification) {
          if (r.error.empty()) r.platt = metrics::FitPlatt(fv, yv);
          r.probability = metrics::PlattProbabilities(r.platt, r.decision);
        } else {
          if (r.error.empty()) r.bias = metrics::FitBiasCorrection(yv, fv);
          r.corrected = metrics::ApplyBiasCorrection(r.bias, r.decision);
        }
      }
    }
    spares.Give(std::move(spare));
  });
  for (std::size_t l = 0; l < L; ++l) {
    long fits = static_cast<long>(F);
    if (plans[l].grid.size() > 1 || calibrate)
      for (std::size_t f = 0; f < F; ++f) fits += static_cast<long>(innerFolds[f].size() * plans[l].grid.size());
    out[l].fits = fits;
    out[l].innerIterations = iterationSums[l];
    out[l].innerSolverIterations = solverIterationSums[l];
    for (std::size_t f = 0; f < F; ++f)
      for (const auto& point : fitStatus[f][l])
        for (const signed char status : point) {
          out[l].innerFits += status != kNotFitted;
          out[l].innerNotConverged += status == kCapped || status == kStalled;
          out[l].innerCapped += status == kCapped;
        }
  }
  return out;
}
}  // namespace

std::vector<LearnerOutcome> RunNestedCv(const learners::KernelList& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                        const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options) {
  return RunNestedCvOn(kernels, targets, outer, inner, plans, options);
}
std::vector<LearnerOutcome> RunNestedCv(const kernels::CompactKernelList& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                        const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options) {
  CheckStoreFits(kernels, options.preprocessing);
  return RunNestedCvOn(kernels, targets, outer, inner, plans, options);
}
std::vector<LearnerOutcome> RunNestedCv(const KernelOwners& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                        const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options) {
  const Preprocessing& held = kernels.preprocessing();
  if (held.centre != options.preprocessing.centre || held.normalise != options.preprocessing.normalise ||
      held.kernelGroups != options.preprocessing.kernelGroups || held.covariates != options.preprocessing.covariates)
    throw std::logic_error("RunNestedCv: the owners prepare their folds with another preprocessing (KernelOwners::SetPreprocessing)");
  return RunNestedCvOn(kernels, targets, outer, inner, plans, options);
}

bool FoldFailed(const OuterFoldResult& fold) { return !fold.error.empty() || !fold.decision.allFinite(); }

std::map<std::string, double> Metrics(const learners::Targets& targets, const Eigen::VectorXd& y, const Eigen::VectorXd& f, const Eigen::MatrixXd& scores) {
  if (targets.task == learners::Task::Multiclass) return metrics::AsMap(metrics::MultiClassify(y, scores, targets.classes));
  return targets.task == learners::Task::Classification ? metrics::AsMap(metrics::Classify(y, f)) : metrics::AsMap(metrics::Regress(y, f));
}

namespace {
/// Probabilities (binary: brier, log_loss) and bias correction (regression: corrected_<metric>, gap_slope,
/// corrected_gap_slope) of one set of out-of-fold predictions; empty when the folds carry neither.
std::map<std::string, double> CalibrationMetrics(const Eigen::VectorXd& y, const Eigen::VectorXd& f, const Eigen::VectorXd& probability,
                                                 const Eigen::VectorXd& corrected) {
  std::map<std::string, double> out;
  if (probability.size() > 0) {
    out["brier"] = metrics::BrierScore(y, probability);
    out["log_loss"] = metrics::LogLoss(y, probability);
  }
  if (corrected.size() > 0) {
    for (const auto& [k, v] : metrics::AsMap(metrics::Regress(y, corrected)))
      if (k != "n") out["corrected_" + k] = v;
    Eigen::VectorXd fFinite = f;  // gap slopes over the subjects both versions score
    for (Eigen::Index i = 0; i < f.size(); ++i)
      if (!std::isfinite(corrected[i])) fFinite[i] = kNaN;
    out["gap_slope"] = metrics::GapSlope(y, fFinite);
    out["corrected_gap_slope"] = metrics::GapSlope(y, corrected);
  }
  return out;
}
}  // namespace

Summary Summarise(const LearnerOutcome& outcome, const learners::Targets& targets) {
  Summary s;
  bool withProbability = false, withCorrected = false;
  for (const auto& fold : outcome.folds) {
    withProbability |= fold.probability.size() > 0;
    withCorrected |= fold.corrected.size() > 0;
  }
  const bool multiclass = targets.task == learners::Task::Multiclass;
  int repeats = 0;
  for (const auto& f : outcome.folds) repeats = std::max(repeats, f.repeat + 1);
  // Pooled: per repeat over all out-of-fold predictions, then the mean over repeats.
  std::map<std::string, std::vector<double>> pooled;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> y, f, p, c;
    std::vector<Eigen::RowVectorXd> rows;
    for (const auto& fold : outcome.folds) {
      if (fold.repeat != r) continue;
      for (std::size_t i = 0; i < fold.test.size(); ++i) {
        y.push_back(targets.y[fold.test[i]]);
        f.push_back(fold.decision[static_cast<Eigen::Index>(i)]);
        if (multiclass) rows.push_back(fold.scores.row(static_cast<Eigen::Index>(i)));
        if (withProbability) p.push_back(fold.probability.size() > 0 ? fold.probability[static_cast<Eigen::Index>(i)] : kNaN);
        if (withCorrected) c.push_back(fold.corrected.size() > 0 ? fold.corrected[static_cast<Eigen::Index>(i)] : kNaN);
      }
    }
    const Eigen::Map<Eigen::VectorXd> yv(y.data(), static_cast<Eigen::Index>(y.size())), fv(f.data(), static_cast<Eigen::Index>(f.size()));
    Eigen::MatrixXd scores(static_cast<Eigen::Index>(rows.size()), multiclass ? targets.classes : 0);
    for (std::size_t i = 0; i < rows.size(); ++i) scores.row(static_cast<Eigen::Index>(i)) = rows[i];
    for (const auto& [k, v] : Metrics(targets, yv, fv, scores)) pooled[k].push_back(v);
    const Eigen::Map<Eigen::VectorXd> pv(p.data(), static_cast<Eigen::Index>(p.size())), corr(c.data(), static_cast<Eigen::Index>(c.size()));
    for (const auto& [k, v] : CalibrationMetrics(yv, fv, pv, corr)) pooled[k].push_back(v);
  }
  for (const auto& [k, v] : pooled) {
    double sum = 0;
    for (double x : v) sum += x;
    s.pooled[k] = sum / static_cast<double>(v.size());
  }
  // A failed fit has no prediction: its subjects are never scored (the metrics leave out NaN decision
  // values), so the pooled metrics cover the successful folds only, and say how many failed.
  int failed = 0;
  for (const auto& fold : outcome.folds) failed += FoldFailed(fold) ? 1 : 0;
  s.pooled["failed_folds"] = failed;
  s.pooled["scored_subjects"] = s.pooled.count("n") ? s.pooled.at("n") : 0.0;
  std::map<std::string, std::vector<double>> perFold;
  for (const auto& fold : outcome.folds) {
    if (FoldFailed(fold)) continue;
    const Eigen::VectorXd y = Subset(targets.y, fold.test);
    for (const auto& [k, v] : Metrics(targets, y, fold.decision, fold.scores))
      if (!std::isnan(v)) perFold[k].push_back(v);
    for (const auto& [k, v] : CalibrationMetrics(y, fold.decision, fold.probability, fold.corrected))
      if (!std::isnan(v)) perFold[k].push_back(v);
  }
  for (const auto& [k, v] : perFold) {
    const MeanSd ms = SampleMeanSd(v);
    s.foldMean[k] = ms.mean;
    s.foldSd[k] = ms.sd;
  }
  return s;
}

std::vector<std::pair<std::string, bool>> PermutationMetrics(learners::Task task) {
  if (task == learners::Task::Classification) return {{"balanced_accuracy", true}, {"auc", true}, {"accuracy", true}};
  if (task == learners::Task::Multiclass) return {{"balanced_accuracy", true}, {"macro_auc", true}, {"kappa", true}, {"accuracy", true}};
  return {{"pearson_r", true}, {"r2", true}, {"mse", false}};
}

}  // namespace neuromkl::cv
