// Kernels held in this process and their folds (memory.hpp).
#include "neuromkl/gram/memory.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "fold_arithmetic.hpp"
#include "fold_columns.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/system.hpp"

namespace neuromkl::gram {

using namespace detail;

Eigen::VectorXd GroupScales(const std::vector<double>& traces, const std::vector<int>& groups) {
  Eigen::VectorXd g = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(traces.size()));
  if (groups.empty()) return g;
  if (groups.size() != traces.size())
    throw InputError("cv:KernelGroups", "kernel groups", std::to_string(groups.size()) + " kernel groups for " + std::to_string(traces.size()) + " kernels");
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

TestBlocks WeightedKernels::Test(Eigen::MatrixXd& buffer) const {
  if (test.empty() && testOnDemand) return testOnDemand(buffer);
  return HeldBlocks(test);
}

FoldKernels PrepareFold(const KernelStore& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) {
  WeightedKernels w;
  kernels.OpenFold(train, test, pre)->Weighted(TrainingForm::Copies, w);
  return {std::move(w.train), std::move(w.test)};
}

Eigen::VectorXd FoldScales(const KernelStore& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) {
  return kernels.OpenFold(train, test, pre)->Scales();
}

FoldKernel PrepareFoldKernel(const Eigen::MatrixXd& kernel, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                             const Preprocessing& pre, double scale) {
  return PrepareFoldKernelOf(kernel, train, test, pre, scale);
}

// ---------------- the kernels ----------------

MemoryKernels::MemoryKernels(const KernelList& kernels) : float64_(&kernels) {}
MemoryKernels::MemoryKernels(const CompactKernelList& kernels) : float32_(&kernels) {}
MemoryKernels::MemoryKernels(KernelList&& kernels) : ownedFloat64_(std::move(kernels)), float64_(&ownedFloat64_) {}
MemoryKernels::MemoryKernels(CompactKernelList&& kernels) : ownedFloat32_(std::move(kernels)), float32_(&ownedFloat32_) {}

std::unique_ptr<KernelStore> MemoryKernels::Subset(const std::vector<std::size_t>& which) const {
  for (const std::size_t j : which)
    if (j >= Count()) throw std::out_of_range("MemoryKernels::Subset: kernel " + std::to_string(j) + " of " + std::to_string(Count()));
  if (float32_) {
    CompactKernelList part;
    part.centred = float32_->centred;
    for (const std::size_t j : which) part.kernels.push_back((*float32_)[j]);
    return std::make_unique<MemoryKernels>(std::move(part));
  }
  KernelList part;
  for (const std::size_t j : which) part.push_back((*float64_)[j]);
  return std::make_unique<MemoryKernels>(std::move(part));
}

std::size_t MemoryKernels::Count() const {
  return Visit([](const auto& kernels) { return kernels.size(); });
}

Eigen::Index MemoryKernels::Subjects() const {
  return Visit([](const auto& kernels) { return kernels.empty() ? Eigen::Index{0} : kernels[0].rows(); });
}

void MemoryKernels::CheckPreprocessing(const Preprocessing& pre) const {
  if (float32_) CheckStoreFits(*float32_, pre);
}

std::unique_ptr<PreparedFold> MemoryKernels::OpenFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const {
  return OpenMemoryFold(train, test, pre);
}

std::unique_ptr<MemoryFold> MemoryKernels::OpenMemoryFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const {
  return std::make_unique<MemoryFold>(*this, train, test, pre);
}

Eigen::VectorXd MemoryKernels::LargestCentredSelfSimilarities(const std::vector<int>& train, const Preprocessing& pre) const {
  const Eigen::VectorXi tr = IndexVector(train);
  Eigen::VectorXd out(static_cast<Eigen::Index>(Count()));
  Visit([&](const auto& kernels) {
    tbb::parallel_for(std::size_t{0}, kernels.size(),
                      [&](std::size_t k) { out[static_cast<Eigen::Index>(k)] = LargestCentredSelfSimilarityOf(kernels[k], tr, pre); });
  });
  return out;
}

namespace {
template <typename KernelVec>
Eigen::MatrixXd SubjectWeightsOf(const KernelVec& kernels, const FoldModel& model, const Preprocessing& pre) {
  const Eigen::Index n = kernels.empty() ? 0 : kernels[0].rows();
  const auto l = static_cast<Eigen::Index>(model.train.size());
  Eigen::MatrixXd D = Eigen::MatrixXd::Zero(n, static_cast<Eigen::Index>(kernels.size()));
  const Eigen::VectorXi tr = IndexVector(model.train), te = IndexVector(model.test);
  std::optional<FoldResidualiser> residualiser;
  if (pre.covariates) residualiser = MakeFoldResidualiser(*pre.covariates, tr, te);
  for (std::size_t r = 0; r < kernels.size(); ++r) {
    const double beta = model.beta[static_cast<Eigen::Index>(r)];
    if (beta == 0.0) continue;
    // The same fold statistics the learner saw: centred self-similarities -> the scales s_ir (without covariates from
    // the full kernel in place, with them from the residualised fold copy).
    Eigen::VectorXd s = Eigen::VectorXd::Ones(l), unused;
    if (residualiser) {
      FoldKernel fk = SliceFold(kernels[r], tr, te);
      ResidualiseFold(fk, *residualiser);
      if (pre.centre) CentreFold(fk);
      if (pre.normalise) InverseNorms(fk.train.diagonal(), fk.testDiag, s, unused);
    } else if (pre.normalise) {
      s = MakeFoldVectors(kernels[r], tr, te, pre.centre, pre.normalise).invTrain;
    }
    const Eigen::VectorXd a = model.coef.cwiseProduct(s);
    const double meanTerm = pre.centre ? a.sum() / static_cast<double>(l) : 0.0;
    Eigen::VectorXd d = beta * (a.array() - meanTerm).matrix();
    if (residualiser) ResidualiseSubjectWeights(d, *residualiser);
    for (Eigen::Index i = 0; i < l; ++i) D(model.train[static_cast<std::size_t>(i)], static_cast<Eigen::Index>(r)) = d[i];
  }
  return D;
}
}  // namespace

Eigen::MatrixXd MemoryKernels::SubjectWeights(const FoldModel& model, const Preprocessing& pre) const {
  if (float32_) {
    // A centred store gives the weights of the raw kernels under fold centring or residualising only (the scales s_ir
    // are shift-invariant there).
    CheckStoreFits(*float32_, pre);
    if (pre.covariates && float32_->centred)
      CheckShiftCancels(*float32_, MakeFoldResidualiser(*pre.covariates, IndexVector(model.train), IndexVector(model.test)));
  }
  return Visit([&](const auto& kernels) { return SubjectWeightsOf(kernels, model, pre); });
}

std::uint64_t MemoryKernels::FoldTaskBytes(const FoldTask& task) const {
  // Per kernel copied: training l x l and test m x l (once for a summed kernel); in place, one test block (or below
  // kPackedStackBelow every test block and the packed stack); float32 copies: float32 training copies, float64 test
  // blocks and below kPackedStackBelow the packed stack. Plus a fit's own l x l work (a combined kernel and a spare).
  const bool columns = task.form == TrainingForm::InPlace, float32Copies = task.form == TrainingForm::Float32Copies;
  const auto kernelCount = static_cast<double>(Count());
  double doubles = 0;
  std::size_t largest = 0;
  for (const bool semi : {false, true})
    for (const bool summed : {false, true}) {
      if (!task.needs[FoldNeed(semi, summed)]) continue;
      const std::size_t l = task.train + (semi ? task.unlabelled : 0);
      largest = std::max(largest, l);
      const double dl = static_cast<double>(l), dm = static_cast<double>(task.test);
      const double packed = static_cast<Eigen::Index>(l) < kPackedStackBelow ? dl * (dl + 1) / 2 : 0.0;
      const double perKernel = columns && !summed ? packed : float32Copies && !summed ? dl * dl / 2 + dl * dm + packed : dl * (dl + dm);
      if (columns && !summed) doubles += (packed > 0 ? kernelCount : 1.0) * dl * dm;
      doubles += (summed ? 1.0 : kernelCount) * perKernel;
    }
  const double l = static_cast<double>(largest);
  doubles += 2.0 * l * l;
  return static_cast<std::uint64_t>(8.0 * doubles);
}

// ---------------- a fold ----------------

struct MemoryFold::Lazy {
  std::once_flag vectorsOnce, scalesOnce, stackOnce;
  std::shared_ptr<const std::vector<FoldVectors>> vectors;
  Eigen::VectorXd scales;
  bool scalesKnown = false;
  std::unique_ptr<KernelColumns> columns;  ///< the stack's columns (without covariates)
  KernelList copies, testCopies;           ///< the stack's prepared copies (with covariates)
  std::unique_ptr<KernelStack> stack;
  KernelList tests;  ///< TestBlock's held blocks (empty matrices until made)
};

MemoryFold::MemoryFold(const MemoryKernels& kernels, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre)
    : kernels_(kernels), train_(IndexVector(train)), test_(IndexVector(test)), pre_(pre), lazy_(std::make_unique<Lazy>()) {
  if (const CompactKernelList* store = kernels.Float32()) CheckStoreFits(*store, pre);
  if (pre.covariates) {
    residualiser_ = MakeFoldResidualiser(*pre.covariates, train_, test_);
    kernels.Visit([&](const auto& k) { CheckShiftCancels(k, *residualiser_); });
  }
  lazy_->tests.resize(kernels.Count());
}

MemoryFold::~MemoryFold() = default;

const std::vector<FoldVectors>& MemoryFold::Vectors() const {
  std::call_once(lazy_->vectorsOnce, [&] {
    lazy_->vectors = std::make_shared<const std::vector<FoldVectors>>(kernels_.Visit([&](const auto& k) { return AllFoldVectors(k, train_, test_, pre_); }));
  });
  return *lazy_->vectors;
}

Eigen::VectorXd MemoryFold::Scales() const {
  std::call_once(lazy_->scalesOnce, [&] {
    if (lazy_->scalesKnown) return;
    if (pre_.kernelGroups.empty()) lazy_->scales = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(kernels_.Count()));
    else lazy_->scales = GroupScales(Traces(), pre_.kernelGroups);
    lazy_->scalesKnown = true;
  });
  return lazy_->scales;
}

void MemoryFold::SetScales(Eigen::VectorXd scales) {
  lazy_->scales = std::move(scales);
  lazy_->scalesKnown = true;
}

std::vector<double> MemoryFold::Traces() const {
  if (residualiser_) return kernels_.Visit([&](const auto& k) { return ResidualisedTraces(k, train_, test_, *residualiser_, pre_); });
  std::vector<double> traces;
  for (const auto& v : Vectors()) traces.push_back(v.Trace());
  return traces;
}

namespace {
/// With covariates the preprocessing is not a matter of vectors (residualising mixes rows): each kernel is prepared one
/// at a time, a few at once, and added in kernel order, so the sum is that of the prepared copies exactly while only a
/// window of prepared kernels is held.
template <typename KernelVec>
FoldKernels SumResidualised(const KernelVec& kernels, const Eigen::VectorXi& tr, const Eigen::VectorXi& te, const FoldResidualiser& residualiser,
                            const Preprocessing& pre, const Eigen::VectorXd& scales) {
  constexpr std::size_t kWindow = 4;  // fixed, so results do not depend on the thread count
  const std::size_t R = kernels.size();
  FoldKernels out;
  out.train.assign(1, Eigen::MatrixXd::Zero(tr.size(), tr.size()));
  out.test.assign(1, Eigen::MatrixXd::Zero(te.size(), tr.size()));
  std::vector<FoldKernel> window(kWindow);
  for (std::size_t first = 0; first < R; first += kWindow) {
    const std::size_t count = std::min(kWindow, R - first);
    tbb::parallel_for(std::size_t{0}, count, [&](std::size_t w) { window[w] = PrepareResidualised(kernels[first + w], tr, te, residualiser, pre); });
    for (std::size_t w = 0; w < count; ++w) {
      const double g = scales[static_cast<Eigen::Index>(first + w)];
      // As the copies (K_j *= g_j), then their combination (K += 1 * K_j).
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

/// Without covariates: each output column is summed by one thread over the kernels in order, each entry prepared from
/// the fold vectors as it is added (the copies' arithmetic), so the result does not depend on how columns are shared
/// out. Column b of every kernel is one contiguous column of the full kernel (read at the fold's rows), and the output
/// column stays in cache while the kernels are added.
template <typename KernelVec>
FoldKernels SumPrepared(const KernelVec& kernels, const Eigen::VectorXi& tr, const Eigen::VectorXi& te, const std::vector<FoldVectors>& vectors,
                        const Eigen::VectorXd& scales) {
  const std::size_t R = kernels.size();
  const Eigen::Index l = tr.size(), m = te.size();
  FoldKernels out;
  out.train.assign(1, Eigen::MatrixXd(l, l));
  out.test.assign(1, Eigen::MatrixXd(m, l));
  Eigen::MatrixXd& sumTrain = out.train[0];
  Eigen::MatrixXd& sumTest = out.test[0];
  AdviseHugePages(sumTrain.data(), static_cast<std::size_t>(l * l) * sizeof(double));
  tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, l, 8), [&](const tbb::blocked_range<Eigen::Index>& cols) {
    for (Eigen::Index b = cols.begin(); b != cols.end(); ++b) {
      double* outTrain = sumTrain.col(b).data();
      double* outTest = sumTest.col(b).data();
      std::fill(outTrain, outTrain + l, 0.0);
      std::fill(outTest, outTest + m, 0.0);
      for (std::size_t j = 0; j < R; ++j) {
        const FoldVectors& v = vectors[j];
        const double g = scales[static_cast<Eigen::Index>(j)];
        const auto* col = kernels[j].col(tr[b]).data();
        const double cb = v.colMean[b], ib = v.invTrain[b], grand = v.grand;
        const double* c = v.colMean.data();
        const double* inv = v.invTrain.data();
        for (Eigen::Index a = 0; a < l; ++a) outTrain[a] += PreparedEntry(static_cast<double>(col[tr[a]]), cb, c[a], grand, inv[a], ib, g);
        const double* r = v.testMean.data();
        const double* invTest = v.invTest.data();
        for (Eigen::Index i = 0; i < m; ++i) outTest[i] += PreparedEntry(static_cast<double>(col[te[i]]), cb, r[i], grand, invTest[i], ib, g);
      }
    }
  });
  return out;
}
}  // namespace

FoldKernels MemoryFold::Summed() const {
  if (kernels_.Count() == 0) return {};  // no kernel is not a zero kernel: the learner reports it
  if (residualiser_) return kernels_.Visit([&](const auto& k) { return SumResidualised(k, train_, test_, *residualiser_, pre_, Scales()); });
  const std::vector<FoldVectors>& vectors = Vectors();
  return kernels_.Visit([&](const auto& k) { return SumPrepared(k, train_, test_, vectors, Scales()); });
}

namespace {
/// The prepared copies of every kernel, written into `out` (storage reused where sizes match). With covariates the
/// scales come from the copies' own traces unless given.
template <typename KernelVec>
void WriteCopies(const KernelVec& kernels, const Eigen::VectorXi& tr, const Eigen::VectorXi& te, const Preprocessing& pre,
                 const std::vector<FoldVectors>* vectors, const FoldResidualiser* residualiser, const Eigen::VectorXd* givenScales, FoldKernels& out) {
  out.train.resize(kernels.size());
  out.test.resize(kernels.size());
  // Kernels are independent: several at once (a large study may run one fold at a time); each lands in its own slot.
  if (!residualiser) {
    const Eigen::VectorXd g = givenScales ? *givenScales : VectorScales(*vectors, pre.kernelGroups);
    tbb::parallel_for(std::size_t{0}, kernels.size(),
                      [&](std::size_t j) { WritePreparedBlocks(kernels[j], tr, te, (*vectors)[j], g[static_cast<Eigen::Index>(j)], out.train[j], out.test[j]); });
    return;
  }
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
    FoldKernel fk = PrepareResidualised(kernels[j], tr, te, *residualiser, pre);
    out.train[j] = std::move(fk.train);
    out.test[j] = std::move(fk.testTrain);
  });
  if (pre.kernelGroups.empty()) return;
  Eigen::VectorXd g;
  if (givenScales) {
    g = *givenScales;
  } else {
    std::vector<double> traces;
    for (const auto& K : out.train) traces.push_back(K.trace());
    g = GroupScales(traces, pre.kernelGroups);
  }
  for (std::size_t j = 0; j < out.train.size(); ++j) {
    out.train[j] *= g[static_cast<Eigen::Index>(j)];
    out.test[j] *= g[static_cast<Eigen::Index>(j)];
  }
}

/// The training copies rounded to float32 once prepared in double, the test blocks in double. Only one prepared column
/// per thread (with covariates, one prepared kernel) is held in double at a time.
template <typename KernelVec>
void WriteFloat32Copies(const KernelVec& kernels, const Eigen::VectorXi& tr, const Eigen::VectorXi& te, const Preprocessing& pre,
                        const std::vector<FoldVectors>* vectors, const FoldResidualiser* residualiser, const Eigen::VectorXd& g,
                        std::vector<Eigen::MatrixXf>& train32, KernelList& testBlocks) {
  train32.resize(kernels.size());
  testBlocks.resize(kernels.size());
  if (!residualiser) {
    const Eigen::Index l = tr.size(), m = te.size();
    tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
      // Column by column (PreparedTrainingColumn, as WritePreparedBlocks writes them): one prepared column in double at
      // a time, not a whole kernel.
      const double gj = g[static_cast<Eigen::Index>(j)];
      std::vector<double> column(static_cast<std::size_t>(l));
      train32[j].resize(l, l);
      testBlocks[j].resize(m, l);
      for (Eigen::Index b = 0; b < l; ++b) {
        const auto* full = kernels[j].col(tr[b]).data();
        PreparedTrainingColumn(full, tr, (*vectors)[j], b, l, gj, column.data());
        train32[j].col(b) = Eigen::Map<const Eigen::VectorXd>(column.data(), l).cast<float>();
        PreparedTestColumn(full, te, (*vectors)[j], b, gj, testBlocks[j].col(b).data());
      }
    });
    return;
  }
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
    FoldKernel fk = PrepareResidualised(kernels[j], tr, te, *residualiser, pre);
    const double gj = g[static_cast<Eigen::Index>(j)];
    if (gj != 1.0) {  // as the float64 copies: scaled in double, before the rounding
      fk.train *= gj;
      fk.testTrain *= gj;
    }
    train32[j] = fk.train.cast<float>();
    testBlocks[j] = std::move(fk.testTrain);
  });
}
}  // namespace

void MemoryFold::Weighted(TrainingForm form, WeightedKernels& out) const {
  out.kernels.reset();
  out.testOnDemand = nullptr;
  // The copies read the fold's vectors (made here); the columns make them with their stack, below kPackedStackBelow.
  const std::vector<FoldVectors>* vectors = residualiser_ || form == TrainingForm::InPlace ? nullptr : &Vectors();
  const FoldResidualiser* residualiser = residualiser_ ? &*residualiser_ : nullptr;
  if (form == TrainingForm::Copies) {
    FoldKernels copies{std::move(out.train), std::move(out.test)};
    const Eigen::VectorXd* given = lazy_->scalesKnown ? &lazy_->scales : nullptr;
    kernels_.Visit([&](const auto& k) { WriteCopies(k, train_, test_, pre_, vectors, residualiser, given, copies); });
    out.train = std::move(copies.train);
    out.test = std::move(copies.test);
    return;
  }
  out.train.clear();
  if (form == TrainingForm::Float32Copies) {
    const Eigen::VectorXd g = Scales();
    kernels_.Visit([&](const auto& k) { WriteFloat32Copies(k, train_, test_, pre_, vectors, residualiser, g, out.train32, out.test); });
    out.kernels = std::make_unique<Float32Columns>(out.train32);
    return;
  }
  if (residualiser_)
    throw InputError("cv:ColumnsWithCovariates", "fold columns", "fold kernels with covariates are not columns of the study's kernels (residualising mixes rows)");
  // Below kPackedStackBelow the test blocks are small beside the packed stack: held, so that the many decisions of a
  // grid search do not prepare them again each time, and made with the stack.
  if (train_.size() < kPackedStackBelow) {
    ColumnsKernelByKernel(out);
    return;
  }
  Vectors();
  const Eigen::VectorXd scales = Scales();
  out.test.clear();
  kernels_.Visit([&](const auto& k) {
    using Columns = FoldColumns<std::decay_t<decltype(k)>>;
    auto columns = std::make_unique<Columns>(k, train_, test_, lazy_->vectors, scales);
    const Columns* view = columns.get();
    out.testOnDemand = [view](Eigen::MatrixXd& buffer) { return view->Test(buffer); };
    out.kernels = std::move(columns);
  });
}

void MemoryFold::ColumnsKernelByKernel(WeightedKernels& out) const {
  // Each kernel's test block, packed column and check made together (FoldColumns::PrepareKernelByKernel), with its
  // vectors too when the fold has none yet (another learner's summed kernel, or source weighting's traces, make them
  // first); those then become the fold's.
  const Eigen::VectorXd scales = Scales();
  std::shared_ptr<std::vector<FoldVectors>> fresh;
  if (!lazy_->vectors) fresh = std::make_shared<std::vector<FoldVectors>>(kernels_.Count());
  const std::shared_ptr<const std::vector<FoldVectors>> vectors = fresh ? fresh : lazy_->vectors;
  out.test.clear();
  kernels_.Visit([&](const auto& k) {
    using Columns = FoldColumns<std::decay_t<decltype(k)>>;
    auto columns = std::make_unique<Columns>(k, train_, test_, vectors, scales);
    columns->PrepareKernelByKernel(out.test, [&](std::size_t r, const auto& kernel) {
      if (fresh) (*fresh)[r] = MakeFoldVectors(kernel, train_, test_, pre_.centre, pre_.normalise);
    });
    out.kernels = std::move(columns);
  });
  if (fresh) std::call_once(lazy_->vectorsOnce, [&] { lazy_->vectors = fresh; });
}

std::vector<Eigen::MatrixXd> MemoryFold::Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                                  const Eigen::VectorXd& scales) const {
  const std::vector<FoldVectors>* vectors = residualiser_ ? nullptr : &Vectors();
  std::vector<Eigen::MatrixXd> out(which.size());
  kernels_.Visit([&](const auto& kernels) {
    tbb::parallel_for(std::size_t{0}, which.size(), [&](std::size_t i) {
      const std::size_t r = which[i];
      const double scale = scales.size() > 0 ? scales[static_cast<Eigen::Index>(r)] : 1.0;
      if (!vectors) {
        FoldKernel fk = PrepareResidualised(kernels[r], train_, test_, *residualiser_, pre_);
        if (scale != 1.0) fk.train *= scale;
        out[i] = fk.train * A;
        return;
      }
      out[i] = PreparedProducts(kernels[r], train_, (*vectors)[r], A);
      if (scale != 1.0) out[i] *= scale;
    });
  });
  return out;
}

const KernelStack& MemoryFold::Stack() const {
  std::call_once(lazy_->stackOnce, [&] {
    const Eigen::VectorXd scales = Scales();
    if (!residualiser_) {
      Vectors();
      kernels_.Visit([&](const auto& k) {
        lazy_->columns = std::make_unique<FoldColumns<std::decay_t<decltype(k)>>>(k, train_, test_, lazy_->vectors, scales);
      });
      lazy_->stack = lazy_->columns->Stack();
      return;
    }
    FoldKernels copies;
    kernels_.Visit([&](const auto& k) { WriteCopies(k, train_, test_, pre_, nullptr, &*residualiser_, &scales, copies); });
    lazy_->copies = std::move(copies.train);
    lazy_->testCopies = std::move(copies.test);
    lazy_->stack = MakeStack(lazy_->copies);
  });
  return *lazy_->stack;
}

const Eigen::MatrixXd& MemoryFold::TestBlock(std::size_t k, Eigen::MatrixXd& scratch) const {
  if (residualiser_) {
    Stack();  // the copies hold the test blocks
    return lazy_->testCopies[k];
  }
  const Eigen::VectorXd scales = Scales();
  const std::vector<FoldVectors>& vectors = Vectors();
  const bool hold = train_.size() < kPackedStackBelow;
  Eigen::MatrixXd& target = hold ? lazy_->tests[k] : scratch;
  if (!hold || target.size() == 0)
    kernels_.Visit([&](const auto& kernels) { WritePreparedTestBlock(kernels[k], train_, test_, vectors[k], scales[static_cast<Eigen::Index>(k)], target); });
  return target;
}

}  // namespace neuromkl::gram
