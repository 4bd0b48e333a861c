#pragma once
// The stacks of kernels held in this process (stack.hpp): packed upper triangles, or a view that reads matrices or
// columns in place. The arithmetic they share is here, so that every backend gives the same values.
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "neuromkl/gram/stack.hpp"

namespace neuromkl::gram::detail {

/// out[i] += sum_k w[k] sources[k][i], added one source after the other (the order and rounding of one
/// `out += w_k K_k` per kernel, bit for bit) but four sources per pass over `out`: a quarter of the loads and stores of
/// the accumulator. Float32 sources are widened as they are read: the sum of their values as doubles, bit for bit.
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

/// sqrt of ||K||_F from the sum of K's squares: ||K||_F >= lambda_max for a symmetric K; the factor covers the rounding
/// of the sums (KernelStack::RootSpectralBound).
inline double RootOfFrobenius(double squares) { return std::sqrt(std::sqrt(squares) * (1.0 + 1e-10)); }

/// ||K||_F^2 from the upper triangle, read column by column through upperColumn(j) (rows 0..j).
template <typename UpperColumn>
double UpperSquares(Eigen::Index n, const UpperColumn& upperColumn) {
  double frob = 0;
  for (Eigen::Index j = 0; j < n; ++j) {
    const double* column = upperColumn(j);
    frob += 2.0 * Eigen::Map<const Eigen::VectorXd>(column, j).squaredNorm() + column[j] * column[j];
  }
  return frob;
}

/// K v from the upper triangle, column by column (whatever holds the kernel: one arithmetic for all).
template <typename UpperColumn>
Eigen::VectorXd UpperProduct(Eigen::Index n, const UpperColumn& upperColumn, const Eigen::VectorXd& v) {
  Eigen::VectorXd y = Eigen::VectorXd::Zero(n);
  for (Eigen::Index j = 0; j < n; ++j) {
    const double* column = upperColumn(j);
    const Eigen::Map<const Eigen::VectorXd> upper(column, j);
    y[j] += upper.dot(v.head(j)) + column[j] * v[j];
    if (v[j] != 0.0) y.head(j) += v[j] * upper;
  }
  return y;
}

/// Whether the upper triangle is finite (x * 0 is 0 for a finite x, NaN otherwise) and has a non-zero entry.
template <typename UpperColumn>
void ScanUpper(Eigen::Index n, const UpperColumn& upperColumn, bool& finite, bool& nonzero) {
  double probe = 0;
  bool any = false;
  for (Eigen::Index j = 0; j < n; ++j) {
    const Eigen::Map<const Eigen::VectorXd> column(upperColumn(j), j + 1);
    probe += (column.array() * 0.0).sum();
    any = any || (column.array() != 0.0).any();
  }
  finite = !std::isnan(probe);
  nonzero = any;
}

/// Mirrors the upper triangle of K into its lower one, in 64 x 64 blocks (strip by strip; the strips in parallel when
/// `parallel`: each writes its own entries).
void MirrorUpper(Eigen::MatrixXd& K, bool parallel);

/// The upper triangles packed into one store (n(n + 1) / 2 per kernel): below kPackedStackBelow subjects.
class PackedStack final : public KernelStack {
 public:
  /// From matrices: one pass over each matrix packs its upper part, checks the whole matrix for NaN and infinities and
  /// sums the squares of the bound.
  explicit PackedStack(const KernelList& kernels);
  explicit PackedStack(const KernelColumns& columns);
  /// From columns, with beforeKernel(k) run on the thread that packs kernel k just before it does (the work that reads
  /// the same kernel, done while its values are in cache).
  PackedStack(const KernelColumns& columns, const std::function<void(Eigen::Index)>& beforeKernel);
  void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const override;
  Eigen::VectorXd Quadratics(const Eigen::VectorXd& a) const override;
  std::unique_ptr<QuadraticForm> Form(const Eigen::MatrixXd& A) const override;
  Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const override;
  double RootSpectralBound(Eigen::Index k) const override;
  void Facts(std::vector<char>& finite, std::vector<char>& nonzero) const override;
  Eigen::Index FirstNonFinite() const override;
  /// a'K a = sum_i K_ii a_i^2 + 2 sum_{i<j} K_ij a_i a_j: the packed outer product of A's columns (summed), so that a
  /// kernel's quadratic is one dot product with its packed column.
  Eigen::VectorXd PackedOuter(const Eigen::MatrixXd& A) const;
  double PackedQuadratic(Eigen::Index k, const Eigen::VectorXd& packedOuter) const;

 private:
  const double* UpperColumn(Eigen::Index k, Eigen::Index j) const { return packed_.col(k).data() + j * (j + 1) / 2; }
  Eigen::MatrixXd packed_;               ///< n(n+1)/2 x kernels
  mutable Eigen::VectorXd rootBounds_;  ///< NaN until computed
  std::vector<char> finite_;             ///< whether each kernel is finite (from matrices: the whole matrix; from columns: the packed values)
};

/// Kernels read in place: matrices (column j's upper part is contiguous in a column-major matrix), float32 columns
/// (their combination and quadratics read the float32 values, widened as read), or any columns through a scratch
/// column. Copies nothing; the kernels must outlive it. Operations over several kernels run on several threads, each
/// kernel's value computed as one thread would.
class ViewStack final : public KernelStack {
 public:
  explicit ViewStack(const KernelList& kernels);
  /// `float32`: the float32 kernels `columns` widens (Float32Columns), read in place by Combine and the quadratics.
  explicit ViewStack(const KernelColumns& columns, const std::vector<Eigen::MatrixXf>* float32 = nullptr);
  void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const override;
  Eigen::VectorXd Quadratics(const Eigen::VectorXd& a) const override;
  std::unique_ptr<QuadraticForm> Form(const Eigen::MatrixXd& A) const override;
  Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const override;
  double RootSpectralBound(Eigen::Index k) const override;
  void Facts(std::vector<char>& finite, std::vector<char>& nonzero) const override;
  Eigen::Index FirstNonFinite() const override;
  /// a'K_k a summed over the columns of A, reading only the columns of the triangle where A has a non-zero row
  /// (`nonzero`: NonZeroRows(A)).
  double Quadratic(Eigen::Index k, const Eigen::MatrixXd& A, const std::vector<Eigen::Index>& nonzero) const;

 private:
  /// Rows 0..j of column j of kernel k: in place in the matrices, or (columns) written to `scratch` (n values).
  const double* UpperColumn(Eigen::Index k, Eigen::Index j, double* scratch) const;
  const KernelList* kernels_ = nullptr;                    ///< the matrices, or
  const KernelColumns* columns_ = nullptr;                 ///< their columns
  const std::vector<Eigen::MatrixXf>* float32_ = nullptr;  ///< the float32 kernels of `columns_`, read in place
  mutable Eigen::VectorXd rootBounds_;                     ///< NaN until computed
};

}  // namespace neuromkl::gram::detail
