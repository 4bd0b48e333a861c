// Kernels formed inside every fold from its transformed features: harmonised voxels, tabular columns (fold_formed.hpp).
#include "neuromkl/gram/fold_formed.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/gram/residualise.hpp"

namespace neuromkl::gram {

namespace {

std::vector<int> Positions(std::size_t begin, std::size_t end) {
  std::vector<int> out(end - begin);
  std::iota(out.begin(), out.end(), static_cast<int>(begin));
  return out;
}

std::vector<int> Concatenate(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

/// The study's preprocessing over a fold's rows: its covariates (design rows and reference group) restricted to them.
Preprocessing OverRows(const Preprocessing& pre, const std::vector<int>& rows) {
  Preprocessing out = pre;
  if (pre.covariates) {
    auto sliced = std::make_shared<Covariates>();
    sliced->categoryOf = pre.covariates->categoryOf;
    sliced->design.resize(static_cast<Eigen::Index>(rows.size()), pre.covariates->design.cols());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      sliced->design.row(static_cast<Eigen::Index>(i)) = pre.covariates->design.row(rows[i]);
      if (!pre.covariates->fitRow.empty()) sliced->fitRow.push_back(pre.covariates->fitRow[static_cast<std::size_t>(rows[i])]);
    }
    out.covariates = std::move(sliced);
  }
  return out;
}

/// Kernel K over a fold's rows (`index`, the first `trainCount` its training rows) with the rows the source lacks imputed
/// from the training rows that have it (KernelOrigin::present).
Eigen::MatrixXd ImputedFoldKernel(const Eigen::MatrixXd& K, const Eigen::VectorXi& index, std::size_t trainCount, const std::vector<char>& present,
                                  const std::string& source, const std::string& fold) {
  Eigen::MatrixXd S = K(index, index);
  std::vector<char> has(static_cast<std::size_t>(index.size()));
  for (Eigen::Index p = 0; p < index.size(); ++p) has[static_cast<std::size_t>(p)] = present[static_cast<std::size_t>(index[p])];
  const auto lack = static_cast<std::size_t>(std::count(has.begin(), has.end(), char{0}));
  if (lack == 0) return S;
  if (!ImputeLackingRows(S, has, trainCount))
    throw InputError("sources:NoneToImpute", fold,
                     fmt::format("no training subject of this fold has source \"{}\", so the {} subject(s) of the fold lacking it cannot be "
                                 "imputed (/kernels/missing_source \"impute\"); use folds that keep subjects with the source in every training "
                                 "set, or missing_source \"drop\"",
                                 source, lack));
  return S;
}

/// A fold of the fold's own kernels (MemoryKernels over its rows), which it keeps alive.
class HarmonisedFold final : public PreparedFold {
 public:
  HarmonisedFold(std::shared_ptr<const KernelList> kernels, std::size_t train, std::size_t test, const Preprocessing& pre, const std::vector<int>& rows)
      : values_(std::move(kernels)),
        kernels_(*values_),
        fold_(kernels_.OpenMemoryFold(Positions(0, train), Positions(train, train + test), OverRows(pre, rows))) {}
  Eigen::VectorXd Scales() const override { return fold_->Scales(); }
  FoldKernels Summed() const override { return fold_->Summed(); }
  void Weighted(TrainingForm form, WeightedKernels& out) const override {
    fold_->Weighted(form, out);
    // Read in place, the learners' training kernels are this fold's own kernels: they keep them alive.
    out.keepAlive = out.kernels || out.testOnDemand ? std::shared_ptr<const void>(values_) : nullptr;
  }
  std::vector<Eigen::MatrixXd> Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                        const Eigen::VectorXd& scales) const override {
    return fold_->Products(which, A, scales);
  }

 private:
  std::shared_ptr<const KernelList> values_;
  MemoryKernels kernels_;  ///< refers to *values_
  std::unique_ptr<MemoryFold> fold_;
};

}  // namespace

bool ImputeLackingRows(Eigen::MatrixXd& K, const std::vector<char>& present, std::size_t trainCount) {
  std::vector<Eigen::Index> have, lack, haveTrain;
  for (Eigen::Index p = 0; p < K.rows(); ++p) {
    const bool has = present[static_cast<std::size_t>(p)] != 0;
    (has ? have : lack).push_back(p);
    if (has && static_cast<std::size_t>(p) < trainCount) haveTrain.push_back(p);
  }
  if (lack.empty()) return true;
  if (haveTrain.empty()) return false;
  // Means over the training rows having the source, of each column having it, then of those means.
  Eigen::RowVectorXd mean = Eigen::RowVectorXd::Zero(K.cols());
  for (const Eigen::Index t : haveTrain) mean += K.row(t);
  mean /= static_cast<double>(haveTrain.size());
  double grand = 0;
  for (const Eigen::Index t : haveTrain) grand += mean[t];
  grand /= static_cast<double>(haveTrain.size());
  for (const Eigen::Index a : lack) {
    for (const Eigen::Index j : have) K(a, j) = K(j, a) = mean[j];
    for (const Eigen::Index b : lack) K(a, b) = grand;
  }
  return true;
}

void MoveImputedWeights(Eigen::MatrixXd& D, const std::vector<char>& present, const std::vector<int>& train) {
  std::vector<Eigen::Index> have, lack;
  for (const int i : train) (present[static_cast<std::size_t>(i)] ? have : lack).push_back(i);
  if (lack.empty() || have.empty()) return;
  Eigen::RowVectorXd moved = Eigen::RowVectorXd::Zero(D.cols());
  for (const Eigen::Index a : lack) {
    moved += D.row(a);
    D.row(a).setZero();
  }
  moved /= static_cast<double>(have.size());
  for (const Eigen::Index p : have) D.row(p) += moved;
}

FoldFormedKernels::FoldFormedKernels(std::shared_ptr<const KernelList> kernels, std::vector<KernelOrigin> origins,
                                     std::shared_ptr<const std::vector<HarmonisedSource>> sources, std::shared_ptr<const Harmonisation> design,
                                     std::uint64_t keptBytes, std::shared_ptr<const std::vector<FoldTabularSource>> tabular)
    : kernels_(std::move(kernels)),
      origins_(std::move(origins)),
      sources_(std::move(sources)),
      design_(std::move(design)),
      tabular_(tabular ? std::move(tabular) : std::make_shared<const std::vector<FoldTabularSource>>()),
      // Folds are kept for reuse where forming them again is costly: from harmonised voxels. Tabular kernels are formed in
      // a fraction of what their fits take, and keeping every fold's would hold memory the learners could use.
      keptBytes_(sources_->empty() ? 0 : keptBytes) {
  if (kernels_->size() != origins_.size())
    throw std::invalid_argument(fmt::format("FoldFormedKernels: {} kernels, {} origins", kernels_->size(), origins_.size()));
  if (design_) {
    rows_ = static_cast<Eigen::Index>(design_->sites.size());
  } else if (!tabular_->empty()) {
    rows_ = tabular_->front().features->rows();
  } else {
    for (const auto& K : *kernels_) rows_ = std::max(rows_, K.rows());
  }
  const Eigen::Index n = rows_;
  if (design_ && (design_->covariates.rows() != n || (!design_->fitRow.empty() && static_cast<Eigen::Index>(design_->fitRow.size()) != n)))
    throw std::invalid_argument("FoldFormedKernels: the design does not cover the rows");
  const bool harmonisedTabular = std::any_of(tabular_->begin(), tabular_->end(), [](const FoldTabularSource& s) { return s.harmonise; });
  if (!design_ && (!sources_->empty() || harmonisedTabular)) throw std::invalid_argument("FoldFormedKernels: harmonised sources without a design");
  for (std::size_t k = 0; k < origins_.size(); ++k) {
    const auto& o = origins_[k];
    if (o.Full()) {
      if ((*kernels_)[k].rows() != n) throw std::invalid_argument(fmt::format("FoldFormedKernels: kernel {} is not over the {} rows", k, n));
      if (o.present && static_cast<Eigen::Index>(o.present->size()) != n)
        throw std::invalid_argument(fmt::format("FoldFormedKernels: kernel {} says which of {} rows its source has, not of the {} rows", k, o.present->size(), n));
      continue;
    }
    if (o.tabular >= 0) {
      if (static_cast<std::size_t>(o.tabular) >= tabular_->size()) throw std::invalid_argument("FoldFormedKernels: unknown tabular source");
      const auto& features = *(*tabular_)[static_cast<std::size_t>(o.tabular)].features;
      const bool inside = std::all_of(o.columns.begin(), o.columns.end(), [&](Eigen::Index c) { return c >= 0 && c < features.cols(); });
      if (features.rows() != n || o.columns.empty() || !inside)
        throw std::invalid_argument(fmt::format("FoldFormedKernels: kernel {} has {} columns of {} x {} tabular features", k, o.columns.size(),
                                                features.rows(), features.cols()));
      continue;
    }
    if (static_cast<std::size_t>(o.source) >= sources_->size()) throw std::invalid_argument("FoldFormedKernels: unknown source");
    const auto& voxels = *(*sources_)[static_cast<std::size_t>(o.source)].voxels;
    if (voxels.rows() != n || o.begin < 0 || o.end > voxels.cols() || o.begin >= o.end)
      throw std::invalid_argument(fmt::format("FoldFormedKernels: kernel {} has columns [{}, {}) of {} x {} voxels", k, o.begin, o.end, voxels.rows(),
                                              voxels.cols()));
  }
}

std::string FoldFormedKernels::Where(std::size_t source, const std::string& fold) const {
  return fmt::format("{} (source {}, {})", design_->where, (*sources_).at(source).name, fold);
}

std::vector<std::size_t> FoldFormedKernels::KernelsOf(std::size_t source) const {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < Count(); ++k)
    if (origins_[k].source == static_cast<int>(source)) out.push_back(k);
  return out;
}

FoldFormedKernels::FitRows FoldFormedKernels::FitRowsOf(const std::vector<int>& train, const Rows& gathered) const {
  FitRows out;
  for (std::size_t p = 0; p < train.size(); ++p)
    if (design_->fitRow.empty() || design_->fitRow[static_cast<std::size_t>(train[p])]) {
      out.positions.push_back(static_cast<Eigen::Index>(p));
      out.sites.push_back(gathered.sites[p]);
    }
  return out;
}

ComBatOptions FoldFormedKernels::FitOptions() const {
  ComBatOptions options = design_->options;
  options.siteNames = design_->siteNames;
  return options;
}

std::string FoldFormedKernels::TabularWhere(std::size_t source, const std::string& fold) const {
  const std::string& name = (*tabular_).at(source).name;
  return fmt::format("{} (source {}, {})", design_->where, name.empty() ? std::string("tabular") : name, fold);
}

ComBatModel FoldFormedKernels::FitFold(std::size_t source, const std::vector<int>& train, const std::string& fold) const {
  const Rows gathered = RowsOf(train, train.size());
  const FitRows fit = FitRowsOf(train, gathered);
  std::vector<Eigen::Index> rows;
  for (const Eigen::Index p : fit.positions) rows.push_back(train[static_cast<std::size_t>(p)]);
  return FitComBat(*(*sources_)[source].voxels, rows, fit.sites, gathered.covariates(fit.positions, Eigen::all), FitOptions(), Where(source, fold));
}

ComBatModel FoldFormedKernels::FitFoldFor(std::size_t source, const std::vector<int>& train, const std::vector<int>& rows, const std::string& fold) const {
  const Harmonisation& h = *design_;
  ComBatModel model = FitFold(source, train, fold);
  for (const int i : rows)
    if (const int site = h.sites[static_cast<std::size_t>(i)]; model.SiteIndex(site) < 0)
      throw InputError("combat:SiteNotInFit", Where(source, fold),
                       fmt::format("site \"{}\" has subjects here but none among the training subjects{} the harmonisation is fitted on, so "
                                   "its effects cannot be estimated; use a split that keeps every site in every training set (stratify or "
                                   "group by the site column)",
                                   h.siteNames.at(static_cast<std::size_t>(site)), h.fitRow.empty() ? "" : " of the reference group (fit_on)"));
  return model;
}

FoldFormedKernels::Rows FoldFormedKernels::RowsOf(const std::vector<int>& rows, std::size_t trainCount) const {
  Rows out;
  out.index = Eigen::Map<const Eigen::VectorXi>(rows.data(), static_cast<Eigen::Index>(rows.size()));
  if (!design_) return out;
  for (const int i : rows) out.sites.push_back(design_->sites[static_cast<std::size_t>(i)]);
  if (!design_->covariates.hasNaN()) {
    out.covariates = design_->covariates(out.index, Eigen::all);
    return out;
  }
  const Covariates preserved{design_->covariates, {}, design_->categoryOf};
  const Eigen::RowVectorXd fill = ImputationFill(preserved, out.index.head(static_cast<Eigen::Index>(trainCount)), design_->where.c_str());
  out.covariates = FilledRows(preserved, out.index, fill);
  return out;
}

Eigen::MatrixXd FoldFormedKernels::HarmonisedBlock(const ComBatModel& model, std::size_t k, const Rows& rows, const std::string& where) const {
  const KernelOrigin& o = origins_[k];
  const Eigen::MatrixXf& voxels = *(*sources_)[static_cast<std::size_t>(o.source)].voxels;
  Eigen::MatrixXd block = voxels(rows.index, Eigen::seqN(o.begin, o.end - o.begin)).cast<double>();
  ApplyComBat(model, block, rows.sites, rows.covariates, where, o.begin);
  return block;
}

KernelList FoldFormedKernels::FoldKernelsOver(const std::vector<int>& rows, std::size_t trainCount, const std::string& fold) const {
  KernelList out(Count());
  const Rows gathered = RowsOf(rows, trainCount);
  for (std::size_t k = 0; k < Count(); ++k) {
    const KernelOrigin& o = origins_[k];
    if (!o.Full()) continue;
    out[k] = o.present ? ImputedFoldKernel((*kernels_)[k], gathered.index, trainCount, *o.present, o.presentSource, fold)
                       : Eigen::MatrixXd((*kernels_)[k](gathered.index, gathered.index));
  }
  const std::vector<int> train(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(trainCount));
  for (std::size_t t = 0; t < tabular_->size(); ++t) {
    const FoldTabularSource& source = (*tabular_)[t];
    const Eigen::MatrixXd X = TabularRows(FitTabularFold(t, train, fold), t, gathered, fold);
    // One linear kernel per group of columns, shared by that group's functions; the kernels formed several at once.
    std::map<std::vector<Eigen::Index>, Eigen::MatrixXd> linear;
    std::vector<std::size_t> kernels;
    for (std::size_t k = 0; k < Count(); ++k)
      if (origins_[k].tabular == static_cast<int>(t)) {
        kernels.push_back(k);
        linear.emplace(origins_[k].columns, Eigen::MatrixXd());
      }
    std::vector<std::pair<const std::vector<Eigen::Index>*, Eigen::MatrixXd*>> groups;
    for (auto& [columns, G] : linear) groups.emplace_back(&columns, &G);
    tbb::parallel_for(std::size_t{0}, groups.size(), [&](std::size_t g) { *groups[g].second = FeatureKernel::LinearGram(X(Eigen::all, *groups[g].first)); });
    tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
      const KernelOrigin& o = origins_[kernels[j]];
      out[kernels[j]] = o.function.OfLinear(linear.at(o.columns));
    });
    for (const std::size_t k : kernels)
      if (!out[k].allFinite())
        throw InputError("kernels:NonFinite", fmt::format("{} ({})", source.where, fold),
                         fmt::format("kernel {} of source {} has NaN or infinite values on this fold's standardised features: its function "
                                     "overflows or underflows double precision (a polynomial degree too high for their scale, or a Gaussian "
                                     "width whose square underflows); choose other values in its functions",
                                     k, source.name.empty() ? std::string("tabular") : source.name));
  }
  for (std::size_t s = 0; s < sources_->size(); ++s) {
    const std::vector<std::size_t> kernels = KernelsOf(s);
    if (kernels.empty()) continue;
    const ComBatModel model = FitFoldFor(s, train, rows, fold);
    const std::string where = Where(s, fold);
    tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
      const Eigen::MatrixXd block = HarmonisedBlock(model, kernels[j], gathered, where);
      // The lower triangle from one rank update, mirrored: exactly symmetric.
      Eigen::MatrixXd K = Eigen::MatrixXd::Zero(block.rows(), block.rows());
      K.selfadjointView<Eigen::Lower>().rankUpdate(block);
      K.triangularView<Eigen::StrictlyUpper>() = K.transpose();
      out[kernels[j]] = std::move(K);
    });
  }
  return out;
}

TabularFoldFit FoldFormedKernels::FitTabularFold(std::size_t source, const std::vector<int>& train, const std::string& fold, bool everyColumn) const {
  const FoldTabularSource& s = (*tabular_).at(source);
  const Eigen::VectorXi index = Eigen::Map<const Eigen::VectorXi>(train.data(), static_cast<Eigen::Index>(train.size()));
  const std::string where = fmt::format("{} ({})", s.where, fold);
  if (!s.harmonise) return {FitTabular(*s.features, index, s.steps, s.columns, where, everyColumn), std::nullopt};
  // Impute, harmonise the imputed training columns, then standardise what the harmonisation gives.
  TabularFoldFit out{FitTabular(*s.features, index, {s.steps.impute, false}, s.columns, where, everyColumn), std::nullopt};
  Eigen::MatrixXd X = ApplyTabular(out.fit, *s.features, index);
  const Rows gathered = RowsOf(train, train.size());
  const FitRows rows = FitRowsOf(train, gathered);
  out.combat = FitComBat(X(rows.positions, Eigen::all), rows.sites, gathered.covariates(rows.positions, Eigen::all), FitOptions(),
                         TabularWhere(source, fold));
  ApplyComBat(*out.combat, X, gathered.sites, gathered.covariates, TabularWhere(source, fold));
  const TabularFit scale = FitTabular(X, Eigen::VectorXi::LinSpaced(X.rows(), 0, static_cast<int>(X.rows()) - 1), {false, s.steps.standardise}, s.columns, where);
  out.fit.mean = scale.mean;
  out.fit.sd = scale.sd;
  return out;
}

Eigen::MatrixXd FoldFormedKernels::TabularFoldRows(const TabularFoldFit& fit, std::size_t source, const std::vector<int>& rows, std::size_t trainCount,
                                                   const std::string& fold) const {
  return TabularRows(fit, source, RowsOf(rows, trainCount), fold);
}

Eigen::MatrixXd FoldFormedKernels::TabularRows(const TabularFoldFit& fit, std::size_t source, const Rows& gathered, const std::string& fold) const {
  const FoldTabularSource& s = (*tabular_).at(source);
  if (!fit.combat) return ApplyTabular(fit.fit, *s.features, gathered.index);
  const auto p = static_cast<Eigen::Index>(s.columns.size());
  Eigen::MatrixXd X = ApplyTabular({fit.fit.fill, Eigen::RowVectorXd::Zero(p), Eigen::RowVectorXd::Ones(p)}, *s.features, gathered.index);
  ApplyComBat(*fit.combat, X, gathered.sites, gathered.covariates, TabularWhere(source, fold));
  for (Eigen::Index c = 0; c < p; ++c) X.col(c) = (X.col(c).array() - fit.fit.mean[c]) / fit.fit.sd[c];
  return X;
}

std::vector<Eigen::VectorXd> FoldFormedKernels::ColumnWeights(std::size_t source, const std::vector<int>& train,
                                                              const std::vector<const Eigen::MatrixXd*>& weights, const std::string& fold) const {
  return ColumnWeights(FitFoldFor(source, train, train, fold), source, train, weights, fold);
}

std::vector<Eigen::VectorXd> FoldFormedKernels::ColumnWeights(const ComBatModel& model, std::size_t source, const std::vector<int>& train,
                                                              const std::vector<const Eigen::MatrixXd*>& weights, const std::string& fold) const {
  std::vector<Eigen::VectorXd> out(weights.size(), Eigen::VectorXd::Zero((*sources_).at(source).voxels->cols()));
  const Rows gathered = RowsOf(train, train.size());
  const std::string where = Where(source, fold);
  const std::vector<std::size_t> kernels = KernelsOf(source);
  // Kernels own disjoint columns: each task writes its own segments.
  tbb::parallel_for(std::size_t{0}, kernels.size(), [&](std::size_t j) {
    const std::size_t k = kernels[j];
    const KernelOrigin& o = origins_[k];
    const Eigen::MatrixXd block = HarmonisedBlock(model, k, gathered, where);
    for (std::size_t m = 0; m < weights.size(); ++m)
      out[m].segment(o.begin, o.end - o.begin) = block.transpose() * (*weights[m])(gathered.index, static_cast<Eigen::Index>(k));
  });
  return out;
}

std::shared_ptr<const KernelList> FoldFormedKernels::FoldKernels(const std::vector<int>& rows, std::size_t trainCount, const std::string& fold) const {
  {
    const std::lock_guard<std::mutex> lock(keptMutex_);
    for (const auto& k : kept_)
      if (k.trainCount == trainCount && k.rows == rows) return k.kernels;
  }
  // Formed outside the lock: folds of the nested CV run at once.
  auto kernels = std::make_shared<const KernelList>(FoldKernelsOver(rows, trainCount, fold));
  const std::lock_guard<std::mutex> lock(keptMutex_);
  kept_.push_front({rows, trainCount, kernels});
  std::uint64_t held = 0;
  std::size_t keep = 0;
  for (const auto& k : kept_) {
    const auto size = static_cast<std::uint64_t>(k.rows.size() * k.rows.size() * Count() * sizeof(double));
    if (keep > 0 && held + size > keptBytes_) break;
    held += size;
    ++keep;
  }
  kept_.resize(keep);
  return kernels;
}

std::unique_ptr<PreparedFold> FoldFormedKernels::OpenFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const {
  const std::vector<int> rows = Concatenate(train, test);
  const std::string fold = fmt::format("a fold of {} training and {} test subjects", train.size(), test.size());
  return std::make_unique<HarmonisedFold>(FoldKernels(rows, train.size(), fold), train.size(), test.size(), pre, rows);
}

Eigen::VectorXd FoldFormedKernels::LargestCentredSelfSimilarities(const std::vector<int>& train, const Preprocessing& pre) const {
  const MemoryKernels local(*FoldKernels(train, train.size(), fmt::format("a training set of {} subjects", train.size())));
  return local.LargestCentredSelfSimilarities(Positions(0, train.size()), OverRows(pre, train));
}

Eigen::MatrixXd FoldFormedKernels::SubjectWeights(const FoldModel& model, const Preprocessing& pre) const {
  const std::vector<int> rows = Concatenate(model.train, model.test);
  const auto kernels = FoldKernels(rows, model.train.size(), fmt::format("a fold of {} training subjects", model.train.size()));
  const MemoryKernels local(*kernels);
  const FoldModel localModel{Positions(0, model.train.size()), Positions(model.train.size(), rows.size()), model.coef, model.beta};
  const Eigen::MatrixXd weights = local.SubjectWeights(localModel, OverRows(pre, rows));
  Eigen::MatrixXd D = Eigen::MatrixXd::Zero(Subjects(), weights.cols());
  for (std::size_t i = 0; i < model.train.size(); ++i) D.row(model.train[i]) = weights.row(static_cast<Eigen::Index>(i));
  return D;
}

std::uint64_t FoldFormedKernels::FoldTaskBytes(const FoldTask& task) const {
  // The fold's own kernels over its subjects and the prepared copies a memory fold makes of them (the folds kept for
  // reuse are bounded on their own, keptBytes); one region's harmonised voxels per thread are small next to them.
  const auto rows = static_cast<double>(task.train + task.unlabelled + task.test);
  return static_cast<std::uint64_t>(8.0 * (2.0 * static_cast<double>(Count()) * rows * rows + 2.0 * rows * rows));
}

std::unique_ptr<KernelStore> FoldFormedKernels::Subset(const std::vector<std::size_t>& which) const {
  auto kernels = std::make_shared<KernelList>();
  std::vector<KernelOrigin> origins;
  for (const std::size_t k : which) {
    if (k >= Count()) throw std::out_of_range(fmt::format("FoldFormedKernels::Subset: kernel {} of {}", k, Count()));
    kernels->push_back((*kernels_)[k]);
    origins.push_back(origins_[k]);
  }
  return std::make_unique<FoldFormedKernels>(std::move(kernels), std::move(origins), sources_, design_, keptBytes_, tabular_);
}

}  // namespace neuromkl::gram
