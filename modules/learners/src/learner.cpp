#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/learners/learner.hpp"
#include "smo.hpp"

#include <Eigen/Cholesky>
#include <Eigen/LU>
#include <Eigen/QR>

namespace neuromkl::learners {

std::string_view ToString(FitStatus s) {
  switch (s) {
    case FitStatus::Converged: return "converged";
    case FitStatus::MaxIterReached: return "max_iterations_reached";
    case FitStatus::Stalled: return "stalled";
  }
  return "unknown";
}

namespace {
/// Checks test-vs-train blocks against a model with `cols` training columns; returns the test count.
Eigen::Index CheckTestKernels(const KernelList& testVsTrain, const Eigen::VectorXd& beta, Eigen::Index cols) {
  if (testVsTrain.size() != static_cast<std::size_t>(beta.size()))
    throw InputError("learners:KernelCount", "decision",
                     fmt::format("got {} test kernels, the model was trained on {}", testVsTrain.size(), beta.size()));
  const Eigen::Index m = testVsTrain.empty() ? 0 : testVsTrain[0].rows();
  for (std::size_t j = 0; j < testVsTrain.size(); ++j) {
    const auto& Kt = testVsTrain[j];
    if (Kt.rows() != m || Kt.cols() != cols)
      throw InputError("learners:TestShape", "decision",
                       fmt::format("test kernel {} is {}x{}, expected {}x{} (= test subjects x training subjects)", j, Kt.rows(),
                                   Kt.cols(), m, cols));
  }
  return m;
}
}  // namespace

TestBlocks HeldBlocks(const KernelList& testVsTrain) {
  return {static_cast<Eigen::Index>(testVsTrain.size()), testVsTrain.empty() ? 0 : testVsTrain[0].rows(),
          [&testVsTrain](Eigen::Index j) -> const Eigen::MatrixXd& { return testVsTrain[static_cast<std::size_t>(j)]; },
          {}};
}

namespace {
/// Block j of `test`, its shape checked against the model's training subjects.
const Eigen::MatrixXd& CheckedBlock(const TestBlocks& test, Eigen::Index j, Eigen::Index cols) {
  const Eigen::MatrixXd& Kt = test.block(j);
  if (Kt.rows() != test.rows || Kt.cols() != cols)
    throw InputError("learners:TestShape", "decision",
                     fmt::format("test kernel {} is {}x{}, expected {}x{} (= test subjects x training subjects)", j, Kt.rows(), Kt.cols(), test.rows, cols));
  return Kt;
}

void CheckBlockCount(const TestBlocks& test, const Eigen::VectorXd& beta) {
  if (test.count != beta.size())
    throw InputError("learners:KernelCount", "decision", fmt::format("got {} test kernels, the model was trained on {}", test.count, beta.size()));
}
}  // namespace

Eigen::VectorXd Model::Decision(const KernelList& testVsTrain) const {
  if (Multiclass())
    throw InputError("learners:MulticlassModel", "decision", "a multiclass model has one score per class: use Scores, not Decision");
  CheckTestKernels(testVsTrain, beta, coef.size());
  return Decision(HeldBlocks(testVsTrain));
}

Eigen::MatrixXd Model::Scores(const KernelList& testVsTrain) const {
  if (!Multiclass()) return Decision(testVsTrain);
  CheckTestKernels(testVsTrain, beta, coefs.rows());
  return Scores(HeldBlocks(testVsTrain));
}

Eigen::MatrixXd TestProduct(const Eigen::MatrixXd& block, const Eigen::MatrixXd& C, int form) {
  if (form == kProductVector) return Eigen::MatrixXd(block * Eigen::VectorXd(C.col(0)));
  if (form == kProductMatrix) return block * C;
  Eigen::MatrixXd P(block.rows(), C.cols());
  for (Eigen::Index c = 0; c < C.cols(); ++c) P.col(c) = block * Eigen::VectorXd(C.col(c));
  return P;
}

namespace {
/// TestProduct of every block in `which` (the kernels a decision uses): computed here from the blocks, or where
/// they are held (TestBlocks::products). Either way each product is formed whole before it is weighted and added, so
/// a decision's value does not depend on where its blocks are.
std::vector<Eigen::MatrixXd> BlockProducts(const TestBlocks& test, const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) {
  if (test.products) {
    std::vector<Eigen::MatrixXd> P = test.products(which, C, form);
    for (std::size_t i = 0; i < P.size(); ++i)
      if (P[i].rows() != test.rows || P[i].cols() != C.cols())
        throw InputError("learners:TestShape", "decision",
                         fmt::format("test kernel {} gave {}x{} products, expected {}x{}", which[i], P[i].rows(), P[i].cols(), test.rows, C.cols()));
    return P;
  }
  std::vector<Eigen::MatrixXd> P;
  for (const Eigen::Index j : which) P.push_back(TestProduct(CheckedBlock(test, j, C.rows()), C, form));
  return P;
}
}  // namespace

Eigen::VectorXd Model::Decision(const TestBlocks& test) const {
  if (Multiclass())
    throw InputError("learners:MulticlassModel", "decision", "a multiclass model has one score per class: use Scores, not Decision");
  CheckBlockCount(test, beta);
  Eigen::VectorXd f = Eigen::VectorXd::Constant(test.rows, bias);
  std::vector<Eigen::Index> used;
  for (Eigen::Index j = 0; j < test.count; ++j)
    if (beta[j] != 0.0) used.push_back(j);
  if (used.empty()) return f;
  const auto P = BlockProducts(test, used, Eigen::MatrixXd(coef), kProductVector);
  for (std::size_t i = 0; i < used.size(); ++i) f.noalias() += beta[used[i]] * P[i].col(0);  // in kernel order
  return f;
}

Eigen::MatrixXd Model::Scores(const TestBlocks& test) const {
  if (!Multiclass()) return Decision(test);
  CheckBlockCount(test, beta);
  Eigen::MatrixXd S = biases.transpose().replicate(test.rows, 1);
  std::vector<Eigen::Index> used;
  if (betas.cols() > 0) {  // per-class kernel weights; each class's column adds its kernels in kernel order
    for (Eigen::Index j = 0; j < test.count; ++j)
      if (!(betas.row(j).array() == 0.0).all()) used.push_back(j);
    if (used.empty()) return S;
    const auto P = BlockProducts(test, used, coefs, kProductColumns);
    for (std::size_t i = 0; i < used.size(); ++i)
      for (Eigen::Index c = 0; c < coefs.cols(); ++c)
        if (const double b = betas(used[i], c); b != 0.0) S.col(c).noalias() += b * P[i].col(c);
    return S;
  }
  for (Eigen::Index j = 0; j < test.count; ++j)
    if (beta[j] != 0.0) used.push_back(j);
  if (used.empty()) return S;
  const auto P = BlockProducts(test, used, coefs, kProductMatrix);
  for (std::size_t i = 0; i < used.size(); ++i) S.noalias() += beta[used[i]] * P[i];
  return S;
}

TrainingKernelCache::TrainingKernelCache() = default;
TrainingKernelCache::~TrainingKernelCache() = default;

bool TrainingKernelCache::Bind(const KernelList& kernels) {
  std::vector<std::pair<const void*, Eigen::Index>> key;
  key.reserve(kernels.size());
  for (const auto& K : kernels) key.emplace_back(K.data(), K.rows() * (K.cols() + 1));  // rows and cols both enter the size
  return BindKey(std::move(key));
}

bool TrainingKernelCache::Bind(const KernelColumns& columns) { return BindKey({{&columns, columns.Size()}, {nullptr, columns.Count()}}); }

bool TrainingKernelCache::BindKey(std::vector<std::pair<const void*, Eigen::Index>> key) {
  if (key == key_) return true;
  key_ = std::move(key);
  checked_ = false;
  stack_.reset();
  sum_.resize(0, 0);
  activeKnown_ = false;
  return false;
}

bool CheckedBefore(TrainingKernelCache* cache, const KernelColumns& columns) {
  if (!cache) return false;
  return cache->Bind(columns) && cache->checked_;
}

const KernelStack& SharedStack(TrainingKernelCache* cache, const KernelColumns& columns, std::unique_ptr<KernelStack>& local) {
  return cache ? cache->Stack(columns) : *(local = std::make_unique<KernelStack>(columns));
}

Eigen::Index KernelCount(const KernelList& train, const FitOptions& options) {
  return options.columns ? options.columns->Count() : static_cast<Eigen::Index>(train.size());
}

std::vector<Eigen::Index> ActiveKernels(const KernelList& train, const FitOptions& options) {
  // Shared along a grid: the scan reads a strided diagonal of every kernel (~2 % of an ENMKL nested CV).
  if (TrainingKernelCache* cache = options.cache) {
    if (!(options.columns ? cache->Bind(*options.columns) : cache->Bind(train)) || !cache->activeKnown_) {
      FitOptions uncached = options;
      uncached.cache = nullptr;
      cache->active_ = ActiveKernels(train, uncached);
      cache->activeKnown_ = true;
    }
    return cache->active_;
  }
  if (!options.columns) return ActiveKernels(train);
  if (const auto* d = dynamic_cast<const DistributedColumns*>(options.columns)) return d->NonZero();
  // As ActiveKernels: a non-zero diagonal entry settles it, else the whole upper triangle is scanned.
  const KernelColumns& c = *options.columns;
  const Eigen::Index n = c.Size();
  std::vector<Eigen::Index> active;
  std::vector<double> column(static_cast<std::size_t>(n));
  for (Eigen::Index k = 0; k < c.Count(); ++k) {
    bool nonzero = false;
    for (Eigen::Index j = 0; j < n && !nonzero; ++j) {
      c.UpperColumn(k, j, column.data());
      nonzero = column[static_cast<std::size_t>(j)] != 0.0;
    }
    for (Eigen::Index j = 0; j < n && !nonzero; ++j) {
      c.UpperColumn(k, j, column.data());
      for (Eigen::Index i = 0; i <= j && !nonzero; ++i) nonzero = column[static_cast<std::size_t>(i)] != 0.0;
    }
    if (nonzero) active.push_back(k);
  }
  return active;
}

bool CheckedBefore(TrainingKernelCache* cache, const KernelList& kernels) {
  if (!cache) return false;
  return cache->Bind(kernels) && cache->checked_;
}

void MarkChecked(TrainingKernelCache* cache) {
  if (!cache) return;
  cache->checked_ = true;
  ++cache->checksRun_;
}

const KernelStack& SharedStack(TrainingKernelCache* cache, const KernelList& kernels, std::unique_ptr<KernelStack>& local) {
  return cache ? cache->Stack(kernels) : *(local = std::make_unique<KernelStack>(kernels));
}

template <typename Kernels>
const KernelStack& TrainingKernelCache::Stack(const Kernels& kernels) {
  if (!Bind(kernels) || !stack_) {
    stack_ = std::make_unique<KernelStack>(kernels);
    ++stacksBuilt_;
  }
  return *stack_;
}

const Eigen::MatrixXd& SharedSum(TrainingKernelCache* cache, const KernelList& kernels, Eigen::MatrixXd& local) {
  const auto ones = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(kernels.size()));
  if (!cache) {
    local = CombineKernels(kernels, ones);
    return local;
  }
  if (!cache->Bind(kernels) || cache->sum_.size() == 0) {
    cache->sum_ = CombineKernels(kernels, ones);
    ++cache->sumsBuilt_;
  }
  return cache->sum_;
}

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

const KernelStack& CheckedStack(std::string_view learner, const KernelList& train, const FitOptions& options, std::unique_ptr<KernelStack>& local) {
  if (options.columns) return SharedStack(options.cache, *options.columns, local);  // checked by ValidateFitInput
  const bool checked = CheckedBefore(options.cache, train);
  const KernelStack& stack = SharedStack(options.cache, train, local);
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
  if (options.columns && (!known || !known->readsColumns))
    throw InputError("learners:ColumnsUnsupported", where, "this learner needs its training kernels as matrices, got kernel columns");
  if (options.columns && !train.empty())
    throw InputError("learners:KernelsTwice", where, fmt::format("expected the training kernels either as matrices or as columns, got {} matrices and columns", train.size()));
  if (options.columns ? options.columns->Count() == 0 : train.empty())
    throw InputError("learners:NoKernel", where, "expected at least one training kernel, got none");
  if (targets.task == Task::Multiclass && known && !known->multiclass) {
    std::vector<std::string> able;
    for (const auto& l : LearnerCatalog())
      if (l.multiclass) able.push_back(l.name);
    throw InputError("learners:TaskUnsupported", where, fmt::format("{} is not a multiclass learner; multiclass learners: {}", learner, Join(able, ", ")));
  }
  // The shapes are checked on every call (O(m)): a cached list checked against other targets is refused too.
  if (options.columns && options.columns->Size() != n)
    throw InputError("learners:KernelShape", where,
                     fmt::format("training kernels are {0}x{0}, expected {1}x{1} (= number of targets)", options.columns->Size(), n));
  if (options.columns && !CheckedBefore(options.cache, *options.columns)) {
    // Each kernel's upper triangle (the part a learner reads); the first bad kernel is reported.
    Eigen::Index bad = -1;
    if (const auto* d = dynamic_cast<const DistributedColumns*>(options.columns)) {
      bad = d->FirstNonFinite();  // checked by the owners
    } else {  // kernels side by side
      const KernelColumns& c = *options.columns;
      std::vector<char> finite(static_cast<std::size_t>(c.Count()), 1);
      tbb::parallel_for(Eigen::Index{0}, c.Count(), [&](Eigen::Index k) {
        Eigen::VectorXd column(n);
        double probe = 0;
        for (Eigen::Index j = 0; j < n; ++j) {
          c.UpperColumn(k, j, column.data());
          probe += (column.head(j + 1).array() * 0.0).sum();
        }
        finite[static_cast<std::size_t>(k)] = !std::isnan(probe);
      });
      for (std::size_t k = 0; k < finite.size() && bad < 0; ++k)
        if (!finite[k]) bad = static_cast<Eigen::Index>(k);
    }
    if (bad >= 0) throw InputError("learners:NonFiniteKernel", where, fmt::format("training kernel {} has NaN or infinite entries", bad));
    MarkChecked(options.cache);
  }
  for (std::size_t j = 0; j < train.size(); ++j) {
    const auto& K = train[j];
    if (K.rows() != n || K.cols() != n)
      throw InputError("learners:KernelShape", where,
                       fmt::format("training kernel {} is {}x{}, expected {}x{} (= number of targets)", j, K.rows(), K.cols(), n, n));
  }
  if (matrixValues && !options.columns && !CheckedBefore(options.cache, train)) {
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

Eigen::MatrixXd CombineKernels(const KernelList& kernels, const Eigen::VectorXd& weights) {
  Eigen::MatrixXd K = Eigen::MatrixXd::Zero(kernels[0].rows(), kernels[0].cols());
  for (std::size_t j = 0; j < kernels.size(); ++j)
    if (weights[static_cast<Eigen::Index>(j)] != 0.0) K.noalias() += weights[static_cast<Eigen::Index>(j)] * kernels[j];
  return K;
}

namespace {
/// out[i] += sum_k w[k] sources[k][i], added one source after the other (the order and rounding of
/// one `out += w_k K_k` per kernel, bit for bit) but four sources per pass over `out`: a quarter of
/// the loads and stores of the accumulator.
/// Float32 sources are widened as they are read: the sum of their values as doubles, bit for bit.
template <typename Scalar>
void AccumulateScaled(double* out, Eigen::Index length, const std::vector<const Scalar*>& sources, const std::vector<double>& w) {
  std::size_t k = 0;
  for (; k + 4 <= sources.size(); k += 4) {
    const Scalar *s0 = sources[k], *s1 = sources[k + 1], *s2 = sources[k + 2], *s3 = sources[k + 3];
    const double w0 = w[k], w1 = w[k + 1], w2 = w[k + 2], w3 = w[k + 3];
    for (Eigen::Index i = 0; i < length; ++i)
      out[i] = (((out[i] + w0 * static_cast<double>(s0[i])) + w1 * static_cast<double>(s1[i])) + w2 * static_cast<double>(s2[i])) +
               w3 * static_cast<double>(s3[i]);
  }
  for (; k < sources.size(); ++k) {
    const Scalar* s0 = sources[k];
    const double w0 = w[k];
    for (Eigen::Index i = 0; i < length; ++i) out[i] += w0 * static_cast<double>(s0[i]);
  }
}

/// sum_{i<j} column[i] a[i] in eight partial sums (a fixed order), float32 columns widened as they are read:
/// the quadratics of a view stack, whatever precision holds the kernel.
template <typename Scalar>
double UpperDot(const Scalar* column, const double* a, Eigen::Index j) {
  double d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Eigen::Index i = 0;
  for (; i + 8 <= j; i += 8)
    for (int r = 0; r < 8; ++r) d[r] += static_cast<double>(column[i + r]) * a[i + r];
  for (; i < j; ++i) d[0] += static_cast<double>(column[i]) * a[i];
  return ((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7]));
}
}  // namespace

void DistributedColumns::UpperColumn(Eigen::Index, Eigen::Index, double*) const {
  throw std::logic_error("DistributedColumns: the kernels are held by their owners and are not read entry by entry");
}

OwnedStack::OwnedStack(const KernelColumns& columns) : stack_(std::make_unique<KernelStack>(columns)) {}
OwnedStack::OwnedStack(const KernelList& kernels) : stack_(std::make_unique<KernelStack>(kernels)) {}
OwnedStack::~OwnedStack() = default;

void OwnedStack::Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const { stack_->Combine(weights, out); }

Eigen::VectorXd OwnedStack::Quadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A, bool perKernel) const {
  Eigen::VectorXd q(static_cast<Eigen::Index>(which.size()));
  if (!perKernel) {
    // KernelStack::Quadratics(a): on a packed stack one product over all of them, so the owner's values are those of
    // its own stack's product (the one-process values bit for bit with one owner).
    if (A.cols() != 1) throw std::logic_error("OwnedStack::Quadratics: one vector per request outside the per-kernel path");
    const Eigen::VectorXd all = stack_->Quadratics(Eigen::VectorXd(A.col(0)));
    for (std::size_t i = 0; i < which.size(); ++i) q[static_cast<Eigen::Index>(i)] = all[which[i]];
    return q;
  }
  // As ScreenedNorms evaluates them: on a packed stack with the packed outer product, else column by column of the
  // rows where A is non-zero, kernels side by side.
  if (stack_->Packed()) {
    const Eigen::VectorXd outer = stack_->PackedOuter(A);
    for (std::size_t i = 0; i < which.size(); ++i) q[static_cast<Eigen::Index>(i)] = stack_->PackedQuadratic(which[i], outer);
    return q;
  }
  const auto nonzero = KernelStack::NonZeroRows(A);
  tbb::parallel_for(std::size_t{0}, which.size(), [&](std::size_t i) { q[static_cast<Eigen::Index>(i)] = stack_->Quadratic(which[i], A, nonzero); });
  return q;
}

Eigen::MatrixXd OwnedStack::Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const { return stack_->Products(which, v); }

double OwnedStack::RootSpectralBound(Eigen::Index k) const { return stack_->RootSpectralBound(k); }

void OwnedStack::Facts(std::vector<char>& finite, std::vector<char>& nonzero) const {
  const auto m = static_cast<std::size_t>(stack_->Size());
  finite.assign(m, 1);
  nonzero.assign(m, 0);
  tbb::parallel_for(std::size_t{0}, m, [&](std::size_t k) {
    bool f = true, z = false;
    stack_->Scan(static_cast<Eigen::Index>(k), f, z);
    finite[k] = f;
    nonzero[k] = z;
  });
}

void KernelStack::Scan(Eigen::Index k, bool& finite, bool& nonzero) const {
  std::vector<double> scratch(columns_ && !Packed() ? static_cast<std::size_t>(n_) : 0);
  double probe = 0;  // x * 0 is 0 for a finite x, NaN otherwise
  bool any = false;
  for (Eigen::Index j = 0; j < n_; ++j) {
    const Eigen::Map<const Eigen::VectorXd> column(UpperColumn(k, j, scratch.data()), j + 1);
    probe += (column.array() * 0.0).sum();
    any = any || (column.array() != 0.0).any();
  }
  finite = !std::isnan(probe);
  nonzero = any;
}

void Float32Columns::UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const {
  const float* column = kernels_[static_cast<std::size_t>(k)].col(j).data();
  for (Eigen::Index i = 0; i <= j; ++i) out[i] = static_cast<double>(column[i]);
}

namespace {
/// sqrt of ||K||_F from the sum of K's squares: ||K||_F >= lambda_max for a symmetric K; the factor covers the rounding
/// of the sums (KernelStack::RootSpectralBound).
double RootOfFrobenius(double squares) { return std::sqrt(std::sqrt(squares) * (1.0 + 1e-10)); }
}  // namespace

KernelStack::KernelStack(const KernelList& kernels)
    : kernels_(&kernels),
      count_(static_cast<Eigen::Index>(kernels.size())),
      n_(kernels.empty() ? 0 : kernels[0].rows()),
      rootBounds_(Eigen::VectorXd::Constant(static_cast<Eigen::Index>(kernels.size()), std::numeric_limits<double>::quiet_NaN())) {
  if (n_ >= kViewFrom) return;
  packed_.resize(n_ * (n_ + 1) / 2, Size());
  finite_.assign(static_cast<std::size_t>(Size()), 1);
  // One pass over each matrix, column by column while it is in cache: the upper part is packed, the whole column is
  // checked for NaN and infinities (x * 0 is NaN exactly for those), and the upper part's squares give the spectral
  // bound (RootSpectralBound's sums, in its order).
  for (Eigen::Index k = 0; k < Size(); ++k) {
    double* out = packed_.col(k).data();
    const Eigen::MatrixXd& K = kernels[static_cast<std::size_t>(k)];
    double probe = 0, frob = 0;
    for (Eigen::Index j = 0; j < n_; ++j) {
      const double* column = K.data() + j * n_;
      out = std::copy(column, column + j + 1, out);
      probe += (K.col(j).array() * 0.0).sum();
      frob += 2.0 * Eigen::Map<const Eigen::VectorXd>(column, j).squaredNorm() + column[j] * column[j];
    }
    finite_[static_cast<std::size_t>(k)] = !std::isnan(probe);
    rootBounds_[k] = RootOfFrobenius(frob);
  }
}

Eigen::Index KernelStack::FirstNonFinite() const {
  if (!kernels_) throw std::logic_error("KernelStack::FirstNonFinite: a stack of matrices only");
  for (Eigen::Index k = 0; k < Size(); ++k) {
    const bool finite = Packed() ? finite_[static_cast<std::size_t>(k)] != 0 : !std::isnan(((*kernels_)[static_cast<std::size_t>(k)].array() * 0.0).sum());
    if (!finite) return k;
  }
  return -1;
}

KernelStack::KernelStack(const KernelColumns& columns)
    : columns_(&columns),
      count_(columns.Count()),
      n_(columns.Size()),
      rootBounds_(Eigen::VectorXd::Constant(columns.Count(), std::numeric_limits<double>::quiet_NaN())) {
  if ((distributed_ = dynamic_cast<const DistributedColumns*>(&columns))) return;  // every operation a request to the owners
  if (n_ >= kViewFrom) {
    // Float32 kernels are read in place by the combination and the quadratics (half the bytes per pass).
    if (const auto* f = dynamic_cast<const Float32Columns*>(&columns)) float32_ = &f->Kernels();
    return;
  }
  packed_.resize(n_ * (n_ + 1) / 2, Size());
  // Kernels are independent (each writes its own column of the store).
  tbb::parallel_for(Eigen::Index{0}, Size(), [&](Eigen::Index k) {
    double* out = packed_.col(k).data();
    for (Eigen::Index j = 0; j < n_; out += j + 1, ++j) columns.UpperColumn(k, j, out);
  });
}

const double* KernelStack::UpperColumn(Eigen::Index k, Eigen::Index j, double* scratch) const {
  if (distributed_) throw std::logic_error("KernelStack: a distributed stack is not read entry by entry");
  if (Packed()) return packed_.col(k).data() + j * (j + 1) / 2;
  if (kernels_) return (*kernels_)[static_cast<std::size_t>(k)].col(j).data();
  columns_->UpperColumn(k, j, scratch);
  return scratch;
}

Eigen::MatrixXd KernelStack::Combine(const Eigen::VectorXd& weights) const {
  Eigen::MatrixXd K;
  Combine(weights, K);
  return K;
}

void KernelStack::Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& K) const {
  // Only the kernels of non-zero weight are read (active-set MKL, issue 17), and of each only the
  // upper triangle. A block of columns of K small enough to stay in cache is summed over the kernels
  // (in their order) and the lower triangle is then filled from the upper one block by block.
  if (distributed_) {
    distributed_->Combine(weights, K);
    return;
  }
  std::vector<Eigen::Index> used;
  for (Eigen::Index k = 0; k < Size(); ++k)
    if (weights[k] != 0.0) used.push_back(k);
  K.resize(n_, n_);
  if (Packed()) {
    Eigen::VectorXd v = Eigen::VectorXd::Zero(packed_.rows());
    std::vector<const double*> sources;
    std::vector<double> w;
    for (auto k : used) {
      sources.push_back(packed_.col(k).data());
      w.push_back(weights[k]);
    }
    AccumulateScaled(v.data(), v.size(), sources, w);
    const double* p = v.data();
    for (Eigen::Index j = 0; j < n_; p += j + 1, ++j) K.col(j).head(j + 1) = Eigen::Map<const Eigen::VectorXd>(p, j + 1);
  }
  if (!Packed()) {
    // Blocks of columns fixed by the size alone, each summed over the kernels in their order: the
    // blocks are independent, so threads share them with a result that does not depend on the
    // number of threads (issue 17: a view stack is large, and its passes are the refit's cost).
    constexpr Eigen::Index kChunk = Eigen::Index{1} << 15;  // upper-triangle entries per block of columns (256 KiB)
    std::vector<Eigen::Index> starts{0};
    for (Eigen::Index j0 = 0; j0 < n_;) {
      Eigen::Index j1 = j0 + 1, entries = j0 + 1;
      while (j1 < n_ && entries + j1 + 1 <= kChunk) entries += ++j1;
      starts.push_back(j1);
      j0 = j1;
    }
    // Four kernels per call (AccumulateScaled's own grouping, so the sum is that of one call over all):
    // kernels given as columns are written to a scratch column each, four at a time.
    constexpr std::size_t kGroup = 4;
    tbb::parallel_for(std::size_t{0}, starts.size() - 1, [&](std::size_t b) {
      // columnOf(kernel, column, slot): float32 kernels in place (widened by AccumulateScaled), the others
      // through UpperColumn (slot: the group's scratch column, used by kernels given as columns).
      const auto sumBlock = [&](const auto& columnOf) {
        std::vector<decltype(columnOf(Eigen::Index{0}, Eigen::Index{0}, std::size_t{0}))> sources;
        std::vector<double> w;
        for (Eigen::Index j = starts[b]; j < starts[b + 1]; ++j) {
          K.col(j).head(j + 1).setZero();
          for (std::size_t u0 = 0; u0 < used.size(); u0 += kGroup) {
            sources.clear();
            w.clear();
            for (std::size_t u = u0; u < std::min(u0 + kGroup, used.size()); ++u) {
              sources.push_back(columnOf(used[u], j, u - u0));
              w.push_back(weights[used[u]]);
            }
            AccumulateScaled(K.col(j).data(), j + 1, sources, w);
          }
        }
      };
      if (float32_) {
        sumBlock([&](Eigen::Index k, Eigen::Index j, std::size_t) { return (*float32_)[static_cast<std::size_t>(k)].col(j).data(); });
        return;
      }
      std::vector<double> scratch(columns_ ? kGroup * static_cast<std::size_t>(n_) : 0);
      sumBlock([&](Eigen::Index k, Eigen::Index j, std::size_t slot) { return UpperColumn(k, j, scratch.data() + slot * static_cast<std::size_t>(n_)); });
    });
  }
  constexpr Eigen::Index kBlock = 64;
  const auto mirror = [&](Eigen::Index jb) {
    for (Eigen::Index ib = jb; ib < n_; ib += kBlock) {
      const Eigen::Index je = std::min(jb + kBlock, n_), ie = std::min(ib + kBlock, n_);
      for (Eigen::Index j = jb; j < je; ++j)
        for (Eigen::Index i = std::max(ib, j + 1); i < ie; ++i) K(i, j) = K(j, i);
    }
  };
  const Eigen::Index strips = (n_ + kBlock - 1) / kBlock;
  if (Packed()) {
    for (Eigen::Index s = 0; s < strips; ++s) mirror(s * kBlock);
  } else {
    tbb::parallel_for(Eigen::Index{0}, strips, [&](Eigen::Index s) { mirror(s * kBlock); });
  }
}

std::vector<Eigen::Index> KernelStack::NonZeroRows(const Eigen::MatrixXd& A) {
  std::vector<Eigen::Index> rows;
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    if ((A.row(i).array() != 0.0).any()) rows.push_back(i);
  return rows;
}

double KernelStack::Quadratic(Eigen::Index k, const Eigen::MatrixXd& A, const std::vector<Eigen::Index>& nonzero) const {
  // a'K a = sum_j a_j (2 sum_{i<j} K_ij a_i + K_jj a_j): column j of the triangle is read only when
  // some a_j != 0.
  if (distributed_) return distributed_->Quadratics({k}, A, true)[0];
  if (Packed()) return PackedQuadratic(k, PackedOuter(A));
  // Float32 kernels are read in place (half the bytes; the quadratics are a third of a large refit's passes),
  // the others through UpperColumn; one dot product for both, so both give the same values.
  const auto quadratic = [&](const auto& columnOf) {
    double q = 0;
    for (const Eigen::Index j : nonzero) {
      const auto* column = columnOf(j);
      for (Eigen::Index c = 0; c < A.cols(); ++c) {
        const double aj = A(j, c);
        if (aj != 0.0) q += aj * (2.0 * UpperDot(column, A.col(c).data(), j) + static_cast<double>(column[j]) * aj);
      }
    }
    return std::max(0.0, q);  // PSD kernels: clip rounding below 0
  };
  if (float32_) {
    const Eigen::MatrixXf& K = (*float32_)[static_cast<std::size_t>(k)];
    return quadratic([&](Eigen::Index j) { return K.col(j).data(); });
  }
  std::vector<double> scratch(columns_ ? static_cast<std::size_t>(n_) : 0);
  return quadratic([&](Eigen::Index j) { return UpperColumn(k, j, scratch.data()); });
}

Eigen::VectorXd KernelStack::PackedOuter(const Eigen::MatrixXd& A) const {
  // a'K a = sum_i K_ii a_i^2 + 2 sum_{i<j} K_ij a_i a_j: one product with the packed outer product.
  Eigen::VectorXd w = Eigen::VectorXd::Zero(packed_.rows());
  for (Eigen::Index c = 0; c < A.cols(); ++c) {
    double* p = w.data();
    for (Eigen::Index j = 0; j < n_; ++j) {
      const double aj = A(j, c);
      for (Eigen::Index i = 0; i < j; ++i) *p++ += 2.0 * A(i, c) * aj;
      *p++ += aj * aj;
    }
  }
  return w;
}

double KernelStack::PackedQuadratic(Eigen::Index k, const Eigen::VectorXd& packedOuter) const {
  return std::max(0.0, packed_.col(k).dot(packedOuter));  // PSD kernels: clip rounding below 0
}

Eigen::VectorXd KernelStack::DistributedQuadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A) const {
  return distributed_->Quadratics(which, A, true);
}

Eigen::VectorXd KernelStack::Quadratics(const Eigen::VectorXd& a) const {
  const Eigen::MatrixXd A = a;
  if (distributed_) {
    std::vector<Eigen::Index> every(static_cast<std::size_t>(Size()));
    std::iota(every.begin(), every.end(), Eigen::Index{0});
    return distributed_->Quadratics(every, A, false);
  }
  if (Packed()) return (packed_.transpose() * PackedOuter(A)).cwiseMax(0.0);
  const auto nonzero = NonZeroRows(A);
  Eigen::VectorXd q(Size());
  tbb::parallel_for(Eigen::Index{0}, Size(), [&](Eigen::Index k) { q[k] = Quadratic(k, A, nonzero); });
  return q;
}

Eigen::VectorXd KernelStack::Product(Eigen::Index k, const Eigen::VectorXd& v) const {
  if (distributed_) return distributed_->Products({k}, v).col(0);
  // From the upper triangle column by column (whatever holds the kernel: one arithmetic for all).
  std::vector<double> scratch(columns_ && !Packed() ? static_cast<std::size_t>(n_) : 0);
  Eigen::VectorXd y = Eigen::VectorXd::Zero(n_);
  for (Eigen::Index j = 0; j < n_; ++j) {
    const double* column = UpperColumn(k, j, scratch.data());
    const Eigen::Map<const Eigen::VectorXd> upper(column, j);
    y[j] += upper.dot(v.head(j)) + column[j] * v[j];
    if (v[j] != 0.0) y.head(j) += v[j] * upper;
  }
  return y;
}

Eigen::MatrixXd KernelStack::Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const {
  if (distributed_) return distributed_->Products(which, v);
  Eigen::MatrixXd G(n_, static_cast<Eigen::Index>(which.size()));
  const auto one = [&](std::size_t i) { G.col(static_cast<Eigen::Index>(i)) = Product(which[i], v); };
  if (Packed()) {
    for (std::size_t i = 0; i < which.size(); ++i) one(i);
  } else {
    tbb::parallel_for(std::size_t{0}, which.size(), one);  // columns are independent: thread-count free
  }
  return G;
}

double KernelStack::RootSpectralBound(Eigen::Index k) const {
  if (std::isnan(rootBounds_[k]) && distributed_) rootBounds_[k] = distributed_->RootSpectralBounds({k})[0];
  if (std::isnan(rootBounds_[k])) {
    std::vector<double> scratch(columns_ && !Packed() ? static_cast<std::size_t>(n_) : 0);
    double frob = 0;  // ||K||_F^2 from the upper triangle
    for (Eigen::Index j = 0; j < n_; ++j) {
      const double* column = UpperColumn(k, j, scratch.data());
      frob += 2.0 * Eigen::Map<const Eigen::VectorXd>(column, j).squaredNorm() + column[j] * column[j];
    }
    rootBounds_[k] = RootOfFrobenius(frob);
  }
  return rootBounds_[k];
}

ScreenedNorms::ScreenedNorms(const KernelStack& stack)
    : stack_(stack),
      value_(Eigen::VectorXd::Zero(stack.Size())),
      known_(static_cast<std::size_t>(stack.Size()), 0),
      anchorValue_(Eigen::VectorXd::Zero(stack.Size())),
      anchors_(static_cast<std::size_t>(stack.Size())) {}

void ScreenedNorms::Begin(const InnerSolution& sol) {
  current_ = sol.coefs.cols() > 0 ? sol.coefs : Eigen::MatrixXd(sol.coef);
  nonzero_ = KernelStack::NonZeroRows(current_);
  outer_.resize(0);
  std::fill(known_.begin(), known_.end(), 0);
}

double ScreenedNorms::Exact(Eigen::Index j) {
  const auto u = static_cast<std::size_t>(j);
  if (!known_[u]) {
    if (stack_.Packed() && outer_.size() == 0) outer_ = stack_.PackedOuter(current_);
    Record(j, std::sqrt(stack_.Packed() ? stack_.PackedQuadratic(j, outer_) : stack_.Quadratic(j, current_, nonzero_)));
  }
  return value_[j];
}

double ScreenedNorms::Bound(Eigen::Index j) const {
  const auto u = static_cast<std::size_t>(j);
  if (known_[u]) return value_[j];
  const Eigen::MatrixXd& b = anchors_[u];
  if (b.size() != current_.size()) return std::numeric_limits<double>::infinity();
  const double d = (current_ - b).norm();
  // Relative slack for the rounding of the two quadratics.
  return (anchorValue_[j] + stack_.RootSpectralBound(j) * d) * (1.0 + 1e-9) + 1e-300;
}

void ScreenedNorms::Evaluate(const std::vector<Eigen::Index>& which) {
  if (stack_.Packed()) {  // one product with the (cached) packed outer product each: nothing to share
    for (const auto j : which) Exact(j);
    return;
  }
  std::vector<Eigen::Index> missing;
  for (const auto j : which)
    if (!Known(j)) missing.push_back(j);
  if (stack_.Distributed()) {  // one request to the owners for all of them, each computed as Exact would
    if (missing.empty()) return;
    const Eigen::VectorXd q = stack_.DistributedQuadratics(missing, current_);
    for (std::size_t i = 0; i < missing.size(); ++i) Record(missing[i], std::sqrt(q[static_cast<Eigen::Index>(i)]));
    return;
  }
  if (missing.size() < 2) return;
  // The view's quadratics read whole kernels: they are computed side by side, each exactly as
  // Exact would (same summation), then recorded in order.
  std::vector<double> q(missing.size());
  tbb::parallel_for(std::size_t{0}, missing.size(), [&](std::size_t i) { q[i] = stack_.Quadratic(missing[i], current_, nonzero_); });
  for (std::size_t i = 0; i < missing.size(); ++i) Record(missing[i], std::sqrt(q[i]));
}

bool ScreenedNorms::EvaluateWithProducts(const std::vector<Eigen::Index>& which, Eigen::MatrixXd& products) {
  if (current_.cols() != 1) return false;
  const Eigen::VectorXd a = current_.col(0);
  products = stack_.Products(which, a);
  for (std::size_t i = 0; i < which.size(); ++i)
    if (!Known(which[i])) Record(which[i], std::sqrt(std::max(0.0, a.dot(products.col(static_cast<Eigen::Index>(i))))));  // PSD: clip rounding
  return true;
}

void ScreenedNorms::Record(Eigen::Index j, double value) {
  const auto u = static_cast<std::size_t>(j);
  value_[j] = value;
  known_[u] = 1;
  anchorValue_[j] = value;
  anchors_[u] = current_;
  ++exactEvaluations;
}

Eigen::VectorXd ScreenedNorms::All() {
  std::vector<Eigen::Index> every(static_cast<std::size_t>(stack_.Size()));
  std::iota(every.begin(), every.end(), Eigen::Index{0});
  Evaluate(every);
  Eigen::VectorXd c(stack_.Size());
  for (Eigen::Index j = 0; j < c.size(); ++j) c[j] = Exact(j);
  return c;
}

std::vector<Eigen::Index> ActiveKernels(const KernelList& kernels) {
  std::vector<Eigen::Index> active;
  // A non-zero diagonal entry settles it in O(n) (the usual case); only a kernel with a zero
  // diagonal is scanned in full (a PSD one is then zero, but the input need not be PSD).
  for (std::size_t j = 0; j < kernels.size(); ++j)
    if (kernels[j].diagonal().cwiseAbs().maxCoeff() > 0 || kernels[j].cwiseAbs().maxCoeff() > 0) active.push_back(static_cast<Eigen::Index>(j));
  return active;
}

// ---------------- inner solvers ----------------
namespace {

// SVM sensitivity (C-SVC and epsilon-SVR alike): on the free set F (subjects with a variable strictly
// inside its box) the KKT conditions (K coef)_F + b = const_F and sum(coef) = 0 hold with the bounded
// coefficients fixed, so d coef_F / d beta_k solves [K_FF 1; 1' 0] [dcoef_F; db] = [-(K_k coef)_F; 0].
// The minimum-norm solution covers a rank-deficient K_FF (its null directions move neither the
// decision function nor any a'K_j a of the kernels in K).
// With `dcoef`: the columns d coef / d beta_k = -x_k on F (0 elsewhere).
bool FreeSetCurvature(const Eigen::MatrixXd& K, const Eigen::VectorXd& coef, const std::vector<Eigen::Index>& free,
                      const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients, Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) {
  const Eigen::MatrixXd G = gradients(coef);
  H = Eigen::MatrixXd::Zero(G.cols(), G.cols());
  if (dcoef) dcoef->setZero(K.rows(), G.cols());
  if (free.empty()) return true;
  // dcoef's rows of F from X (f x kernels): -X.
  const auto scatter = [&](const Eigen::MatrixXd& X) {
    if (!dcoef) return;
    for (std::size_t a = 0; a < free.size(); ++a) dcoef->row(free[a]) = -X.row(static_cast<Eigen::Index>(a));
  };
  const auto f = static_cast<Eigen::Index>(free.size());
  Eigen::MatrixXd KFF(f, f), RF(f, G.cols());
  for (Eigen::Index b = 0; b < f; ++b) {
    const double* column = K.col(free[static_cast<std::size_t>(b)]).data();
    for (Eigen::Index a = 0; a < f; ++a) KFF(a, b) = column[free[static_cast<std::size_t>(a)]];
  }
  for (Eigen::Index a = 0; a < f; ++a) RF.row(a) = G.row(free[static_cast<std::size_t>(a)]);
  // K_FF is a PSD Gram matrix. When it is safely positive definite the border is eliminated:
  // x = K_FF^-1 (r - 1 t) with t = 1'K_FF^-1 r / 1'K_FF^-1 1, so H = R'X = Y'Y - z z' / u'u with
  // K_FF = LL', Y = L^-1 R, u = L^-1 1, z = Y'u: a Cholesky (f^3 / 6) and one triangular solve
  // instead of an LU of the bordered system (f^3 / 3) and two (issue 17: the curvature was ~30 % of
  // an ENMKL nested CV). The pivot bound keeps K_FF's condition below ~1e10, as the LU's residual test did.
  constexpr double kSmallestPivot = 1e-10;  // smallest (L_ii / max L_jj)^2 taken
  const Eigen::LLT<Eigen::MatrixXd> llt(KFF);
  if (llt.info() == Eigen::Success) {
    const Eigen::VectorXd pivots = llt.matrixLLT().diagonal();
    if (pivots.minCoeff() > 0 && pivots.minCoeff() * pivots.minCoeff() > kSmallestPivot * pivots.maxCoeff() * pivots.maxCoeff()) {
      Eigen::MatrixXd Y = std::move(RF);
      llt.matrixL().solveInPlace(Y);
      Eigen::VectorXd u = Eigen::VectorXd::Ones(f);
      llt.matrixL().solveInPlace(u);
      const Eigen::VectorXd z = Y.transpose() * u;
      H.selfadjointView<Eigen::Lower>().rankUpdate(Y.transpose());
      H.selfadjointView<Eigen::Lower>().rankUpdate(z, -1.0 / u.squaredNorm());
      H = H.selfadjointView<Eigen::Lower>();
      if (dcoef) {  // X = K_FF^-1 (R - 1 t') = L^-T (Y - u z' / u'u)
        Eigen::MatrixXd X = Y - u * (z.transpose() / u.squaredNorm());
        llt.matrixU().solveInPlace(X);
        scatter(X);
      }
      return H.allFinite();
    }
  }
  // Singular or ill-conditioned K_FF: the bordered system, by LU when its residual is small, else the
  // minimum-norm solution.
  Eigen::MatrixXd M(f + 1, f + 1);
  M.topLeftCorner(f, f) = KFF;
  M.col(f).head(f).setOnes();
  M.row(f).head(f).setOnes();
  M(f, f) = 0;
  Eigen::MatrixXd R(f + 1, G.cols());
  R.topRows(f) = RF;
  R.row(f).setZero();
  Eigen::MatrixXd X = M.partialPivLu().solve(R);
  if (!X.allFinite() || (M * X - R).norm() > 1e-10 * (M.norm() * X.norm() + R.norm())) X = M.completeOrthogonalDecomposition().solve(R);
  H = R.topRows(f).transpose() * X.topRows(f);
  H = 0.5 * (H + H.transpose()).eval();
  scatter(X.topRows(f));
  return H.allFinite();
}

}  // namespace

Eigen::VectorXd SolveNewtonSystem(const Eigen::MatrixXd& J, const Eigen::VectorXd& rhs) {
  // LU costs a third of the complete orthogonal decomposition; the two agree where J is well conditioned.
  constexpr double kSmallestReciprocalCondition = 1e-12;
  const Eigen::PartialPivLU<Eigen::MatrixXd> lu(J);
  if (lu.rcond() > kSmallestReciprocalCondition) {
    Eigen::VectorXd delta = lu.solve(rhs);
    if (delta.allFinite()) return delta;
  }
  return J.completeOrthogonalDecomposition().solve(rhs);
}

namespace {

class SvcSolver final : public InnerSolver {
 public:
  SvcSolver(const Eigen::VectorXd& y, double C, double tol, long maxIter, const Eigen::VectorXd& weights)
      : y_(y), C_(C), tol_(tol), maxIter_(maxIter), weights_(EffectiveWeights(weights)) {}
  InnerSolution Solve(const Eigen::MatrixXd& K, const InnerSolution* warm) const override { return SolveLoosely(K, warm, 0.0); }
  InnerSolution SolveLoosely(const Eigen::MatrixXd& K, const InnerSolution* warm, double tolerance) const override {
    const Eigen::VectorXd p = Eigen::VectorXd::Constant(y_.size(), -1.0);
    const double tol = std::max(tol_, tolerance);
    // Class weights: per-subject bounds 0 <= alpha_i <= C w_i (LIBSVM's weighted C-SVC).
    const SmoResult r = weights_.size() > 0 ? SolveSmo(K, y_, p, Eigen::VectorXd(C_ * weights_), warm ? &warm->alpha : nullptr, tol, maxIter_)
                                            : SolveSmo(K, y_, p, C_, warm ? &warm->alpha : nullptr, tol, maxIter_);
    InnerSolution s;
    s.alpha = r.alpha;
    s.coef = y_.cwiseProduct(r.alpha);
    s.bias = -r.rho;
    s.dual = -r.objective;
    s.iterations = r.iterations;
    s.converged = r.converged;
    s.violation = r.violation;
    return s;
  }
  double Loss(const Eigen::VectorXd& f) const override {
    if (weights_.size() > 0) return C_ * (weights_.array() * (1.0 - y_.cwiseProduct(f).array()).max(0.0)).sum();
    return C_ * (1.0 - y_.cwiseProduct(f).array()).max(0.0).sum();
  }
  bool Curvature(const Eigen::MatrixXd& K, const InnerSolution& sol, const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients,
                 Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) const override {
    return FreeSetCurvature(K, sol.coef, FreeSet(sol), gradients, H, dcoef);
  }
  bool Frozen(const InnerSolution& sol) const override { return FreeSet(sol).empty(); }
  // coef = y alpha (y = +-1), so alpha moves by y dcoef. Where that leaves the box [0, C w_i], the result is the
  // Euclidean projection of alpha + y dcoef onto the box and the constraint sum_i y_i alpha_i = 0 (over the moving
  // variables): alpha_i = clip(alpha_i + y_i (dcoef_i + lambda)), with lambda found by bisection (the sum grows with
  // it). Shortening the whole move instead kept ~5 % of it at n = 2,000, where some of ~1,000 free variables is always
  // near a bound.
  bool Shift(InnerSolution& sol, const Eigen::VectorXd& dcoef) const override {
    const Eigen::Index n = y_.size();
    if (sol.alpha.size() != n || dcoef.size() != n || !dcoef.allFinite()) return false;
    std::vector<Eigen::Index> moving;
    double target = 0, reach = 0;
    const auto upper = [&](Eigen::Index i) { return C_ * (weights_.size() > 0 ? weights_[i] : 1.0); };
    for (Eigen::Index i = 0; i < n; ++i)
      if (dcoef[i] != 0.0) {
        moving.push_back(i);
        target += y_[i] * sol.alpha[i];
        reach = std::max(reach, upper(i) + std::abs(dcoef[i]));
      }
    if (moving.empty()) return false;
    const auto moved = [&](Eigen::Index i, double lambda) { return std::clamp(sol.alpha[i] + y_[i] * (dcoef[i] + lambda), 0.0, upper(i)); };
    const auto sum = [&](double lambda) {
      double total = 0;
      for (const auto i : moving) total += y_[i] * moved(i, lambda);
      return total;
    };
    double lo = -reach, hi = reach;
    for (int halving = 0; halving < 100 && lo < hi; ++halving) {
      const double mid = 0.5 * (lo + hi);
      (sum(mid) < target ? lo : hi) = mid;
    }
    const double lambda = 0.5 * (lo + hi);
    for (const auto i : moving) sol.alpha[i] = moved(i, lambda);
    sol.coef = y_.cwiseProduct(sol.alpha);
    return true;
  }

 private:
  /// 0 < alpha_i < C w_i (w_i = 1 without class weights).
  std::vector<Eigen::Index> FreeSet(const InnerSolution& sol) const {
    std::vector<Eigen::Index> free;
    for (Eigen::Index i = 0; i < sol.alpha.size(); ++i)
      if (sol.alpha[i] > 0 && sol.alpha[i] < C_ * (weights_.size() > 0 ? weights_[i] : 1.0)) free.push_back(i);
    return free;
  }
  Eigen::VectorXd y_;
  double C_, tol_;
  long maxIter_;
  Eigen::VectorXd weights_;  ///< class weights per subject; empty = all 1
};

class SvrSolver final : public InnerSolver {
 public:
  SvrSolver(const Eigen::VectorXd& z, double C, double eps, double tol, long maxIter)
      : mean_(z.mean()), epsilon_(eps), C_(C), tol_(tol), maxIter_(maxIter) {
    const Eigen::Index n = z.size();
    const Eigen::VectorXd zc = z.array() - mean_;
    y2_.resize(2 * n);
    p_.resize(2 * n);
    y2_.head(n).setOnes();
    y2_.tail(n).setConstant(-1.0);
    p_.head(n) = eps - zc.array();
    p_.tail(n) = eps + zc.array();
  }
  InnerSolution Solve(const Eigen::MatrixXd& K, const InnerSolution* warm) const override {
    const Eigen::Index n = K.rows();
    const SmoResult r = SolveSmo(K, y2_, p_, C_, warm ? &warm->alpha : nullptr, tol_, maxIter_);
    InnerSolution s;
    s.alpha = r.alpha;
    s.coef = r.alpha.head(n) - r.alpha.tail(n);
    s.bias = -r.rho + mean_;
    s.dual = -r.objective;
    s.iterations = r.iterations;
    s.converged = r.converged;
    s.violation = r.violation;
    return s;
  }
  double Loss(const Eigen::VectorXd& f) const override {
    const Eigen::Index n = f.size();
    const Eigen::ArrayXd z = p_.tail(n).array() - p_.head(n).array();  // 2 (z - mean)
    return C_ * ((0.5 * z + mean_ - f.array()).abs() - epsilon_).max(0.0).sum();
  }
  bool Curvature(const Eigen::MatrixXd& K, const InnerSolution& sol, const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients,
                 Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) const override {
    return FreeSetCurvature(K, sol.coef, FreeSet(sol), gradients, H, dcoef);
  }
  bool Frozen(const InnerSolution& sol) const override { return FreeSet(sol).empty(); }

 private:
  /// Subjects with either variable strictly inside (0, C).
  std::vector<Eigen::Index> FreeSet(const InnerSolution& sol) const {
    const Eigen::Index n = sol.alpha.size() / 2;
    std::vector<Eigen::Index> free;
    for (Eigen::Index i = 0; i < n; ++i)
      if ((sol.alpha[i] > 0 && sol.alpha[i] < C_) || (sol.alpha[i + n] > 0 && sol.alpha[i + n] < C_)) free.push_back(i);
    return free;
  }
  double mean_, epsilon_;
  Eigen::VectorXd y2_, p_;
  double C_, tol_;
  long maxIter_;
};

class KrrSolver final : public InnerSolver {
 public:
  KrrSolver(const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights, bool bias)
      : mean_(!bias ? 0.0 : EffectiveWeights(weights).size() > 0 ? weights.dot(y) / weights.sum() : y.mean()), yc_(y.array() - mean_), lambda_(lambda),
        weights_(EffectiveWeights(weights)) {}
  bool Exact() const override { return true; }
  InnerSolution Solve(const Eigen::MatrixXd& K, const InnerSolution*) const override {
    Eigen::MatrixXd A = K;
    // Weighted ridge (class weights): min sum_i w_i (y_i - f_i)^2 / (2 lambda) + 1/2 ||f||^2 gives
    // coef = (K + lambda W^-1)^-1 (y - m_w), m_w the weighted mean.
    if (weights_.size() > 0) A.diagonal().array() += lambda_ / weights_.array();
    else A.diagonal().array() += lambda_;
    Eigen::LLT<Eigen::MatrixXd> llt(A);
    InnerSolution s;
    if (llt.info() == Eigen::Success) {
      s.coef = llt.solve(yc_);
    } else {  // K not numerically PSD: fall back to a symmetric indefinite solve
      s.coef = A.ldlt().solve(yc_);
    }
    s.alpha = s.coef;
    s.bias = mean_;
    // KRR dual: max_a a'yc - 1/2 a'(K + lambda I)a, optimal value 1/2 yc'(K + lambda I)^-1 yc.
    s.dual = 0.5 * s.coef.dot(yc_);
    return s;
  }
  double Loss(const Eigen::VectorXd& f) const override {
    if (weights_.size() > 0) return (weights_.array() * (yc_.array() + mean_ - f.array()).square()).sum() / (2.0 * lambda_);
    return (yc_.array() + mean_ - f.array()).square().sum() / (2.0 * lambda_);
  }
  // coef = (K + lambda W^-1)^-1 yc (W = I without class weights): d coef / d beta_k = -(K + lambda W^-1)^-1 K_k coef.
  // (No dcoef: each solve is exact and takes no warm start.)
  bool Curvature(const Eigen::MatrixXd& K, const InnerSolution& sol, const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients,
                 Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) const override {
    if (dcoef) dcoef->resize(0, 0);
    const Eigen::MatrixXd G = gradients(sol.coef);
    Eigen::MatrixXd A = K;
    if (weights_.size() > 0) A.diagonal().array() += lambda_ / weights_.array();
    else A.diagonal().array() += lambda_;
    Eigen::LLT<Eigen::MatrixXd> llt(A);
    if (llt.info() != Eigen::Success) return false;
    H = G.transpose() * llt.solve(G);
    H = 0.5 * (H + H.transpose()).eval();
    return H.allFinite();
  }

 private:
  double mean_;
  Eigen::VectorXd yc_;
  double lambda_;
  Eigen::VectorXd weights_;  ///< class weights per subject; empty = all 1
};

}  // namespace

std::unique_ptr<InnerSolver> MakeSvcSolver(const Eigen::VectorXd& y, double C, double tolerance, long maxIterations, const Eigen::VectorXd& weights) {
  return std::make_unique<SvcSolver>(y, C, tolerance, maxIterations, weights);
}
std::unique_ptr<InnerSolver> MakeSvrSolver(const Eigen::VectorXd& z, double C, double epsilon, double tolerance, long maxIterations) {
  return std::make_unique<SvrSolver>(z, C, epsilon, tolerance, maxIterations);
}
std::unique_ptr<InnerSolver> MakeKrrSolver(const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights, bool bias) {
  return std::make_unique<KrrSolver>(y, lambda, weights, bias);
}

}  // namespace neuromkl::learners
