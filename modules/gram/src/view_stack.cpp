// The view stack (stacks.hpp): kernels read in place, from kPackedStackBelow training subjects, where a packed copy
// would be large (1.9 GB at n = 2,000 with 116 kernels) and cost seconds per fit.
#include <algorithm>
#include <stdexcept>

#include <tbb/parallel_for.h>

#include "stacks.hpp"

namespace neuromkl::gram::detail {

namespace {
/// sum_{i<j} column[i] a[i] in eight partial sums (a fixed order), float32 columns widened as they are read: the
/// quadratics of a view, whatever precision holds the kernel.
template <typename Scalar>
double UpperDot(const Scalar* column, const double* a, Eigen::Index j) {
  double d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Eigen::Index i = 0;
  for (; i + 8 <= j; i += 8)
    for (int r = 0; r < 8; ++r) d[r] += static_cast<double>(column[i + r]) * a[i + r];
  for (; i < j; ++i) d[0] += static_cast<double>(column[i]) * a[i];
  return ((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7]));
}

/// The boundaries of blocks of columns whose upper parts hold at most 2^15 entries (256 KiB) each, fixed by the size
/// alone: each block is summed by one thread, so the result does not depend on the number of threads.
std::vector<Eigen::Index> ColumnBlocks(Eigen::Index n) {
  constexpr Eigen::Index kChunk = Eigen::Index{1} << 15;
  std::vector<Eigen::Index> starts{0};
  for (Eigen::Index j0 = 0; j0 < n;) {
    Eigen::Index j1 = j0 + 1, entries = j0 + 1;
    while (j1 < n && entries + j1 + 1 <= kChunk) entries += ++j1;
    starts.push_back(j1);
    j0 = j1;
  }
  return starts;
}
}  // namespace

ViewStack::ViewStack(const KernelList& kernels)
    : KernelStack(static_cast<Eigen::Index>(kernels.size()), kernels.empty() ? 0 : kernels[0].rows()),
      kernels_(&kernels),
      rootBounds_(Eigen::VectorXd::Constant(static_cast<Eigen::Index>(kernels.size()), std::numeric_limits<double>::quiet_NaN())) {}

ViewStack::ViewStack(const KernelColumns& columns, const std::vector<Eigen::MatrixXf>* float32)
    : KernelStack(columns.Count(), columns.Size()),
      columns_(&columns),
      float32_(float32),
      rootBounds_(Eigen::VectorXd::Constant(columns.Count(), std::numeric_limits<double>::quiet_NaN())) {}

const double* ViewStack::UpperColumn(Eigen::Index k, Eigen::Index j, double* scratch) const {
  if (kernels_) return (*kernels_)[static_cast<std::size_t>(k)].col(j).data();
  columns_->UpperColumn(k, j, scratch);
  return scratch;
}

Eigen::Index ViewStack::FirstNonFinite() const {
  if (!kernels_) return KernelStack::FirstNonFinite();
  for (Eigen::Index k = 0; k < Size(); ++k)
    if (std::isnan(((*kernels_)[static_cast<std::size_t>(k)].array() * 0.0).sum())) return k;
  return -1;
}

void ViewStack::Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& K) const {
  // Only the kernels of non-zero weight are read, and of each only the upper triangle: a block of columns of K small
  // enough to stay in cache is summed over the kernels (in their order), then the lower triangle is filled from the
  // upper one block by block.
  const Eigen::Index n = Subjects();
  std::vector<Eigen::Index> used;
  for (Eigen::Index k = 0; k < Size(); ++k)
    if (weights[k] != 0.0) used.push_back(k);
  K.resize(n, n);
  const std::vector<Eigen::Index> starts = ColumnBlocks(n);
  // Four kernels per call (AccumulateScaled's own grouping, so the sum is that of one call over all): kernels given as
  // columns are written to a scratch column each, four at a time.
  constexpr std::size_t kGroup = 4;
  tbb::parallel_for(std::size_t{0}, starts.size() - 1, [&](std::size_t b) {
    // columnOf(kernel, column, slot): float32 kernels in place (widened by AccumulateScaled), the others through
    // UpperColumn (slot: the group's scratch column, used by kernels given as columns).
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
    std::vector<double> scratch(columns_ ? kGroup * static_cast<std::size_t>(n) : 0);
    sumBlock([&](Eigen::Index k, Eigen::Index j, std::size_t slot) { return UpperColumn(k, j, scratch.data() + slot * static_cast<std::size_t>(n)); });
  });
  MirrorUpper(K, true);
}

double ViewStack::Quadratic(Eigen::Index k, const Eigen::MatrixXd& A, const std::vector<Eigen::Index>& nonzero) const {
  // a'K a = sum_j a_j (2 sum_{i<j} K_ij a_i + K_jj a_j): column j of the triangle is read only when some a_j != 0.
  // Float32 kernels are read in place (half the bytes), the others through UpperColumn; one dot product for both.
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
  std::vector<double> scratch(columns_ ? static_cast<std::size_t>(Subjects()) : 0);
  return quadratic([&](Eigen::Index j) { return UpperColumn(k, j, scratch.data()); });
}

Eigen::VectorXd ViewStack::Quadratics(const Eigen::VectorXd& a) const {
  const Eigen::MatrixXd A = a;
  const auto nonzero = NonZeroRows(A);
  Eigen::VectorXd q(Size());
  tbb::parallel_for(Eigen::Index{0}, Size(), [&](Eigen::Index k) { q[k] = Quadratic(k, A, nonzero); });
  return q;
}

namespace {
/// The quadratics of a view read whole kernels: several are computed side by side, each as one thread computes it.
class ViewForm final : public QuadraticForm {
 public:
  ViewForm(const ViewStack& stack, Eigen::MatrixXd A) : stack_(stack), A_(std::move(A)), nonzero_(NonZeroRows(A_)) {}
  double Value(Eigen::Index k) override { return stack_.Quadratic(k, A_, nonzero_); }
  Eigen::VectorXd Values(const std::vector<Eigen::Index>& which) override {
    Eigen::VectorXd q(static_cast<Eigen::Index>(which.size()));
    tbb::parallel_for(std::size_t{0}, which.size(), [&](std::size_t i) { q[static_cast<Eigen::Index>(i)] = stack_.Quadratic(which[i], A_, nonzero_); });
    return q;
  }
  std::size_t Together() const override { return 2; }

 private:
  const ViewStack& stack_;
  Eigen::MatrixXd A_;
  std::vector<Eigen::Index> nonzero_;
};
}  // namespace

std::unique_ptr<QuadraticForm> ViewStack::Form(const Eigen::MatrixXd& A) const { return std::make_unique<ViewForm>(*this, A); }

Eigen::MatrixXd ViewStack::Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const {
  Eigen::MatrixXd G(Subjects(), static_cast<Eigen::Index>(which.size()));
  tbb::parallel_for(std::size_t{0}, which.size(), [&](std::size_t i) {  // columns are independent: thread-count free
    std::vector<double> scratch(columns_ ? static_cast<std::size_t>(Subjects()) : 0);
    G.col(static_cast<Eigen::Index>(i)) = UpperProduct(Subjects(), [&](Eigen::Index j) { return UpperColumn(which[i], j, scratch.data()); }, v);
  });
  return G;
}

double ViewStack::RootSpectralBound(Eigen::Index k) const {
  if (std::isnan(rootBounds_[k])) {
    std::vector<double> scratch(columns_ ? static_cast<std::size_t>(Subjects()) : 0);
    rootBounds_[k] = RootOfFrobenius(UpperSquares(Subjects(), [&](Eigen::Index j) { return UpperColumn(k, j, scratch.data()); }));
  }
  return rootBounds_[k];
}

void ViewStack::Facts(std::vector<char>& finite, std::vector<char>& nonzero) const {
  const auto m = static_cast<std::size_t>(Size());
  finite.assign(m, 1);
  nonzero.assign(m, 0);
  tbb::parallel_for(std::size_t{0}, m, [&](std::size_t k) {
    std::vector<double> scratch(columns_ ? static_cast<std::size_t>(Subjects()) : 0);
    bool f = true, z = false;
    ScanUpper(Subjects(), [&](Eigen::Index j) { return UpperColumn(static_cast<Eigen::Index>(k), j, scratch.data()); }, f, z);
    finite[k] = f;
    nonzero[k] = z;
  });
}

}  // namespace neuromkl::gram::detail
