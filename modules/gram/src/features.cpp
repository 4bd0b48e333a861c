// The feature form of linear region kernels: fold preprocessing as vectors and the products the learners read.
#include "neuromkl/gram/features.hpp"

#include <cmath>
#include <string>
#include <utility>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/preprocess.hpp"

namespace neuromkl::gram {

namespace {

/// x'v for a float row segment and a double vector: widened entry by entry, summed in double.
double Dot(const float* x, const double* v, Eigen::Index size) {
  return Eigen::Map<const Eigen::VectorXf>(x, size).cast<double>().dot(Eigen::Map<const Eigen::VectorXd>(v, size));
}

void Axpy(double c, const float* x, double* v, Eigen::Index size) {
  Eigen::Map<Eigen::VectorXd>(v, size) += c * Eigen::Map<const Eigen::VectorXf>(x, size).cast<double>();
}

}  // namespace

void FeatureMatrix::Check() const {
  if (regionStart.size() < 2 || regionStart.front() != 0 || regionStart.back() != Voxels())
    throw InputError("features:RegionOffsets", "feature matrix", "region offsets must run from 0 to the " + std::to_string(Voxels()) + " voxel columns; found " +
                     std::to_string(regionStart.size()) + " offsets" +
                     (regionStart.empty() ? std::string() : " from " + std::to_string(regionStart.front()) + " to " + std::to_string(regionStart.back())));
  for (std::size_t r = 0; r + 1 < regionStart.size(); ++r)
    if (regionStart[r + 1] < regionStart[r])
      throw InputError("features:RegionOffsets", "feature matrix", "region offsets must not decrease; region " + std::to_string(r) + " runs from column " +
                       std::to_string(regionStart[r]) + " to " + std::to_string(regionStart[r + 1]));
  for (Eigen::Index i = 0; i < Subjects(); ++i)
    if (!values.row(i).allFinite()) throw InputError("features:NotFinite", "feature matrix row " + std::to_string(i), "expected finite voxel values; found one that is not");
}

Eigen::MatrixXd FeatureMatrix::RegionKernel(std::size_t r) const {
  const Eigen::MatrixXd xr = values.middleCols(regionStart[r], RegionSize(r)).cast<double>();
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
  for (Eigen::Index r = 0; r < n; ++r)
    if (!taken[static_cast<std::size_t>(r)]) from.push_back(r);
  std::vector<char> placed(static_cast<std::size_t>(n), 0);
  Eigen::RowVectorXf scratch;
  for (Eigen::Index start = 0; start < m; ++start) {
    if (placed[static_cast<std::size_t>(start)] || from[static_cast<std::size_t>(start)] == start) continue;
    scratch = values.row(start);
    Eigen::Index k = start;
    for (;;) {
      placed[static_cast<std::size_t>(k)] = 1;
      const Eigen::Index source = from[static_cast<std::size_t>(k)];
      if (source == start) {
        values.row(k) = scratch;
        break;
      }
      values.row(k) = values.row(source);
      k = source;
    }
  }
  // Fewer rows of a row-major matrix: Eigen shrinks its storage with realloc, the kept rows being its beginning (no
  // second matrix).
  values.conservativeResize(m, Voxels());
}

FoldFeatures::FoldFeatures(const FeatureMatrix& x, std::vector<int> train, std::vector<int> test, bool centre, bool normalise)
    : x_(x), train_(std::move(train)), test_(std::move(test)) {
  const auto regions = static_cast<Eigen::Index>(x_.Regions());
  const Eigen::Index rows = TrainingRows() + TestRows();
  if (train_.empty()) throw InputError("features:EmptyFold", "fold", "a fold needs at least one training subject");
  for (const int s : train_)
    if (s < 0 || s >= x_.Subjects()) throw InputError("features:SubjectOutOfRange", "fold", "training subject " + std::to_string(s) + " is not a row of the feature matrix");
  for (const int s : test_)
    if (s < 0 || s >= x_.Subjects()) throw InputError("features:SubjectOutOfRange", "fold", "test subject " + std::to_string(s) + " is not a row of the feature matrix");
  mean_ = Eigen::VectorXd::Zero(x_.Voxels());
  if (centre) {
    tbb::parallel_for(std::size_t{0}, x_.Regions(), [&](std::size_t r) {
      const Eigen::Index begin = x_.regionStart[r], size = x_.RegionSize(r);
      for (const int s : train_) Axpy(1.0, x_.values.row(s).data() + begin, mean_.data() + begin, size);
      mean_.segment(begin, size) /= static_cast<double>(train_.size());
    });
  }
  meanNorm2_.resize(regions);
  for (Eigen::Index r = 0; r < regions; ++r) meanNorm2_[r] = mean_.segment(x_.regionStart[r], x_.RegionSize(r)).squaredNorm();
  rowMean_.resize(rows, regions);
  Eigen::MatrixXd centred2(rows, regions);
  tbb::parallel_for(Eigen::Index{0}, rows, [&](Eigen::Index i) {
    const float* row = x_.values.row(Subject(i)).data();
    for (Eigen::Index r = 0; r < regions; ++r) {
      const Eigen::Index begin = x_.regionStart[r], size = x_.RegionSize(r);
      const auto xr = Eigen::Map<const Eigen::VectorXf>(row + begin, size).cast<double>();
      rowMean_(i, r) = xr.dot(mean_.segment(begin, size));
      centred2(i, r) = (xr - mean_.segment(begin, size)).squaredNorm();  // directly: no cancellation
    }
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

double FoldFeatures::SquaredNorm(Eigen::Index row, std::size_t r) const { return norm2_(row, static_cast<Eigen::Index>(r)); }

PreparedVector FoldFeatures::Zero() const {
  const auto regions = static_cast<Eigen::Index>(Regions());
  return {Eigen::VectorXd::Zero(x_.Voxels()), Eigen::VectorXd::Zero(regions), Eigen::VectorXd::Zero(regions)};
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
  const float* x = x_.values.row(Subject(row)).data();
  ForEachRegion([&](std::size_t r) {
    const auto j = static_cast<Eigen::Index>(r);
    if (weight[j] == 0) {
      dots[r] = 0;
      return;
    }
    const Eigen::Index begin = x_.regionStart[r];
    // z'u = s (x - m)'(v - t m) = s (x'v - t x'm - m'v + t m'm)
    const double xv = Dot(x + begin, u.v.data() + begin, x_.RegionSize(r));
    dots[r] = Scale(row, r) * ((xv - u.t[j] * rowMean_(row, j)) - (u.vm[j] - u.t[j] * meanNorm2_[j]));
  });
}

void FoldFeatures::AddRow(Eigen::Index row, double c, const Eigen::VectorXd& weight, PreparedVector& u) const {
  const float* x = x_.values.row(Subject(row)).data();
  ForEachRegion([&](std::size_t r) {
    const auto j = static_cast<Eigen::Index>(r);
    const double cs = c * Scale(row, r);
    if (weight[j] == 0 || cs == 0) return;
    const Eigen::Index begin = x_.regionStart[r];
    Axpy(cs, x + begin, u.v.data() + begin, x_.RegionSize(r));
    u.t[j] += cs;
    u.vm[j] += cs * rowMean_(row, j);
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
      Axpy(cs, x_.values.row(Subject(i)).data() + begin, u.v.data() + begin, size);
      u.t[j] += cs;
      u.vm[j] += cs * rowMean_(i, j);
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
    // ||v - t m||^2 summed entry by entry (expanding it would cancel where u is small against v).
    norms[j] = (u.v.segment(begin, size) - u.t[j] * mean_.segment(begin, size)).squaredNorm();
  }
  return norms;
}

Eigen::VectorXd FoldFeatures::Dense(const PreparedVector& u) const {
  Eigen::VectorXd w = u.v;
  for (std::size_t r = 0; r < Regions(); ++r)
    w.segment(x_.regionStart[r], x_.RegionSize(r)) -= u.t[static_cast<Eigen::Index>(r)] * mean_.segment(x_.regionStart[r], x_.RegionSize(r));
  return w;
}

}  // namespace neuromkl::gram
