#pragma once
// The feature form of one image source's linear kernels (ALGORITHMS.md section 17): the masked voxels, subject-major and
// grouped by region, so that kernel r is K_r = X_r X_r' without ever being formed. A fold's preprocessing (confound
// removal, centring with the training mean, cosine normalisation) is kept as vectors, never as a copy of the voxels.
// Residualising on covariates c_i with coefficient images G = P X_Q fitted on the fold's fit rows Q (docs/inputs.md,
// "Covariates") and centring with the training mean of the residuals both subtract from x_i a combination of a few
// voxel vectors: subject i's prepared region vector is z_ir = s_ir (x_ir - O_r b_i), with the offset images
// O = [m, G'] (m the training mean per voxel) and b_i = (1, c_i - c_bar) (c_bar the training mean of the covariates), and
// s_ir the inverse of the norm of x_ir - O_r b_i. That is what ResidualiseFold, CentreFold and NormaliseFold do to K_r.
// Every learner quantity is then a product with the rows of X.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/core/mapped_file.hpp"
#include "neuromkl/core/npy.hpp"

namespace neuromkl::gram {

class KernelStore;
using FeatureRows = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename Code>
using CodeRows = Eigen::Matrix<Code, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// How a FeatureMatrix holds its values: float32, or integer codes with one scale per row (value = scale_i x code),
/// which is exact for images that store integers (uint8 / int16 with scl_slope, scl_inter 0) at a quarter or half of
/// float32's memory.
enum class FeatureStorage { Float32, UInt8, Int16 };
/// "float32", "uint8", "int16".
const char* ToString(FeatureStorage storage);
/// Bytes per value.
std::size_t BytesPerValue(FeatureStorage storage);
/// The .npy element type that holds values of `storage` (the kernel cache's features.npy).
NpyType NpyTypeOf(FeatureStorage storage);

/// Values of a FeatureMatrix held in a file mapping instead of its matrices: `rows` x `cols` values, row-major from byte
/// `offset` of the file; row i of the matrix is row rowOf[i] of the file (rowOf empty: row i).
struct MappedRows {
  std::shared_ptr<MappedFile> file;
  std::uint64_t offset = 0;
  Eigen::Index rows = 0, cols = 0;
  std::vector<Eigen::Index> rowOf;
};

/// One source's voxel values, one row per subject; region r holds the columns regionStart[r] .. regionStart[r + 1] - 1.
/// The values are `values` (Float32) or rowScale[i] x codes (UInt8: `codes8`, Int16: `codes16`); the other matrices are
/// empty. Or they are in a file mapping (`mapped`, MapRows: the kernel cache's features.npy), and the three matrices are
/// empty. Every reader goes through WithRow, which hands it a row in its own type and the row's scale; writers go
/// through MutableRow.
struct FeatureMatrix {
  FeatureStorage storage = FeatureStorage::Float32;
  FeatureRows values;
  CodeRows<std::uint8_t> codes8;
  CodeRows<std::int16_t> codes16;
  MappedRows mapped;
  Eigen::VectorXd rowScale;  ///< compact storage: each row's scale
  std::vector<Eigen::Index> regionStart;  ///< Regions() + 1 offsets, increasing, from 0 to Voxels()

  /// An empty matrix of `subjects` x `voxels` in `storage` (rowScale 1), in memory.
  void Resize(FeatureStorage kind, Eigen::Index subjects, Eigen::Index voxels);
  /// The matrix's values are the `subjects` x `voxels` values of `kind` at byte `offset` of `file` (rowScale 1; the
  /// matrices are freed). std::invalid_argument when the file is shorter or the offset is not aligned for the type.
  void MapRows(FeatureStorage kind, std::shared_ptr<MappedFile> file, std::uint64_t offset, Eigen::Index subjects, Eigen::Index voxels);
  bool Mapped() const { return mapped.file != nullptr; }
  /// Row i's first value for writing, in the stored type (float*, std::uint8_t* or std::int16_t*, as void*): in memory
  /// or in a writable mapping (std::logic_error for a read-only one).
  void* MutableRow(Eigen::Index i);
  /// Every value, row after row with no gap, in the stored type: in memory, or a mapping whose rows are in the file's
  /// order; nullptr otherwise (a mapping whose rows KeepRows reordered).
  const void* ContiguousValues() const;
  Eigen::Index Subjects() const;
  Eigen::Index Voxels() const;
  std::size_t Regions() const { return regionStart.empty() ? 0 : regionStart.size() - 1; }
  Eigen::Index RegionSize(std::size_t r) const { return regionStart[r + 1] - regionStart[r]; }
  /// The values' bytes (subjects x voxels x BytesPerValue, plus the row scales).
  std::uint64_t Bytes() const;
  /// f(row, scale) with row i as a pointer to its first value in the stored type (const float*, const std::uint8_t* or
  /// const std::int16_t*) and its scale (1 for float32): value j of the row is scale x row[j].
  template <typename F>
  decltype(auto) WithRow(Eigen::Index i, F&& f) const {
    if (mapped.file != nullptr) {
      const Eigen::Index row = mapped.rowOf.empty() ? i : mapped.rowOf[static_cast<std::size_t>(i)];
      const unsigned char* first = mapped.file->Data() + mapped.offset + static_cast<std::uint64_t>(row) * static_cast<std::uint64_t>(mapped.cols) * BytesPerValue(storage);
      switch (storage) {
        case FeatureStorage::UInt8: return f(reinterpret_cast<const std::uint8_t*>(first), rowScale[i]);
        case FeatureStorage::Int16: return f(reinterpret_cast<const std::int16_t*>(first), rowScale[i]);
        case FeatureStorage::Float32: break;
      }
      return f(reinterpret_cast<const float*>(first), 1.0);
    }
    switch (storage) {
      case FeatureStorage::UInt8: return f(codes8.row(i).data(), rowScale[i]);
      case FeatureStorage::Int16: return f(codes16.row(i).data(), rowScale[i]);
      case FeatureStorage::Float32: break;
    }
    return f(values.row(i).data(), 1.0);
  }
  /// Columns [begin, begin + size) of row i in double.
  Eigen::RowVectorXd RowSegment(Eigen::Index i, Eigen::Index begin, Eigen::Index size) const;
  /// InputError when the offsets do not partition the columns, a value is not finite or a row scale is not finite.
  void Check() const;
  /// K_r = X_r X_r' in float64 (the kernel the feature form stands for: tests and the kernel path's agreement).
  Eigen::MatrixXd RegionKernel(std::size_t r) const;
  /// Keeps the rows `rows` (distinct, in that order: new row k is old row rows[k]) and frees the others, in place: one
  /// row of scratch, never a second matrix (a mapping: its rows are renumbered, the file is untouched). InputError for a
  /// row out of range or given twice.
  void KeepRows(const std::vector<int>& rows);
  /// Keeps the columns of the regions `keep` (increasing region indices), in place; the matrix's memory is reallocated
  /// (one copy) only when a region is left out. A writable mapping of a whole .npy file (from byte `mapped.offset`, its
  /// rows in the file's order) is compacted in the file, whose header then says the new shape; a read-only mapping's
  /// kept columns are copied into memory.
  void KeepRegions(const std::vector<std::size_t>& keep);
  /// A matrix of the regions `which` (any order), in the same storage.
  FeatureMatrix SelectRegions(const std::vector<std::size_t>& which) const;
};

/// A weight vector in the prepared space of a fold, region by region: u_r = v_r - O_r t_r (t_r: one coefficient per
/// offset image). Kept in this form so that adding a prepared row (u_r += c z_ir) costs one pass over the raw row x_ir:
/// v_r += c s_ir x_ir, t_r += c s_ir b_i, and O_r'v_r follows as vo_r += c s_ir (O_r'x_ir).
using RegionOffsets = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
struct PreparedVector {
  Eigen::VectorXd v;  ///< Voxels()
  RegionOffsets t;    ///< Regions() x offsets
  RegionOffsets vo;   ///< Regions() x offsets: O_r'v_r
};

struct Covariates;

/// One fold of a FeatureMatrix: training rows 0 .. l - 1, test rows l .. l + m - 1 (fold rows), prepared with the
/// training statistics only. Holds a reference to the matrix, which must outlive it. `covariates` (rows: the matrix's
/// rows; null: none) are removed with coefficients fitted on the training rows that may fit them (MakeFoldResidualiser:
/// its imputation, fit rows and pseudo-inverse), before centring and normalising, as the kernel stores do.
class FoldFeatures {
 public:
  FoldFeatures(const FeatureMatrix& x, std::vector<int> train, std::vector<int> test, bool centre, bool normalise,
               const Covariates* covariates = nullptr);

  Eigen::Index TrainingRows() const { return static_cast<Eigen::Index>(train_.size()); }
  Eigen::Index TestRows() const { return static_cast<Eigen::Index>(test_.size()); }
  std::size_t Regions() const { return x_.Regions(); }
  const FeatureMatrix& Matrix() const { return x_; }
  /// ||z_ir||^2 of fold row i (1, or 0 for a zero-norm vector, when normalised): the diagonal of the prepared K_r.
  double SquaredNorm(Eigen::Index row, std::size_t r) const;
  /// The training mean per voxel, m (zeros without centring).
  Eigen::VectorXd Mean() const { return offsets_.col(0); }
  /// s_ir of fold row i: 1 / ||x_ir - O_r b_i|| (0 for a zero-norm vector) when normalised, else 1.
  double Scale(Eigen::Index row, std::size_t r) const { return scale_(row, static_cast<Eigen::Index>(r)); }
  /// ||x_ir - O_r b_i||^2 of fold row i (residualised and centred), before normalising.
  double CentredSquaredNorm(Eigen::Index row, std::size_t r) const { return centred2_(row, static_cast<Eigen::Index>(r)); }

  PreparedVector Zero() const;
  /// z_ir'u_r for fold row `row`, for every region with weight[r] != 0 (the others: 0), written to `dots`.
  void RowDots(Eigen::Index row, const PreparedVector& u, const Eigen::VectorXd& weight, double* dots) const;
  /// u_r += c z_ir for the regions with weight[r] != 0.
  void AddRow(Eigen::Index row, double c, const Eigen::VectorXd& weight, PreparedVector& u) const;
  /// u_r = sum_i a_i z_ir over the training rows, for every region (a: TrainingRows()). Parallel over voxel blocks, so
  /// the sums are the same for any number of threads.
  PreparedVector TrainingTransposeTimes(const Eigen::VectorXd& a) const;
  /// f_i = sum_r weight_r z_ir'u_r for the training rows (test = false) or the test rows. Parallel over rows.
  Eigen::VectorXd Times(const PreparedVector& u, const Eigen::VectorXd& weight, bool test) const;
  /// ||u_r||^2 for every region.
  Eigen::VectorXd RegionSquaredNorms(const PreparedVector& u) const;
  /// u_r written out (Voxels()): the voxel weights of a fitted model up to its kernel weights.
  Eigen::VectorXd Dense(const PreparedVector& u) const;
  /// The prepared rows z_ir of fold rows `rows` in regions `regions`, written out side by side: rows x (the regions'
  /// voxels, in the order given). The dense block from which the Gram matrix of a few rows over a few regions is formed
  /// (the curvature of ENMKL's Newton steps). Parallel over rows.
  Eigen::MatrixXd PreparedRows(const std::vector<Eigen::Index>& rows, const std::vector<std::size_t>& regions) const;

 private:
  int Subject(Eigen::Index row) const;
  /// t_r += cs b_i and vo_r += cs O_r'x_ir: the offsets' part of adding cs x_ir to u_r.
  void AddOffsets(Eigen::Index row, Eigen::Index r, double cs, PreparedVector& u) const;
  /// step(r) for every region: in parallel over regions for rows of at least kParallelRowVoxels voxels.
  template <typename RegionStep>
  void ForEachRegion(const RegionStep& step) const;
  static constexpr Eigen::Index kParallelRowVoxels = 16384;

  /// O_r'x_ir of fold row i, and O_r'x_ir - O_r'O_r b_i: Offsets() values each.
  const double* RowOffsets(Eigen::Index row, Eigen::Index r) const { return rowOffsets_.data() + row * rowOffsets_.cols() + r * Offsets(); }
  const double* RowOffsetsLessGram(Eigen::Index row, Eigen::Index r) const { return rowOffsetsLessGram_.data() + row * rowOffsets_.cols() + r * Offsets(); }
  Eigen::Index Offsets() const { return offsets_.cols(); }

  const FeatureMatrix& x_;
  std::vector<int> train_, test_;
  Eigen::MatrixXd offsets_;     ///< Voxels() x q: O = [m, G'] (m zero without centring; no G without covariates)
  RegionOffsets coefficients_;  ///< fold rows x q: b_i
  RegionOffsets rowOffsets_;          ///< fold rows x (Regions() q): O_r'x_ir
  RegionOffsets rowOffsetsLessGram_;  ///< fold rows x (Regions() q): O_r'x_ir - O_r'O_r b_i
  Eigen::MatrixXd scale_;      ///< fold rows x regions: s_ir
  Eigen::MatrixXd centred2_;   ///< fold rows x regions: ||x_ir - O_r b_i||^2
  Eigen::MatrixXd norm2_;      ///< fold rows x regions: ||z_ir||^2
};

/// A study's kernels in their feature form (one image source's region kernels K_r = X_r X_r', never formed): a
/// KernelStore whose folds hold FoldFeatures (PreparedFold::Features) for the learners with a feature form
/// (learners::FitFeatures), the decisions of their test rows as products with the rows, and no kernel matrices. Fold
/// preprocessing: covariates, centring and cosine normalisation; source scales are refused (CheckPreprocessing).
/// `formFoldKernelsBelow` > 0: a fold whose region kernels take at most that many bytes (regions x rows^2 x 8) forms them
/// from the features instead (each row centred with the training mean, then the products in double) and is prepared and
/// fitted as a fold of kernels is (Features() null: the kernel learners), which at small n is far faster than the
/// learners on features; 0: never.
std::unique_ptr<KernelStore> MakeFeatureKernels(std::shared_ptr<const FeatureMatrix> features, std::uint64_t formFoldKernelsBelow = 0);

}  // namespace neuromkl::gram
