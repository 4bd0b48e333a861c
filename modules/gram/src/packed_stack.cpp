// The packed stack (stacks.hpp): every kernel's upper triangle in one column of a store, small enough to stay in cache
// across the iterations of a fit (18.5 MB at n = 200 with 116 kernels).
#include <algorithm>
#include <stdexcept>

#include <tbb/parallel_for.h>

#include "stacks.hpp"

namespace neuromkl::gram::detail {

PackedStack::PackedStack(const KernelList& kernels)
    : KernelStack(static_cast<Eigen::Index>(kernels.size()), kernels.empty() ? 0 : kernels[0].rows()),
      rootBounds_(Eigen::VectorXd::Constant(static_cast<Eigen::Index>(kernels.size()), std::numeric_limits<double>::quiet_NaN())) {
  const Eigen::Index n = Subjects();
  packed_.resize(n * (n + 1) / 2, Size());
  finite_.assign(static_cast<std::size_t>(Size()), 1);
  // One pass over each matrix, column by column while it is in cache: the upper part is packed, the whole column is
  // checked for NaN and infinities (x * 0 is NaN exactly for those), and the upper part's squares give the spectral
  // bound (RootSpectralBound's sums, in its order).
  for (Eigen::Index k = 0; k < Size(); ++k) {
    double* out = packed_.col(k).data();
    const Eigen::MatrixXd& K = kernels[static_cast<std::size_t>(k)];
    double probe = 0, frob = 0;
    for (Eigen::Index j = 0; j < n; ++j) {
      const double* column = K.data() + j * n;
      out = std::copy(column, column + j + 1, out);
      probe += (K.col(j).array() * 0.0).sum();
      frob += 2.0 * Eigen::Map<const Eigen::VectorXd>(column, j).squaredNorm() + column[j] * column[j];
    }
    finite_[static_cast<std::size_t>(k)] = !std::isnan(probe);
    rootBounds_[k] = RootOfFrobenius(frob);
  }
}

PackedStack::PackedStack(const KernelColumns& columns) : PackedStack(columns, {}) {}

PackedStack::PackedStack(const KernelColumns& columns, const std::function<void(Eigen::Index)>& beforeKernel)
    : KernelStack(columns.Count(), columns.Size()),
      rootBounds_(Eigen::VectorXd::Constant(columns.Count(), std::numeric_limits<double>::quiet_NaN())) {
  const Eigen::Index n = Subjects();
  packed_.resize(n * (n + 1) / 2, Size());
  finite_.assign(static_cast<std::size_t>(Size()), 1);
  // Kernels are independent (each writes its own column of the store). The packed column holds every value a learner
  // reads (each column's rows 0..j), checked while it is in cache (x * 0 is NaN exactly for NaN and infinities).
  tbb::parallel_for(Eigen::Index{0}, Size(), [&](Eigen::Index k) {
    if (beforeKernel) beforeKernel(k);
    double* out = packed_.col(k).data();
    for (Eigen::Index j = 0; j < n; out += j + 1, ++j) columns.UpperColumn(k, j, out);
    finite_[static_cast<std::size_t>(k)] = !std::isnan((packed_.col(k).array() * 0.0).sum());
  });
}

Eigen::Index PackedStack::FirstNonFinite() const {
  for (Eigen::Index k = 0; k < Size(); ++k)
    if (!finite_[static_cast<std::size_t>(k)]) return k;
  return -1;
}

void PackedStack::Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& K) const {
  const Eigen::Index n = Subjects();
  K.resize(n, n);
  Eigen::VectorXd v = Eigen::VectorXd::Zero(packed_.rows());
  std::vector<const double*> sources;
  std::vector<double> w;
  for (Eigen::Index k = 0; k < Size(); ++k)
    if (weights[k] != 0.0) {
      sources.push_back(packed_.col(k).data());
      w.push_back(weights[k]);
    }
  AccumulateScaled(v.data(), v.size(), sources, w);
  const double* p = v.data();
  for (Eigen::Index j = 0; j < n; p += j + 1, ++j) K.col(j).head(j + 1) = Eigen::Map<const Eigen::VectorXd>(p, j + 1);
  MirrorUpper(K, false);
}

Eigen::VectorXd PackedStack::PackedOuter(const Eigen::MatrixXd& A) const {
  const Eigen::Index n = Subjects();
  Eigen::VectorXd w = Eigen::VectorXd::Zero(packed_.rows());
  for (Eigen::Index c = 0; c < A.cols(); ++c) {
    double* p = w.data();
    for (Eigen::Index j = 0; j < n; ++j) {
      const double aj = A(j, c);
      for (Eigen::Index i = 0; i < j; ++i) *p++ += 2.0 * A(i, c) * aj;
      *p++ += aj * aj;
    }
  }
  return w;
}

double PackedStack::PackedQuadratic(Eigen::Index k, const Eigen::VectorXd& packedOuter) const {
  return std::max(0.0, packed_.col(k).dot(packedOuter));  // PSD kernels: clip rounding below 0
}

Eigen::VectorXd PackedStack::Quadratics(const Eigen::VectorXd& a) const {
  return (packed_.transpose() * PackedOuter(Eigen::MatrixXd(a))).cwiseMax(0.0);
}

namespace {
/// The packed outer product of A, made at the first quadratic asked for and shared by the others.
class PackedForm final : public QuadraticForm {
 public:
  PackedForm(const PackedStack& stack, Eigen::MatrixXd A) : stack_(stack), A_(std::move(A)) {}
  double Value(Eigen::Index k) override {
    if (outer_.size() == 0) outer_ = stack_.PackedOuter(A_);
    return stack_.PackedQuadratic(k, outer_);
  }
  Eigen::VectorXd Values(const std::vector<Eigen::Index>& which) override {
    Eigen::VectorXd q(static_cast<Eigen::Index>(which.size()));
    for (std::size_t i = 0; i < which.size(); ++i) q[static_cast<Eigen::Index>(i)] = Value(which[i]);
    return q;
  }
  std::size_t Together() const override { return 0; }

 private:
  const PackedStack& stack_;
  Eigen::MatrixXd A_;
  Eigen::VectorXd outer_;
};
}  // namespace

std::unique_ptr<QuadraticForm> PackedStack::Form(const Eigen::MatrixXd& A) const { return std::make_unique<PackedForm>(*this, A); }

Eigen::MatrixXd PackedStack::Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const {
  Eigen::MatrixXd G(Subjects(), static_cast<Eigen::Index>(which.size()));
  for (std::size_t i = 0; i < which.size(); ++i)
    G.col(static_cast<Eigen::Index>(i)) = UpperProduct(Subjects(), [&](Eigen::Index j) { return UpperColumn(which[i], j); }, v);
  return G;
}

double PackedStack::RootSpectralBound(Eigen::Index k) const {
  if (std::isnan(rootBounds_[k])) rootBounds_[k] = RootOfFrobenius(UpperSquares(Subjects(), [&](Eigen::Index j) { return UpperColumn(k, j); }));
  return rootBounds_[k];
}

void PackedStack::Facts(std::vector<char>& finite, std::vector<char>& nonzero) const {
  const auto m = static_cast<std::size_t>(Size());
  finite.assign(m, 1);
  nonzero.assign(m, 0);
  tbb::parallel_for(std::size_t{0}, m, [&](std::size_t k) {
    bool f = true, z = false;
    ScanUpper(Subjects(), [&](Eigen::Index j) { return UpperColumn(static_cast<Eigen::Index>(k), j); }, f, z);
    finite[k] = f;
    nonzero[k] = z;
  });
}

}  // namespace neuromkl::gram::detail
