// The input checks every learner's Fit shares (the contract), and class weights as per-subject loss weights.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::learners {

void ValidateFitInput(std::string_view learner, const KernelList& train, const Targets& targets, bool allowUnlabelled) {
  ValidateFitInput(learner, train, targets, FitOptions{}, allowUnlabelled);
}

namespace {
void ValidateFit(std::string_view learner, const KernelList& train, const Targets& targets, const FitOptions& options, bool allowUnlabelled,
                 bool matrixValues);
std::string NonFiniteKernelMessage(std::size_t kernel) { return fmt::format("training kernel {} has NaN or infinite entries", kernel); }
}  // namespace

void ValidateFitInput(std::string_view learner, const KernelList& train, const Targets& targets, const FitOptions& options, bool allowUnlabelled) {
  ValidateFit(learner, train, targets, options, allowUnlabelled, true);
}

void ValidateFitInputExceptValues(std::string_view learner, const KernelList& train, const Targets& targets, const FitOptions& options,
                                  bool allowUnlabelled) {
  ValidateFit(learner, train, targets, options, allowUnlabelled, false);
}

const gram::KernelStack& CheckedStack(std::string_view learner, const KernelList& train, const FitOptions& options,
                                      std::unique_ptr<gram::KernelStack>& local) {
  if (options.kernels) return SharedStack(options.cache, *options.kernels, local);  // checked by ValidateFitInput
  const bool checked = CheckedBefore(options.cache, train);
  const gram::KernelStack& stack = SharedStack(options.cache, train, local);
  if (!checked) {
    if (const Eigen::Index bad = stack.FirstNonFinite(); bad >= 0)
      throw InputError("learners:NonFiniteKernel", "learner " + std::string(learner), NonFiniteKernelMessage(static_cast<std::size_t>(bad)));
    MarkChecked(options.cache);
  }
  return stack;
}

namespace {
void ValidateFit(std::string_view learner, const KernelList& train, const Targets& targets, const FitOptions& options, bool allowUnlabelled,
                 bool matrixValues) {
  const std::string where = "learner " + std::string(learner);
  const Eigen::Index n = targets.y.size();
  const LearnerInfo* known = FindLearner(learner);
  if (options.kernels && (!known || !known->kernelsInPlace))
    throw InputError("learners:ColumnsUnsupported", where, "this learner needs its training kernels as matrices, got kernels given in place");
  if (options.kernels && !train.empty())
    throw InputError("learners:KernelsTwice", where,
                     fmt::format("expected the training kernels either as matrices or given in place, got {} matrices and kernels in place", train.size()));
  if (options.kernels ? options.kernels->Count() == 0 : train.empty())
    throw InputError("learners:NoKernel", where, "expected at least one training kernel, got none");
  if (targets.task == Task::Multiclass && known && !known->multiclass) {
    std::vector<std::string> able;
    for (const auto& l : LearnerCatalog())
      if (l.multiclass) able.push_back(l.name);
    throw InputError("learners:TaskUnsupported", where, fmt::format("{} is not a multiclass learner; multiclass learners: {}", learner, Join(able, ", ")));
  }
  // The shapes are checked on every call (O(m)): a cached list checked against other targets is refused too.
  if (options.kernels && options.kernels->Size() != n)
    throw InputError("learners:KernelShape", where,
                     fmt::format("training kernels are {0}x{0}, expected {1}x{1} (= number of targets)", options.kernels->Size(), n));
  if (options.kernels && !CheckedBefore(options.cache, *options.kernels)) {
    // Each kernel's upper triangle (the part a learner reads); the first bad kernel is reported.
    if (const Eigen::Index bad = options.kernels->FirstNonFinite(); bad >= 0)
      throw InputError("learners:NonFiniteKernel", where, fmt::format("training kernel {} has NaN or infinite entries", bad));
    MarkChecked(options.cache);
  }
  for (std::size_t j = 0; j < train.size(); ++j) {
    const auto& K = train[j];
    if (K.rows() != n || K.cols() != n)
      throw InputError("learners:KernelShape", where,
                       fmt::format("training kernel {} is {}x{}, expected {}x{} (= number of targets)", j, K.rows(), K.cols(), n, n));
  }
  if (matrixValues && !options.kernels && !CheckedBefore(options.cache, train)) {
    // x * 0 is 0 for a finite x and NaN otherwise, so the (vectorised) sum is NaN exactly when an
    // entry is not finite: one pass at memory speed (allFinite compares entry by entry).
    for (std::size_t j = 0; j < train.size(); ++j)
      if (std::isnan((train[j].array() * 0.0).sum())) throw InputError("learners:NonFiniteKernel", where, NonFiniteKernelMessage(j));
    MarkChecked(options.cache);
  }
  Eigen::Index labelled = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const double v = targets.y[i];
    if (std::isnan(v) && allowUnlabelled) continue;
    if (!std::isfinite(v))
      throw InputError("learners:NonFiniteTarget", where,
                       allowUnlabelled ? "targets contain infinite values" : "targets contain NaN or infinite values (this learner needs every target)");
    ++labelled;
  }
  if (labelled < 2) throw InputError("learners:TooFewSubjects", where, fmt::format("expected at least 2 labelled training subjects, got {}", labelled));
  if (targets.sampleWeights.size() > 0) {
    if (targets.task == Task::Regression)
      throw InputError("learners:WeightsUnsupported", where, "subject weights are class weights: they apply to classification only");
    if (targets.sampleWeights.size() != n)
      throw InputError("learners:WeightShape", where, fmt::format("expected {} subject weights (one per target), got {}", n, targets.sampleWeights.size()));
    for (Eigen::Index i = 0; i < n; ++i)
      if (!std::isfinite(targets.sampleWeights[i]) || !(targets.sampleWeights[i] > 0))
        throw InputError("learners:BadWeight", where, fmt::format("subject weights must be finite and > 0, found {} at index {}", targets.sampleWeights[i], i));
  }
  if (targets.task == Task::Classification) {
    Eigen::Index pos = 0, neg = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      if (std::isnan(targets.y[i])) continue;
      if (targets.y[i] == 1.0) ++pos;
      else if (targets.y[i] == -1.0) ++neg;
      else throw InputError("learners:BadLabel", where, fmt::format("classification labels must be -1 or +1, found {} at index {}", targets.y[i], i));
    }
    if (pos == 0 || neg == 0)
      throw InputError("learners:SingleClass", where,
                       fmt::format("classification needs both classes in the training set, found {} positive and {} negative", pos, neg));
  }
  if (targets.task == Task::Multiclass) {
    if (targets.classes < 2) throw InputError("learners:BadClassCount", where, fmt::format("multiclass targets need at least 2 classes, got {}", targets.classes));
    std::vector<int> count(static_cast<std::size_t>(targets.classes), 0);
    for (Eigen::Index i = 0; i < n; ++i) {
      const double v = targets.y[i];
      if (std::isnan(v)) continue;
      if (v != std::floor(v) || v < 0 || v >= targets.classes)
        throw InputError("learners:BadLabel", where, fmt::format("multiclass labels must be 0..{}, found {} at index {}", targets.classes - 1, v, i));
      ++count[static_cast<std::size_t>(v)];
    }
    int present = 0;
    for (int c : count) present += c > 0;
    if (present < 2) throw InputError("learners:SingleClass", where, "multiclass training needs at least two classes present, found one");
  }
}
}  // namespace


Eigen::VectorXd ClassSampleWeights(const ClassWeights& weights, const Targets& targets) {
  if (!weights.Active()) return {};
  const Eigen::Index n = targets.y.size();
  std::map<double, int> counts;
  int labelled = 0;
  for (Eigen::Index i = 0; i < n; ++i)
    if (!std::isnan(targets.y[i])) ++counts[targets.y[i]], ++labelled;
  Eigen::VectorXd w = Eigen::VectorXd::Ones(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double label = targets.y[i];
    if (std::isnan(label)) continue;
    if (weights.balanced) {
      w[i] = static_cast<double>(labelled) / (static_cast<double>(counts.size()) * static_cast<double>(counts.at(label)));
    } else if (const auto it = weights.given.find(label); it != weights.given.end()) {
      w[i] = it->second;
    }
  }
  return w;
}


}  // namespace neuromkl::learners
