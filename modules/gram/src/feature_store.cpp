// The feature form of a study's kernels as a KernelStore (MakeFeatureKernels): folds of FoldFeatures, products with the
// rows where the kernel path reads blocks.
#include <algorithm>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/gram/store.hpp"

namespace neuromkl::gram {

namespace {

/// e_j: the weight vector that selects region j in FoldFeatures::Times.
Eigen::VectorXd Only(std::size_t regions, std::size_t j) {
  Eigen::VectorXd w = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(regions));
  w[static_cast<Eigen::Index>(j)] = 1;
  return w;
}

/// K~_j A for each j in `which` (rows: the fold's test rows or its training rows), one pass over the training rows per
/// column of A for every region at once.
std::vector<Eigen::MatrixXd> RegionProducts(const FoldFeatures& fold, const std::vector<std::size_t>& which, const Eigen::MatrixXd& A, bool test) {
  std::vector<Eigen::MatrixXd> out(which.size(), Eigen::MatrixXd(test ? fold.TestRows() : fold.TrainingRows(), A.cols()));
  for (Eigen::Index c = 0; c < A.cols(); ++c) {
    const PreparedVector u = fold.TrainingTransposeTimes(A.col(c));
    for (std::size_t i = 0; i < which.size(); ++i) out[i].col(c) = fold.Times(u, Only(fold.Regions(), which[i]), test);
  }
  return out;
}

class FeatureFold final : public PreparedFold {
 public:
  FeatureFold(std::shared_ptr<const FeatureMatrix> x, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre)
      : x_(std::move(x)), fold_(*x_, train, test, pre.centre, pre.normalise, pre.covariates.get()) {}

  Eigen::VectorXd Scales() const override { return Eigen::VectorXd::Ones(static_cast<Eigen::Index>(fold_.Regions())); }
  FoldKernels Summed() const override { return {}; }
  void Weighted(TrainingForm, WeightedKernels& out) const override {
    out.train.clear();
    out.test.clear();
    out.train32.clear();
    out.kernels.reset();
    out.keepAlive = x_;
    out.testOnDemand = [this](Eigen::MatrixXd& buffer) { return Test(buffer); };
  }
  std::vector<Eigen::MatrixXd> Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                        const Eigen::VectorXd& scales) const override {
    std::vector<Eigen::MatrixXd> out = RegionProducts(fold_, which, A, false);
    if (scales.size() > 0)
      for (std::size_t i = 0; i < which.size(); ++i) out[i] *= scales[static_cast<Eigen::Index>(which[i])];
    return out;
  }
  const FoldFeatures* Features() const override { return &fold_; }

 private:
  // The test blocks a decision reads, as products with the rows; a block itself (m x l, formed on request into
  // `buffer`) only for a caller that asks for one.
  TestBlocks Test(Eigen::MatrixXd& buffer) const {
    TestBlocks blocks;
    blocks.count = static_cast<Eigen::Index>(fold_.Regions());
    blocks.rows = fold_.TestRows();
    blocks.block = [this, &buffer](Eigen::Index j) -> const Eigen::MatrixXd& {
      buffer = RegionProducts(fold_, {static_cast<std::size_t>(j)}, Eigen::MatrixXd::Identity(fold_.TrainingRows(), fold_.TrainingRows()), true)[0];
      return buffer;
    };
    blocks.products = [this](const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) {
      std::vector<std::size_t> regions(which.begin(), which.end());
      const Eigen::MatrixXd used = form == kProductVector ? Eigen::MatrixXd(C.col(0)) : C;
      return RegionProducts(fold_, regions, used, true);
    };
    return blocks;
  }

  std::shared_ptr<const FeatureMatrix> x_;
  FoldFeatures fold_;
};

/// The covariates of a fold's rows, training rows then test rows.
Covariates FoldRowsOf(const Covariates& covariates, const std::vector<int>& train, const std::vector<int>& test) {
  std::vector<int> rows = train;
  rows.insert(rows.end(), test.begin(), test.end());
  Covariates out;
  out.categoryOf = covariates.categoryOf;
  out.design.resize(static_cast<Eigen::Index>(rows.size()), covariates.design.cols());
  for (std::size_t k = 0; k < rows.size(); ++k) out.design.row(static_cast<Eigen::Index>(k)) = covariates.design.row(rows[k]);
  if (!covariates.fitRow.empty())
    for (const int r : rows) out.fitRow.push_back(covariates.fitRow[static_cast<std::size_t>(r)]);
  return out;
}

/// The region kernels over a fold's rows (training rows, then test rows) from the features, each row centred with the
/// training mean per voxel first (centre) so that data with a large mean keep their precision; in double, region by
/// region in parallel (each product on its own: the same values for any number of threads).
KernelList FormFoldKernels(const FeatureMatrix& x, const std::vector<int>& train, const std::vector<int>& test, bool centre) {
  std::vector<int> rows = train;
  rows.insert(rows.end(), test.begin(), test.end());
  const auto n = static_cast<Eigen::Index>(rows.size());
  KernelList kernels(x.Regions());
  tbb::parallel_for(std::size_t{0}, x.Regions(), [&](std::size_t r) {
    const Eigen::Index begin = x.regionStart[r], d = x.RegionSize(r);
    Eigen::MatrixXd block(n, d);
    for (Eigen::Index a = 0; a < n; ++a) block.row(a) = x.RowSegment(rows[static_cast<std::size_t>(a)], begin, d);
    if (centre && !train.empty()) {
      const Eigen::RowVectorXd mean = block.topRows(static_cast<Eigen::Index>(train.size())).colwise().mean();
      block.rowwise() -= mean;
    }
    Eigen::MatrixXd& K = kernels[r];
    K.setZero(n, n);
    K.selfadjointView<Eigen::Lower>().rankUpdate(block);
    K.triangularView<Eigen::StrictlyUpper>() = K.transpose();
  });
  return kernels;
}

std::vector<int> Range(int begin, int end) {
  std::vector<int> out(static_cast<std::size_t>(end - begin));
  std::iota(out.begin(), out.end(), begin);
  return out;
}

/// A fold of a FeatureMatrix whose kernels are small enough to form (FeatureKernels' budget): its region kernels formed
/// (FormFoldKernels) and prepared as every fold of kernels in memory is (centring again changes them by rounding
/// only; normalisation), so the kernel learners fit it. Once per fold (l + m)^2 x voxels multiply-adds instead of a pass
/// over the rows per solver step: ENMKL's weight steps, each a warm-started inner solve, and a grid's fits share them.
/// Formed on the first request that needs them (a fold opened for its scales alone forms nothing), once.
class FormedFeatureFold final : public PreparedFold {
 public:
  FormedFeatureFold(std::shared_ptr<const FeatureMatrix> x, const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre)
      : x_(std::move(x)), train_(train), test_(test), pre_(pre) {}

  Eigen::VectorXd Scales() const override { return Eigen::VectorXd::Ones(static_cast<Eigen::Index>(x_->Regions())); }  // no kernel groups
  FoldKernels Summed() const override { return Fold().Summed(); }
  void Weighted(TrainingForm form, WeightedKernels& out) const override {
    Fold().Weighted(form, out);
    out.keepAlive = formed_;  // what in-place columns and test blocks read
  }
  std::vector<Eigen::MatrixXd> Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                        const Eigen::VectorXd& scales) const override {
    return Fold().Products(which, A, scales);
  }

 private:
  struct Formed {
    MemoryKernels kernels;
    std::unique_ptr<PreparedFold> fold;  // (after kernels, which it reads)
    explicit Formed(KernelList&& list) : kernels(std::move(list)) {}
  };
  const PreparedFold& Fold() const {
    std::call_once(once_, [this] {
      auto formed = std::make_shared<Formed>(FormFoldKernels(*x_, train_, test_, pre_.centre));
      const int l = static_cast<int>(train_.size()), m = static_cast<int>(test_.size());
      // The formed kernels' rows are the fold's rows: so are the covariates' (the training mean each row was centred
      // with cancels in the residuals, whose design has an intercept).
      Preprocessing pre = pre_;
      if (pre_.covariates) pre.covariates = std::make_shared<const Covariates>(FoldRowsOf(*pre_.covariates, train_, test_));
      formed->fold = formed->kernels.OpenFold(Range(0, l), Range(l, l + m), pre);
      formed_ = std::move(formed);
    });
    return *formed_->fold;
  }

  std::shared_ptr<const FeatureMatrix> x_;
  std::vector<int> train_, test_;
  Preprocessing pre_;
  mutable std::once_flag once_;
  mutable std::shared_ptr<Formed> formed_;
};

/// R x rows^2 x 8: a fold's formed kernels.
std::uint64_t FormedBytes(std::size_t regions, std::size_t rows) { return static_cast<std::uint64_t>(regions) * rows * rows * sizeof(double); }

class FeatureKernels final : public KernelStore {
 public:
  FeatureKernels(std::shared_ptr<const FeatureMatrix> x, std::uint64_t formBelowBytes) : x_(std::move(x)), formBelowBytes_(formBelowBytes) { x_->Check(); }

  std::size_t Count() const override { return x_->Regions(); }
  Eigen::Index Subjects() const override { return x_->Subjects(); }
  bool Compact() const override { return false; }
  bool Centred() const override { return false; }
  bool Features() const override { return true; }
  void CheckPreprocessing(const Preprocessing& pre) const override {
    if (pre.covariates && pre.covariates->design.rows() != Subjects())
      throw InputError("gram:FeaturesPreprocessing", "kernels", "expected one covariate row per subject of the features (" + std::to_string(Subjects()) + "); found " +
                       std::to_string(pre.covariates->design.rows()));
    if (!pre.kernelGroups.empty())
      throw InputError("gram:FeaturesPreprocessing", "kernels", "the feature form holds one source; found source groups to weigh equally");
  }
  std::unique_ptr<PreparedFold> OpenFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const override {
    CheckPreprocessing(pre);
    if (Forms(train.size() + test.size())) return std::make_unique<FormedFeatureFold>(x_, train, test, pre);
    return std::make_unique<FeatureFold>(x_, train, test, pre);
  }
  Eigen::VectorXd LargestCentredSelfSimilarities(const std::vector<int>& train, const Preprocessing& pre) const override {
    Eigen::VectorXd largest = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(Count()));
    if (train.empty()) return largest;
    const FoldFeatures fold(*x_, train, {}, pre.centre, false, pre.covariates.get());
    for (std::size_t r = 0; r < Count(); ++r)
      for (Eigen::Index i = 0; i < fold.TrainingRows(); ++i)
        largest[static_cast<Eigen::Index>(r)] = std::max(largest[static_cast<Eigen::Index>(r)], fold.CentredSquaredNorm(i, r));
    return largest;
  }
  // D(i, r) = beta_r (coef_i s_ir - S_r / l) for training subjects (S_r = sum_i coef_i s_ir; no mean term without centring),
  // weights of the residualised rows; with covariates rewritten as weights of the raw rows (ResidualiseSubjectWeights).
  Eigen::MatrixXd SubjectWeights(const FoldModel& model, const Preprocessing& pre) const override {
    CheckPreprocessing(pre);
    const FoldFeatures fold(*x_, model.train, model.test, pre.centre, pre.normalise, pre.covariates.get());
    std::optional<FoldResidualiser> residualiser;
    if (pre.covariates)
      residualiser = MakeFoldResidualiser(*pre.covariates, Eigen::Map<const Eigen::VectorXi>(model.train.data(), static_cast<Eigen::Index>(model.train.size())),
                                          Eigen::Map<const Eigen::VectorXi>(model.test.data(), static_cast<Eigen::Index>(model.test.size())));
    Eigen::MatrixXd D = Eigen::MatrixXd::Zero(Subjects(), static_cast<Eigen::Index>(Count()));
    const auto l = static_cast<Eigen::Index>(model.train.size());
    for (std::size_t r = 0; r < Count(); ++r) {
      const auto j = static_cast<Eigen::Index>(r);
      Eigen::VectorXd d(l);
      for (Eigen::Index a = 0; a < l; ++a) d[a] = model.coef[a] * fold.Scale(a, r);
      const double mean = pre.centre ? d.sum() / static_cast<double>(l) : 0.0;
      d = model.beta[j] * (d.array() - mean).matrix();
      if (residualiser) ResidualiseSubjectWeights(d, *residualiser);
      for (Eigen::Index a = 0; a < l; ++a) D(model.train[static_cast<std::size_t>(a)], j) = d[a];
    }
    return D;
  }
  // A fold task holds its FoldFeatures (three fold rows x regions tables and two per offset image, the offset images:
  // the voxel mean and a coefficient image per design column, and their coefficients per row) and a fit's state: two
  // voxel-length vectors and its per-row vectors.
  std::uint64_t FoldTaskBytes(const FoldTask& task) const override {
    // A formed fold: its kernels, their prepared copies and a region block being formed per thread.
    if (Forms(task.train + task.test)) {
      Eigen::Index largest = 0;
      for (std::size_t r = 0; r < Count(); ++r) largest = std::max(largest, x_->RegionSize(r));
      const auto threads = static_cast<std::uint64_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
      return 2 * FormedBytes(Count(), task.train + task.test) + threads * 8 * (task.train + task.test) * static_cast<std::uint64_t>(largest);
    }
    const auto rows = static_cast<std::uint64_t>(task.train + task.test + task.unlabelled);
    const auto regions = static_cast<std::uint64_t>(Count()), voxels = static_cast<std::uint64_t>(x_->Voxels());
    const std::uint64_t offsets = 1 + (task.covariates ? task.covariateColumns : 0);
    return 8 * ((3 + 2 * offsets) * rows * regions + (2 + offsets) * voxels + (8 + offsets) * rows);
  }
  std::unique_ptr<KernelStore> Subset(const std::vector<std::size_t>& which) const override {
    auto part = std::make_shared<FeatureMatrix>(x_->SelectRegions(which));
    return std::make_unique<FeatureKernels>(std::move(part), formBelowBytes_);
  }

 private:
  bool Forms(std::size_t rows) const { return formBelowBytes_ > 0 && FormedBytes(Count(), rows) <= formBelowBytes_; }

  std::shared_ptr<const FeatureMatrix> x_;
  std::uint64_t formBelowBytes_ = 0;
};

}  // namespace

std::unique_ptr<KernelStore> MakeFeatureKernels(std::shared_ptr<const FeatureMatrix> features, std::uint64_t formFoldKernelsBelow) {
  return std::make_unique<FeatureKernels>(std::move(features), formFoldKernelsBelow);
}

}  // namespace neuromkl::gram
