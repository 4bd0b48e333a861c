#include "owned_fold.hpp"

#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "owner_protocol.hpp"

namespace neuromkl::gram::detail {

OwnedFold::OwnedFold(const KernelOwners& owners, std::int64_t id, Eigen::Index train, Eigen::Index test, Eigen::VectorXd scales)
    : owners_(owners), id_(id), train_(train), test_(test), scales_(std::move(scales)) {}

OwnedFold::~OwnedFold() {
  try {
    owners_.Request(Encode(kCloseFold, id_), [](int, OwnerReply&) {});
  } catch (...) {  // a destructor does not throw; the owners' failure, if any, was reported by the request that met it
  }
}

void OwnedFold::Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const {
  if (weights.size() != static_cast<Eigen::Index>(KernelCount())) throw std::logic_error("OwnedFold::Combine: one weight per kernel");
  const std::vector<double> sum = owners_.SumOfReplies(Encode(kCombine, id_, KernelValuesRequest{{weights.data(), weights.data() + weights.size()}}));
  if (sum.empty()) {
    out = Eigen::MatrixXd::Zero(train_, train_);
    return;
  }
  UnpackUpper(sum, train_, out);
}

Eigen::VectorXd OwnedFold::Quadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A, bool perKernel) const {
  const auto values = owners_.PerKernel(Encode(id_, QuadraticsRequest{perKernel, A, which}), which, 1);
  Eigen::VectorXd q(static_cast<Eigen::Index>(which.size()));
  for (std::size_t i = 0; i < which.size(); ++i) q[static_cast<Eigen::Index>(i)] = values[i][0];
  return q;
}

Eigen::MatrixXd OwnedFold::Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const {
  const auto values = owners_.PerKernel(Encode(id_, ProductsRequest{which, v}), which, static_cast<std::size_t>(train_));
  Eigen::MatrixXd G(train_, static_cast<Eigen::Index>(which.size()));
  for (std::size_t i = 0; i < which.size(); ++i) G.col(static_cast<Eigen::Index>(i)) = Eigen::Map<const Eigen::VectorXd>(values[i].data(), train_);
  return G;
}

Eigen::VectorXd OwnedFold::RootSpectralBounds(const std::vector<Eigen::Index>& which) const {
  const auto values = owners_.PerKernel(Encode(kRootBounds, id_, KernelsRequest{which}), which, 1);
  Eigen::VectorXd b(static_cast<Eigen::Index>(which.size()));
  for (std::size_t i = 0; i < which.size(); ++i) b[static_cast<Eigen::Index>(i)] = values[i][0];
  return b;
}

void OwnedFold::Facts() const {
  // The grid's fits on one fold run on several threads and read these together: whichever asks first fetches them,
  // the others wait (filled by two threads at once, nonZero_ would be reallocated under the other's reads).
  std::call_once(factsOnce_, [this] {
    const auto values = owners_.PerKernel(Encode(kFacts, id_), owners_.Every(), 2);
    firstNonFinite_ = -1;
    nonZero_.clear();
    for (std::size_t j = 0; j < values.size(); ++j) {
      if (values[j][0] == 0.0 && firstNonFinite_ < 0) firstNonFinite_ = static_cast<Eigen::Index>(j);
      if (values[j][1] != 0.0) nonZero_.push_back(static_cast<Eigen::Index>(j));
    }
  });
}

Eigen::Index OwnedFold::FirstNonFinite() const {
  Facts();
  return firstNonFinite_;
}

std::vector<Eigen::Index> OwnedFold::NonZero() const {
  Facts();
  return nonZero_;
}

KernelList OwnedFold::TestBlocks(const std::vector<Eigen::Index>& which) const {
  const auto values = owners_.PerKernel(Encode(kTestBlocks, id_, KernelsRequest{which}), which, static_cast<std::size_t>(test_ * train_));
  KernelList blocks(which.size());
  for (std::size_t i = 0; i < which.size(); ++i) blocks[i] = Eigen::Map<const Eigen::MatrixXd>(values[i].data(), test_, train_);
  return blocks;
}

std::vector<Eigen::MatrixXd> OwnedFold::TestProducts(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) const {
  const auto values = owners_.PerKernel(Encode(id_, TestProductsRequest{form, C, which}), which, static_cast<std::size_t>(test_ * C.cols()));
  std::vector<Eigen::MatrixXd> P;
  for (const auto& v : values) P.emplace_back(Eigen::Map<const Eigen::MatrixXd>(v.data(), test_, C.cols()));
  return P;
}

FoldKernels OwnedFold::Summed() const {
  std::vector<double> sum = owners_.SumOfReplies(Encode(kSummed, id_));
  FoldKernels out;
  sum.resize(static_cast<std::size_t>(train_ * train_ + test_ * train_), 0.0);
  out.train.emplace_back(Eigen::Map<const Eigen::MatrixXd>(sum.data(), train_, train_));
  out.test.emplace_back(Eigen::Map<const Eigen::MatrixXd>(sum.data() + train_ * train_, test_, train_));
  return out;
}

std::vector<Eigen::MatrixXd> OwnedFold::ViewProducts(const std::vector<Eigen::Index>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                                     const std::vector<double>& scales) const {
  const auto values = owners_.PerKernel(Encode(id_, ViewProductsRequest{which, scales, A}), which, static_cast<std::size_t>(train_ * A.cols()));
  std::vector<Eigen::MatrixXd> P;
  for (const auto& v : values) P.emplace_back(Eigen::Map<const Eigen::MatrixXd>(v.data(), train_, A.cols()));
  return P;
}

namespace {
/// The quadratics of A kernel by kernel, each set in one request to the owners.
class RemoteForm final : public QuadraticForm {
 public:
  RemoteForm(const OwnedFold& fold, Eigen::MatrixXd A) : fold_(fold), A_(std::move(A)) {}
  double Value(Eigen::Index k) override { return fold_.Quadratics({k}, A_, true)[0]; }
  Eigen::VectorXd Values(const std::vector<Eigen::Index>& which) override { return fold_.Quadratics(which, A_, true); }
  std::size_t Together() const override { return 1; }

 private:
  const OwnedFold& fold_;
  Eigen::MatrixXd A_;
};

/// The stack of a fold's prepared training kernels held by their owners: every operation runs where the kernels are and
/// only its result travels (a combined kernel per solve, quadratics, product columns).
class RemoteStack final : public KernelStack {
 public:
  explicit RemoteStack(std::shared_ptr<const OwnedFold> fold)
      : KernelStack(static_cast<Eigen::Index>(fold->KernelCount()), fold->TrainSize()),
        fold_(std::move(fold)),
        rootBounds_(Eigen::VectorXd::Constant(Size(), std::numeric_limits<double>::quiet_NaN())) {}
  void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const override { fold_->Combine(weights, out); }
  Eigen::VectorXd Quadratics(const Eigen::VectorXd& a) const override {
    std::vector<Eigen::Index> every(static_cast<std::size_t>(Size()));
    std::iota(every.begin(), every.end(), Eigen::Index{0});
    return fold_->Quadratics(every, Eigen::MatrixXd(a), false);
  }
  std::unique_ptr<QuadraticForm> Form(const Eigen::MatrixXd& A) const override { return std::make_unique<RemoteForm>(*fold_, A); }
  Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const override { return fold_->Products(which, v); }
  double RootSpectralBound(Eigen::Index k) const override {
    if (std::isnan(rootBounds_[k])) rootBounds_[k] = fold_->RootSpectralBounds({k})[0];
    return rootBounds_[k];
  }
  void Facts(std::vector<char>& finite, std::vector<char>& nonzero) const override {
    const auto m = static_cast<std::size_t>(Size());
    finite.assign(m, 1);
    nonzero.assign(m, 0);
    if (const Eigen::Index bad = fold_->FirstNonFinite(); bad >= 0) finite[static_cast<std::size_t>(bad)] = 0;
    for (const auto k : fold_->NonZero()) nonzero[static_cast<std::size_t>(k)] = 1;
  }

 private:
  std::shared_ptr<const OwnedFold> fold_;
  mutable Eigen::VectorXd rootBounds_;  ///< NaN until asked for
};

/// The training kernels of a fold held by their owners, as a learner of kernel weights is given them.
class RemoteKernels final : public TrainingKernels {
 public:
  explicit RemoteKernels(std::shared_ptr<const OwnedFold> fold) : fold_(std::move(fold)) {}
  Eigen::Index Count() const override { return static_cast<Eigen::Index>(fold_->KernelCount()); }
  Eigen::Index Size() const override { return fold_->TrainSize(); }
  std::unique_ptr<KernelStack> Stack() const override { return std::make_unique<RemoteStack>(fold_); }
  Eigen::Index FirstNonFinite() const override { return fold_->FirstNonFinite(); }
  std::vector<Eigen::Index> NonZero() const override { return fold_->NonZero(); }

 private:
  std::shared_ptr<const OwnedFold> fold_;
};
}  // namespace

void OwnedPreparedFold::Weighted(TrainingForm, WeightedKernels& out) const {
  out.train.clear();
  out.test.clear();
  out.train32.clear();
  out.kernels = std::make_unique<RemoteKernels>(fold_);
  // A block itself is fetched only when asked for; decisions ask for the products with the coefficients.
  out.testOnDemand = [fold = fold_](Eigen::MatrixXd& buffer) {
    return TestBlocks{static_cast<Eigen::Index>(fold->KernelCount()), fold->TestSize(),
                      [fold, &buffer](Eigen::Index k) -> const Eigen::MatrixXd& {
                        buffer = std::move(fold->TestBlocks({k})[0]);
                        return buffer;
                      },
                      [fold](const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) { return fold->TestProducts(which, C, form); }};
  };
}

std::vector<Eigen::MatrixXd> OwnedPreparedFold::Products(const std::vector<std::size_t>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                                         const Eigen::VectorXd& scales) const {
  std::vector<Eigen::Index> kernels;
  std::vector<double> s;
  for (const std::size_t r : which) {
    kernels.push_back(static_cast<Eigen::Index>(r));
    s.push_back(scales.size() > 0 ? scales[static_cast<Eigen::Index>(r)] : 1.0);
  }
  return fold_->ViewProducts(kernels, A, s);
}

}  // namespace neuromkl::gram::detail
