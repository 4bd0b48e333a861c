#pragma once
// The training kernels of one fit as a learner of kernel weights reads them, wherever they are held: the role of
// LIBSVM's QMatrix (Chang & Lin 2011), whose solver never asks which kernel it was given. A KernelStack answers the
// operations every multiple-kernel iteration needs (Rakotomamonjy et al. 2008; Mourao-Miranda et al.): the combined
// kernel sum_j w_j K_j, the quadratics a'K_j a, the products K_j v and a bound on each kernel's spectrum. Its backends:
// a packed copy of the upper triangles (small training sets), a view that reads matrices or prepared fold columns in
// place (float64 or float32), and kernels held by several owners (owners.hpp), where only results travel.
//
// Every backend computes with one arithmetic per operation, so a fit gives the same model bit for bit whichever
// backend holds kernels of the same values (a sum over several owners aside: their partial sums are added in owner
// order).
#include <functional>
#include <memory>
#include <vector>

#include <Eigen/Core>

namespace neuromkl::gram {

using KernelList = std::vector<Eigen::MatrixXd>;

/// Training subjects from which a stack reads its kernels in place; below it the kernels' upper triangles are packed
/// into one store (n(n + 1) / 2 per kernel: small enough to stay in cache across the iterations of a fit).
inline constexpr Eigen::Index kPackedStackBelow = 1024;

/// a'K_j a for one coefficient matrix A (summed over its columns: the classes of a one-vs-rest solution), kernel by
/// kernel: what screened MKL iterations evaluate for the kernels they need (ScreenedNorms in the learners).
class QuadraticForm {
 public:
  virtual ~QuadraticForm() = default;
  /// a'K_k a, clipped at 0 (the kernels are PSD up to rounding).
  virtual double Value(Eigen::Index k) = 0;
  /// Value of each kernel in `which`, in that order, computed side by side or in one request: the same values.
  virtual Eigen::VectorXd Values(const std::vector<Eigen::Index>& which) = 0;
  /// How many kernels make Values worth calling rather than Value one at a time: 0 = never (a packed stack shares
  /// nothing between kernels), 1 = always (one request to the owners instead of one each), 2 = from two (a view
  /// evaluates them on several threads).
  virtual std::size_t Together() const = 0;
};

class KernelStack {
 public:
  KernelStack(Eigen::Index count, Eigen::Index subjects) : count_(count), n_(subjects) {}
  virtual ~KernelStack() = default;
  KernelStack(const KernelStack&) = delete;
  KernelStack& operator=(const KernelStack&) = delete;
  Eigen::Index Size() const { return count_; }  ///< kernels
  Eigen::Index Subjects() const { return n_; }   ///< each kernel is Subjects() x Subjects()
  /// sum_j w_j K_j over the kernels with w_j != 0 only (the active set: its cost is proportional to the number of
  /// non-zero weights), into `out`, whose storage is reused when it is already n x n.
  virtual void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const = 0;
  Eigen::MatrixXd Combine(const Eigen::VectorXd& weights) const;
  /// a'K_j a of every kernel (clipped at 0), for one vector: on a packed stack one product over all of them.
  virtual Eigen::VectorXd Quadratics(const Eigen::VectorXd& a) const = 0;
  /// The quadratics of A kernel by kernel (QuadraticForm). `A` is copied: the form does not refer to it.
  virtual std::unique_ptr<QuadraticForm> Form(const Eigen::MatrixXd& A) const = 0;
  /// The columns K_j v for j in `which`.
  virtual Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const = 0;
  /// sqrt of an upper bound on the largest eigenvalue of kernel k (its Frobenius norm), for the screening bound
  /// sqrt(a'K_k a) <= sqrt(b'K_k b) + sqrt(lambda_max(K_k)) ||a - b||; computed on first use.
  virtual double RootSpectralBound(Eigen::Index k) const = 0;
  /// Per kernel, whether its upper triangle is finite and whether it is not identically zero (one pass over each).
  virtual void Facts(std::vector<char>& finite, std::vector<char>& nonzero) const = 0;
  /// A stack of matrices (MakeStack): the first kernel with a NaN or infinite entry anywhere in its matrix, or -1.
  /// std::logic_error for stacks of columns (their kernels are checked through TrainingKernels::FirstNonFinite).
  virtual Eigen::Index FirstNonFinite() const;

 private:
  Eigen::Index count_, n_;
};

/// The training kernels of a fit given in place of matrices (FitOptions in the learners): a fold's prepared kernels
/// read from the study's kernels, float32 copies of them, or kernels held by several owners.
class TrainingKernels {
 public:
  virtual ~TrainingKernels() = default;
  virtual Eigen::Index Count() const = 0;  ///< kernels
  virtual Eigen::Index Size() const = 0;   ///< subjects (each kernel is Size() x Size())
  /// The stack a fit reads them through.
  virtual std::unique_ptr<KernelStack> Stack() const = 0;
  /// The first kernel with a NaN or infinite entry in its upper triangle, or -1 (the learners' input check).
  virtual Eigen::Index FirstNonFinite() const = 0;
  /// The kernels that are not identically zero.
  virtual std::vector<Eigen::Index> NonZero() const = 0;
};

/// Training kernels that can be read entry by entry: column by column of their upper triangles (the kernels are
/// symmetric). Their stack packs them below kPackedStackBelow subjects, else reads them through a scratch column.
class KernelColumns : public TrainingKernels {
 public:
  /// Rows 0..j of column j of kernel k, the values the kernel matrix would hold: j + 1 values into `out`.
  virtual void UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const = 0;
  std::unique_ptr<KernelStack> Stack() const override;
  Eigen::Index FirstNonFinite() const override;
  /// A non-zero diagonal entry settles it; only a kernel with a zero diagonal is scanned in full.
  std::vector<Eigen::Index> NonZero() const override;
};

/// Prepared training kernels held in float32 (the compact store's precision, compact.hpp): each value is widened to
/// double as it is read, so a fit on them is the fit on their values as float64 matrices, bit for bit. From
/// kPackedStackBelow subjects the stack's combination and quadratics read the float32 columns in place, moving half the
/// bytes. `kernels` must outlive it.
class Float32Columns final : public KernelColumns {
 public:
  explicit Float32Columns(const std::vector<Eigen::MatrixXf>& kernels) : kernels_(kernels) {}
  explicit Float32Columns(std::vector<Eigen::MatrixXf>&&) = delete;  // it keeps a reference
  Eigen::Index Count() const override { return static_cast<Eigen::Index>(kernels_.size()); }
  Eigen::Index Size() const override { return kernels_.empty() ? 0 : kernels_[0].rows(); }
  void UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const override;
  std::unique_ptr<KernelStack> Stack() const override;

 private:
  const std::vector<Eigen::MatrixXf>& kernels_;
};

/// The stack of training kernels given as matrices (each n x n; their upper triangles are read): packed below
/// kPackedStackBelow subjects (one pass that also checks their values and sums their spectral bounds), else a view.
/// `kernels` must outlive it.
std::unique_ptr<KernelStack> MakeStack(const KernelList& kernels);

/// The indices of the rows of A with a non-zero entry (an SVM's support vectors): the columns a quadratic reads.
std::vector<Eigen::Index> NonZeroRows(const Eigen::MatrixXd& A);

// ---- test blocks: the test-vs-train kernels a model's decisions read ----

/// How a decision multiplies a test block by coefficients: a vector (one column), a matrix (every class at once), or
/// column by column (per-class kernel weights).
enum TestProductForm : int { kProductVector = 0, kProductMatrix = 1, kProductColumns = 2 };
/// block x C in `form` (m x C.cols()): the one arithmetic of every decision, wherever the block is held.
Eigen::MatrixXd TestProduct(const Eigen::MatrixXd& block, const Eigen::MatrixXd& C, int form);

/// Test-vs-train blocks handed over one at a time instead of held together (a fold prepares a block when a model
/// needs it). `block(j)` gives block j (rows x training subjects); the reference stays valid until the next call. Only
/// the blocks a model uses are asked for.
struct TestBlocks {
  Eigen::Index count = 0;  ///< kernels
  Eigen::Index rows = 0;   ///< test subjects
  std::function<const Eigen::MatrixXd&(Eigen::Index)> block;
  /// Optional, for blocks held elsewhere (kernels held by several owners): the products block(j) x C for each j in
  /// `which` in `form` (TestProduct), computed where the blocks are, so that only the products travel.
  std::function<std::vector<Eigen::MatrixXd>(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form)> products;
};
/// Blocks that are held in a list (`testVsTrain` must outlive the result).
TestBlocks HeldBlocks(const KernelList& testVsTrain);

}  // namespace neuromkl::gram
