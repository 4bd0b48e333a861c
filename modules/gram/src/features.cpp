// The feature form of linear region kernels: fold preprocessing (covariates, centring, normalisation) as vectors and
// the products the learners read.
#include "neuromkl/gram/features.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <utility>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/gram/residualise.hpp"

namespace neuromkl::gram {

namespace {

constexpr Eigen::Index kChunk = 2048;  ///< integer codes are widened to float32 this many at a time

/// f(chunk, begin, m) over a row segment of integer codes, widened to float32 kChunk at a time: the codes are exact in
/// float32 (|code| < 2^24), so the float32 path's vectorised arithmetic serves them.
template <typename T, typename F>
void ForEachWidenedChunk(const T* x, Eigen::Index size, F&& f) {
  float chunk[kChunk];
  for (Eigen::Index begin = 0; begin < size; begin += kChunk) {
    const Eigen::Index m = std::min(kChunk, size - begin);
    for (Eigen::Index j = 0; j < m; ++j) chunk[j] = static_cast<float>(x[begin + j]);
    f(static_cast<const float*>(chunk), begin, m);
  }
}

/// x'v for a row segment in its stored type and a double vector, summed in double.
template <typename T>
double Dot(const T* x, const double* v, Eigen::Index size) {
  if constexpr (std::is_same_v<T, float>) {
    return Eigen::Map<const Eigen::VectorXf>(x, size).cast<double>().dot(Eigen::Map<const Eigen::VectorXd>(v, size));
  } else {
    double sum = 0;
    ForEachWidenedChunk(x, size, [&](const float* chunk, Eigen::Index begin, Eigen::Index m) { sum += Dot(chunk, v + begin, m); });
    return sum;
  }
}

/// v += c x for a row segment in its stored type.
template <typename T>
void Axpy(double c, const T* x, double* v, Eigen::Index size) {
  if constexpr (std::is_same_v<T, float>) {
    Eigen::Map<Eigen::VectorXd>(v, size) += c * Eigen::Map<const Eigen::VectorXf>(x, size).cast<double>();
  } else {
    ForEachWidenedChunk(x, size, [&](const float* chunk, Eigen::Index begin, Eigen::Index m) { Axpy(c, chunk, v + begin, m); });
  }
}

/// The row segment in double: scale x x.
template <typename T>
Eigen::VectorXd Widened(const T* x, double scale, Eigen::Index size) {
  return scale * Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(x, size).template cast<double>();
}

/// f(matrix) with the matrix that holds x's values (values, codes8 or codes16).
template <typename M, typename F>
void WithStored(M& x, F&& f) {
  switch (x.storage) {
    case FeatureStorage::UInt8: f(x.codes8); return;
    case FeatureStorage::Int16: f(x.codes16); return;
    case FeatureStorage::Float32: f(x.values); return;
  }
}

}  // namespace

const char* ToString(FeatureStorage storage) {
  switch (storage) {
    case FeatureStorage::UInt8: return "uint8";
    case FeatureStorage::Int16: return "int16";
    case FeatureStorage::Float32: break;
  }
  return "float32";
}

NpyType NpyTypeOf(FeatureStorage storage) {
  switch (storage) {
    case FeatureStorage::UInt8: return NpyType::UInt8;
    case FeatureStorage::Int16: return NpyType::Int16;
    case FeatureStorage::Float32: break;
  }
  return NpyType::Float32;
}

std::size_t BytesPerValue(FeatureStorage storage) {
  switch (storage) {
    case FeatureStorage::UInt8: return 1;
    case FeatureStorage::Int16: return 2;
    case FeatureStorage::Float32: break;
  }
  return 4;
}

void FeatureMatrix::Resize(FeatureStorage kind, Eigen::Index subjects, Eigen::Index voxels) {
  storage = kind;
  mapped = {};
  values.resize(0, 0);
  codes8.resize(0, 0);
  codes16.resize(0, 0);
  WithStored(*this, [&](auto& m) { m.resize(subjects, voxels); });
  rowScale = kind == FeatureStorage::Float32 ? Eigen::VectorXd() : Eigen::VectorXd::Ones(subjects);
}

void FeatureMatrix::MapRows(FeatureStorage kind, std::shared_ptr<MappedFile> file, std::uint64_t offset, Eigen::Index subjects, Eigen::Index voxels) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(subjects) * static_cast<std::uint64_t>(voxels) * BytesPerValue(kind);
  if (file == nullptr || subjects < 0 || voxels < 0 || offset % BytesPerValue(kind) != 0 || offset + bytes > file->Size())
    throw std::invalid_argument("FeatureMatrix::MapRows: " + std::to_string(subjects) + " x " + std::to_string(voxels) + " values at byte " + std::to_string(offset) +
                                " do not fit the mapping of " + (file ? file->Path() + " (" + std::to_string(file->Size()) + " bytes)" : std::string("no file")));
  Resize(kind, 0, 0);
  mapped = {std::move(file), offset, subjects, voxels, {}};
  rowScale = kind == FeatureStorage::Float32 ? Eigen::VectorXd() : Eigen::VectorXd::Ones(subjects);
}

void* FeatureMatrix::MutableRow(Eigen::Index i) {
  if (Mapped()) {
    const Eigen::Index row = mapped.rowOf.empty() ? i : mapped.rowOf[static_cast<std::size_t>(i)];
    return mapped.file->MutableData() + mapped.offset + static_cast<std::uint64_t>(row) * static_cast<std::uint64_t>(mapped.cols) * BytesPerValue(storage);
  }
  void* row = nullptr;
  WithStored(*this, [&](auto& m) { row = m.row(i).data(); });
  return row;
}

const void* FeatureMatrix::ContiguousValues() const {
  if (Mapped()) return mapped.rowOf.empty() ? mapped.file->Data() + mapped.offset : nullptr;
  const void* first = nullptr;
  WithStored(*this, [&](const auto& m) { first = m.data(); });
  return first;
}

Eigen::Index FeatureMatrix::Subjects() const {
  if (Mapped()) return mapped.rowOf.empty() ? mapped.rows : static_cast<Eigen::Index>(mapped.rowOf.size());
  Eigen::Index rows = 0;
  WithStored(*this, [&](const auto& m) { rows = m.rows(); });
  return rows;
}

Eigen::Index FeatureMatrix::Voxels() const {
  if (Mapped()) return mapped.cols;
  Eigen::Index cols = 0;
  WithStored(*this, [&](const auto& m) { cols = m.cols(); });
  return cols;
}

std::uint64_t FeatureMatrix::Bytes() const {
  return static_cast<std::uint64_t>(Subjects()) * static_cast<std::uint64_t>(Voxels()) * BytesPerValue(storage) +
         static_cast<std::uint64_t>(rowScale.size()) * sizeof(double);
}

Eigen::RowVectorXd FeatureMatrix::RowSegment(Eigen::Index i, Eigen::Index begin, Eigen::Index size) const {
  return WithRow(i, [&](const auto* row, double scale) -> Eigen::RowVectorXd { return Widened(row + begin, scale, size).transpose(); });
}

void FeatureMatrix::Check() const {
  if (regionStart.size() < 2 || regionStart.front() != 0 || regionStart.back() != Voxels())
    throw InputError("features:RegionOffsets", "feature matrix", "region offsets must run from 0 to the " + std::to_string(Voxels()) + " voxel columns; found " +
                     std::to_string(regionStart.size()) + " offsets" +
                     (regionStart.empty() ? std::string() : " from " + std::to_string(regionStart.front()) + " to " + std::to_string(regionStart.back())));
  for (std::size_t r = 0; r + 1 < regionStart.size(); ++r)
    if (regionStart[r + 1] < regionStart[r])
      throw InputError("features:RegionOffsets", "feature matrix", "region offsets must not decrease; region " + std::to_string(r) + " runs from column " +
                       std::to_string(regionStart[r]) + " to " + std::to_string(regionStart[r + 1]));
  if (storage != FeatureStorage::Float32) {
    if (rowScale.size() != Subjects())
      throw InputError("features:RowScales", "feature matrix", "expected one scale per row (" + std::to_string(Subjects()) + "); found " + std::to_string(rowScale.size()));
    for (Eigen::Index i = 0; i < Subjects(); ++i)
      if (!std::isfinite(rowScale[i])) throw InputError("features:NotFinite", "feature matrix row " + std::to_string(i), "expected a finite row scale; found " + std::to_string(rowScale[i]));
    return;  // integer codes are finite
  }
  for (Eigen::Index i = 0; i < Subjects(); ++i) {
    // (Float32 here: the reinterpret_cast only names the type the row already has.)
    const bool finite = WithRow(i, [&](const auto* row, double) { return Eigen::Map<const Eigen::VectorXf>(reinterpret_cast<const float*>(row), Voxels()).allFinite(); });
    if (!finite) throw InputError("features:NotFinite", "feature matrix row " + std::to_string(i), "expected finite voxel values; found one that is not");
  }
}

Eigen::MatrixXd FeatureMatrix::RegionKernel(std::size_t r) const {
  Eigen::MatrixXd xr(Subjects(), RegionSize(r));
  for (Eigen::Index i = 0; i < Subjects(); ++i) xr.row(i) = RowSegment(i, regionStart[r], RegionSize(r));
  Eigen::MatrixXd k(Subjects(), Subjects());
  k.noalias() = xr * xr.transpose();
  return k;
}

void FeatureMatrix::KeepRows(const std::vector<int>& rows) {
  const Eigen::Index n = Subjects(), m = static_cast<Eigen::Index>(rows.size());
  // The gather as a permutation of all n rows (the rows not kept after them), applied cycle by cycle.
  std::vector<Eigen::Index> from;
  from.reserve(static_cast<std::size_t>(n));
  std::vector<char> taken(static_cast<std::size_t>(n), 0);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const int r = rows[k];
    if (r < 0 || r >= n)
      throw InputError("features:RowOutOfRange", "feature matrix", "row " + std::to_string(r) + " (entry " + std::to_string(k) + ") is not one of its " + std::to_string(n) + " rows");
    if (taken[static_cast<std::size_t>(r)]) throw InputError("features:RowTwice", "feature matrix", "row " + std::to_string(r) + " is kept twice");
    taken[static_cast<std::size_t>(r)] = 1;
    from.push_back(r);
  }
  if (rowScale.size() > 0) {
    Eigen::VectorXd kept(m);
    for (Eigen::Index k = 0; k < m; ++k) kept[k] = rowScale[rows[static_cast<std::size_t>(k)]];
    rowScale = std::move(kept);
  }
  if (Mapped()) {  // the file's rows stay where they are: row k of the matrix is now the file's row of old row rows[k]
    std::vector<Eigen::Index> rowOf(rows.size());
    for (std::size_t k = 0; k < rows.size(); ++k) rowOf[k] = mapped.rowOf.empty() ? rows[k] : mapped.rowOf[static_cast<std::size_t>(rows[k])];
    mapped.rowOf = std::move(rowOf);
    return;
  }
  for (Eigen::Index r = 0; r < n; ++r)
    if (!taken[static_cast<std::size_t>(r)]) from.push_back(r);
  WithStored(*this, [&](auto& stored) {
    std::vector<char> placed(static_cast<std::size_t>(n), 0);
    Eigen::Matrix<typename std::decay_t<decltype(stored)>::Scalar, 1, Eigen::Dynamic> scratch;
    for (Eigen::Index start = 0; start < m; ++start) {
      if (placed[static_cast<std::size_t>(start)] || from[static_cast<std::size_t>(start)] == start) continue;
      scratch = stored.row(start);
      Eigen::Index k = start;
      for (;;) {
        placed[static_cast<std::size_t>(k)] = 1;
        const Eigen::Index source = from[static_cast<std::size_t>(k)];
        if (source == start) {
          stored.row(k) = scratch;
          break;
        }
        stored.row(k) = stored.row(source);
        k = source;
      }
    }
    // Fewer rows of a row-major matrix: Eigen shrinks its storage with realloc, the kept rows being its beginning (no
    // second matrix).
    stored.conservativeResize(m, stored.cols());
  });
}

void FeatureMatrix::KeepRegions(const std::vector<std::size_t>& keep) {
  if (keep.size() == Regions()) return;
  std::vector<Eigen::Index> start = {0};
  for (const std::size_t r : keep) start.push_back(start.back() + RegionSize(r));
  const Eigen::Index width = start.back();
  if (Mapped() && !(mapped.file->Writable() && mapped.rowOf.empty())) {
    *this = SelectRegions(keep);  // a read-only file is not changed: the kept columns in memory
    return;
  }
  if (Mapped()) {
    // Row by row, region by region, each piece moves to a lower address (the new row is no wider and starts no later),
    // and every piece not yet moved lies above the one being moved: in place, in one pass over the file.
    const std::size_t b = BytesPerValue(storage);
    const std::string prefix = NpyRowsPrefix(mapped.rows, width, NpyTypeOf(storage), static_cast<std::size_t>(mapped.offset));
    if (prefix.size() != mapped.offset) throw std::logic_error("FeatureMatrix::KeepRegions: a writable mapping must be a whole .npy file from its values' offset");
    unsigned char* first = mapped.file->MutableData() + mapped.offset;
    for (Eigen::Index i = 0; i < mapped.rows; ++i)
      for (std::size_t k = 0; k < keep.size(); ++k)
        std::memmove(first + (static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(width) + static_cast<std::uint64_t>(start[k])) * b,
                     first + (static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(mapped.cols) + static_cast<std::uint64_t>(regionStart[keep[k]])) * b,
                     static_cast<std::size_t>(RegionSize(keep[k])) * b);
    mapped.file->Truncate(mapped.offset + static_cast<std::uint64_t>(mapped.rows) * static_cast<std::uint64_t>(width) * b);
    std::memcpy(mapped.file->MutableData(), prefix.data(), prefix.size());
    mapped.cols = width;
    regionStart = std::move(start);
    return;
  }
  WithStored(*this, [&](auto& stored) {
    for (Eigen::Index i = 0; i < stored.rows(); ++i) {
      auto* row = stored.row(i).data();
      for (std::size_t k = 0; k < keep.size(); ++k)  // start[k] <= the old start: a move to the left, or none
        if (start[k] < regionStart[keep[k]]) std::copy(row + regionStart[keep[k]], row + regionStart[keep[k] + 1], row + start[k]);
    }
    // Eigen's resize of a row-major matrix to fewer columns copies it once (a peak of the old and the new matrix).
    stored.conservativeResize(stored.rows(), width);
  });
  regionStart = std::move(start);
}

FeatureMatrix FeatureMatrix::SelectRegions(const std::vector<std::size_t>& which) const {
  FeatureMatrix part;
  Eigen::Index voxels = 0;
  part.regionStart = {0};
  for (const std::size_t r : which) {
    if (r >= Regions()) throw InputError("gram:SubsetOutOfRange", "kernels", "kernel " + std::to_string(r) + " of " + std::to_string(Regions()));
    voxels += RegionSize(r);
    part.regionStart.push_back(voxels);
  }
  part.Resize(storage, Subjects(), voxels);
  part.rowScale = rowScale;
  const std::size_t b = BytesPerValue(storage);
  tbb::parallel_for(Eigen::Index{0}, Subjects(), [&](Eigen::Index i) {
    auto* to = static_cast<unsigned char*>(part.MutableRow(i));
    WithRow(i, [&](const auto* from, double) {
      for (std::size_t k = 0; k < which.size(); ++k)
        std::memcpy(to + static_cast<std::size_t>(part.regionStart[k]) * b, from + regionStart[which[k]], static_cast<std::size_t>(RegionSize(which[k])) * b);
    });
  });
  return part;
}

FoldFeatures::FoldFeatures(const FeatureMatrix& x, std::vector<int> train, std::vector<int> test, bool centre, bool normalise, const Covariates* covariates)
    : x_(x), train_(std::move(train)), test_(std::move(test)) {
  const auto regions = static_cast<Eigen::Index>(x_.Regions());
  const Eigen::Index rows = TrainingRows() + TestRows();
  if (train_.empty()) throw InputError("features:EmptyFold", "fold", "a fold needs at least one training subject");
  for (const int s : train_)
    if (s < 0 || s >= x_.Subjects()) throw InputError("features:SubjectOutOfRange", "fold", "training subject " + std::to_string(s) + " is not a row of the feature matrix");
  for (const int s : test_)
    if (s < 0 || s >= x_.Subjects()) throw InputError("features:SubjectOutOfRange", "fold", "test subject " + std::to_string(s) + " is not a row of the feature matrix");
  // The offset coefficients b_i = (1, c_i - c_bar) (c_bar = 0 without centring) and, with covariates, the fit rows and
  // P = (C_Q'C_Q)^+ C_Q' whose rows weigh them into the coefficient images G = P X_Q.
  std::optional<FoldResidualiser> residualiser;
  Eigen::Index p = 0;
  if (covariates) {
    if (covariates->design.rows() != x_.Subjects())
      throw InputError("features:CovariateRows", "fold", "expected one covariate row per row of the feature matrix (" + std::to_string(x_.Subjects()) + "); found " +
                       std::to_string(covariates->design.rows()));
    const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(train_.data(), TrainingRows());
    const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(test_.data(), TestRows());
    residualiser = MakeFoldResidualiser(*covariates, tr, te, "fold");
    p = residualiser->trainC.cols();
  }
  coefficients_ = RegionOffsets::Ones(rows, 1 + p);
  if (residualiser) {
    coefficients_.block(0, 1, TrainingRows(), p) = residualiser->trainC;
    coefficients_.block(TrainingRows(), 1, TestRows(), p) = residualiser->testC;
    // The residuals' training mean is m - c_bar G: centring then subtracts G'(c_i - c_bar) with m.
    if (centre) coefficients_.rightCols(p).rowwise() -= residualiser->trainC.colwise().mean();
  }
  const Eigen::Index q = 1 + p;
  offsets_ = Eigen::MatrixXd::Zero(x_.Voxels(), q);
  tbb::parallel_for(std::size_t{0}, x_.Regions(), [&](std::size_t r) {
    const Eigen::Index begin = x_.regionStart[r], size = x_.RegionSize(r);
    if (centre) {
      for (const int s : train_) x_.WithRow(s, [&](const auto* row, double scale) { Axpy(scale, row + begin, offsets_.col(0).data() + begin, size); });
      offsets_.col(0).segment(begin, size) /= static_cast<double>(train_.size());
    }
    if (!residualiser) return;
    for (std::size_t k = 0; k < residualiser->fitPositions.size(); ++k)
      x_.WithRow(train_[static_cast<std::size_t>(residualiser->fitPositions[k])], [&](const auto* row, double scale) {
        for (Eigen::Index c = 0; c < p; ++c)
          Axpy(scale * residualiser->P(c, static_cast<Eigen::Index>(k)), row + begin, offsets_.col(1 + c).data() + begin, size);
      });
  });
  std::vector<Eigen::MatrixXd> offsetGram(x_.Regions());  // O_r'O_r
  for (std::size_t r = 0; r < x_.Regions(); ++r) {
    const auto o = offsets_.middleRows(x_.regionStart[r], x_.RegionSize(r));
    offsetGram[r] = o.transpose() * o;
  }
  rowOffsets_.resize(rows, regions * q);
  rowOffsetsLessGram_.resize(rows, regions * q);
  Eigen::MatrixXd centred2(rows, regions);
  tbb::parallel_for(Eigen::Index{0}, rows, [&](Eigen::Index i) {
    x_.WithRow(Subject(i), [&](const auto* row, double scale) {
      const Eigen::VectorXd b = coefficients_.row(i).transpose();
      for (Eigen::Index r = 0; r < regions; ++r) {
        const Eigen::Index begin = x_.regionStart[static_cast<std::size_t>(r)], size = x_.RegionSize(static_cast<std::size_t>(r));
        const Eigen::VectorXd xr = Widened(row + begin, scale, size);
        const auto o = offsets_.middleRows(begin, size);
        const Eigen::VectorXd xo = o.transpose() * xr;
        Eigen::Map<Eigen::VectorXd>(rowOffsets_.row(i).data() + r * q, q) = xo;
        Eigen::Map<Eigen::VectorXd>(rowOffsetsLessGram_.row(i).data() + r * q, q) = xo - offsetGram[static_cast<std::size_t>(r)] * b;
        centred2(i, r) = (xr - o * b).squaredNorm();  // directly: no cancellation
      }
    });
  });
  scale_ = Eigen::MatrixXd::Ones(rows, regions);
  norm2_ = centred2;
  centred2_ = centred2;
  if (normalise) {
    // The rule of NormaliseFold: 1 / the centred norm, 0 for a vector whose self-similarity is below 1e-12 of the fold's largest.
    for (Eigen::Index r = 0; r < regions; ++r) {
      Eigen::VectorXd invTrain, invTest;
      InverseNorms(centred2.col(r).head(TrainingRows()), centred2.col(r).tail(TestRows()), invTrain, invTest);
      scale_.col(r) << invTrain, invTest;
      norm2_.col(r) = (centred2.col(r).array() * scale_.col(r).array().square()).matrix();
    }
  }
}

int FoldFeatures::Subject(Eigen::Index row) const {
  return row < TrainingRows() ? train_[static_cast<std::size_t>(row)] : test_[static_cast<std::size_t>(row - TrainingRows())];
}

void FoldFeatures::AddOffsets(Eigen::Index row, Eigen::Index r, double cs, PreparedVector& u) const {
  const Eigen::Index q = Offsets();
  const double* xo = RowOffsets(row, r);
  const double* b = coefficients_.data() + row * q;
  double* t = u.t.data() + r * q;
  double* vo = u.vo.data() + r * q;
  for (Eigen::Index a = 0; a < q; ++a) {
    t[a] += cs * b[a];
    vo[a] += cs * xo[a];
  }
}

double FoldFeatures::SquaredNorm(Eigen::Index row, std::size_t r) const { return norm2_(row, static_cast<Eigen::Index>(r)); }

PreparedVector FoldFeatures::Zero() const {
  const auto regions = static_cast<Eigen::Index>(Regions());
  return {Eigen::VectorXd::Zero(x_.Voxels()), RegionOffsets::Zero(regions, Offsets()), RegionOffsets::Zero(regions, Offsets())};
}

template <typename RegionStep>
void FoldFeatures::ForEachRegion(const RegionStep& step) const {
  // The coordinate steps of the solvers are sequential, so one row's regions are what two cores can share; each region's
  // sum is its own (the same value for any number of threads). Short rows are not worth the hand-over.
  if (x_.Voxels() < kParallelRowVoxels) {
    for (std::size_t r = 0; r < Regions(); ++r) step(r);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, Regions()), [&](const tbb::blocked_range<std::size_t>& range) {
    for (std::size_t r = range.begin(); r < range.end(); ++r) step(r);
  });
}

void FoldFeatures::RowDots(Eigen::Index row, const PreparedVector& u, const Eigen::VectorXd& weight, double* dots) const {
  x_.WithRow(Subject(row), [&](const auto* x, double stored) {
    ForEachRegion([&](std::size_t r) {
      const auto j = static_cast<Eigen::Index>(r);
      if (weight[j] == 0) {
        dots[r] = 0;
        return;
      }
      const Eigen::Index begin = x_.regionStart[r];
      // z'u = s (x - O b)'(v - O t) = s ((x'v - (O'x - O'O b)'t) - b'(O'v))
      const double xv = stored * Dot(x + begin, u.v.data() + begin, x_.RegionSize(r));
      const Eigen::Index q = Offsets();
      const double* h = RowOffsetsLessGram(row, j);
      const double* t = u.t.data() + j * q;
      const double* vo = u.vo.data() + j * q;
      const double* b = coefficients_.data() + row * q;
      double ht = 0, bvo = 0;
      for (Eigen::Index a = 0; a < q; ++a) {
        ht += h[a] * t[a];
        bvo += b[a] * vo[a];
      }
      dots[r] = Scale(row, r) * ((xv - ht) - bvo);
    });
  });
}

void FoldFeatures::AddRow(Eigen::Index row, double c, const Eigen::VectorXd& weight, PreparedVector& u) const {
  x_.WithRow(Subject(row), [&](const auto* x, double stored) {
    ForEachRegion([&](std::size_t r) {
      const auto j = static_cast<Eigen::Index>(r);
      const double cs = c * Scale(row, r);
      if (weight[j] == 0 || cs == 0) return;
      const Eigen::Index begin = x_.regionStart[r];
      Axpy(cs * stored, x + begin, u.v.data() + begin, x_.RegionSize(r));
      AddOffsets(row, j, cs, u);
    });
  });
}

PreparedVector FoldFeatures::TrainingTransposeTimes(const Eigen::VectorXd& a) const {
  PreparedVector u = Zero();
  tbb::parallel_for(std::size_t{0}, Regions(), [&](std::size_t r) {
    const auto j = static_cast<Eigen::Index>(r);
    const Eigen::Index begin = x_.regionStart[r], size = x_.RegionSize(r);
    for (Eigen::Index i = 0; i < TrainingRows(); ++i) {
      const double cs = a[i] * Scale(i, r);
      if (cs == 0) continue;
      x_.WithRow(Subject(i), [&](const auto* row, double stored) { Axpy(cs * stored, row + begin, u.v.data() + begin, size); });
      AddOffsets(i, j, cs, u);
    }
  });
  return u;
}

Eigen::VectorXd FoldFeatures::Times(const PreparedVector& u, const Eigen::VectorXd& weight, bool test) const {
  const Eigen::Index first = test ? TrainingRows() : 0, count = test ? TestRows() : TrainingRows();
  Eigen::VectorXd f(count);
  tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, count, 16), [&](const tbb::blocked_range<Eigen::Index>& block) {
    std::vector<double> dots(Regions());
    for (Eigen::Index i = block.begin(); i < block.end(); ++i) {
      RowDots(first + i, u, weight, dots.data());
      double sum = 0;
      for (std::size_t r = 0; r < Regions(); ++r) sum += weight[static_cast<Eigen::Index>(r)] * dots[r];
      f[i] = sum;
    }
  });
  return f;
}

Eigen::VectorXd FoldFeatures::RegionSquaredNorms(const PreparedVector& u) const {
  Eigen::VectorXd norms(static_cast<Eigen::Index>(Regions()));
  for (std::size_t r = 0; r < Regions(); ++r) {
    const auto j = static_cast<Eigen::Index>(r);
    const Eigen::Index begin = x_.regionStart[r], size = x_.RegionSize(r);
    // ||v - O t||^2 summed entry by entry (expanding it would cancel where u is small against v).
    norms[j] = (u.v.segment(begin, size) - offsets_.middleRows(begin, size) * u.t.row(j).transpose()).squaredNorm();
  }
  return norms;
}

Eigen::MatrixXd FoldFeatures::PreparedRows(const std::vector<Eigen::Index>& rows, const std::vector<std::size_t>& regions) const {
  std::vector<Eigen::Index> column(regions.size() + 1, 0);
  for (std::size_t k = 0; k < regions.size(); ++k) column[k + 1] = column[k] + x_.RegionSize(regions[k]);
  Eigen::MatrixXd out(static_cast<Eigen::Index>(rows.size()), column.back());
  const Eigen::Index q = Offsets();
  tbb::parallel_for(std::size_t{0}, rows.size(), [&](std::size_t a) {
    const Eigen::Index row = rows[a];
    const Eigen::Map<const Eigen::VectorXd> b(coefficients_.data() + row * q, q);
    x_.WithRow(Subject(row), [&](const auto* x, double stored) {
      for (std::size_t k = 0; k < regions.size(); ++k) {
        // z_ir = s_ir (x_ir - O_r b_i)
        const std::size_t r = regions[k];
        const Eigen::Index begin = x_.regionStart[r], size = x_.RegionSize(r);
        const double s = Scale(row, r);
        const Eigen::VectorXd offset = offsets_.middleRows(begin, size) * b;
        for (Eigen::Index v = 0; v < size; ++v)
          out(static_cast<Eigen::Index>(a), column[k] + v) = s * (stored * static_cast<double>(x[begin + v]) - offset[v]);
      }
    });
  });
  return out;
}

Eigen::VectorXd FoldFeatures::Dense(const PreparedVector& u) const {
  Eigen::VectorXd w = u.v;
  for (std::size_t r = 0; r < Regions(); ++r)
    w.segment(x_.regionStart[r], x_.RegionSize(r)) -= offsets_.middleRows(x_.regionStart[r], x_.RegionSize(r)) * u.t.row(static_cast<Eigen::Index>(r)).transpose();
  return w;
}

}  // namespace neuromkl::gram
