// Tabular features inside the folds (tabular.hpp).
#include "neuromkl/gram/tabular.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"

namespace neuromkl::gram {

namespace {

/// (x + offset)^degree of every entry, a whole degree (study_check) as products: within rounding of pow, and far faster.
template <typename Matrix>
Matrix Polynomial(const FeatureKernel& f, Matrix G) {
  G.array() += f.offset;
  const Matrix base = G;
  for (int d = 1; d < static_cast<int>(f.value); ++d) G.array() *= base.array();
  return G;
}

/// k from the linear kernel G and the squared norms of the rows on each side.
Eigen::MatrixXd FromLinear(const FeatureKernel& f, Eigen::MatrixXd G, const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  using Type = FeatureKernel::Type;
  if (f.type == Type::Linear) return G;
  if (f.type == Type::Polynomial) return Polynomial(f, std::move(G));
  // |a - b|^2 = |a|^2 + |b|^2 - 2 a'b, clipped at 0 (rounding); (a_i + b_j) is the same sum on either side of the diagonal.
  for (Eigen::Index j = 0; j < G.cols(); ++j)
    for (Eigen::Index i = 0; i < G.rows(); ++i) G(i, j) = std::exp(-std::max(0.0, (a[i] + b[j]) - 2 * G(i, j)) / (2 * f.value * f.value));
  return G;
}

}  // namespace

Eigen::MatrixXd FeatureKernel::LinearGram(const Eigen::Ref<const Eigen::MatrixXd>& X) {
  Eigen::MatrixXd G = Eigen::MatrixXd::Zero(X.rows(), X.rows());
  G.selfadjointView<Eigen::Lower>().rankUpdate(X);
  G.triangularView<Eigen::StrictlyUpper>() = G.transpose();
  return G;
}

Eigen::MatrixXd FeatureKernel::OfLinear(Eigen::MatrixXd linear) const {
  const Eigen::VectorXd d = linear.diagonal();
  return FromLinear(*this, std::move(linear), d, d);
}

Eigen::MatrixXd FeatureKernel::Gram(const Eigen::Ref<const Eigen::MatrixXd>& X) const { return OfLinear(LinearGram(X)); }

Eigen::MatrixXd FeatureKernel::Between(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::MatrixXd>& B) const {
  return FromLinear(*this, A * B.transpose(), A.rowwise().squaredNorm(), B.rowwise().squaredNorm());
}

Eigen::VectorXd FeatureKernel::Self(const Eigen::Ref<const Eigen::MatrixXd>& A) const {
  const Eigen::VectorXd d = A.rowwise().squaredNorm();
  if (type == Type::Linear) return d;
  if (type == Type::Polynomial) return Polynomial(*this, d);
  return Eigen::VectorXd::Ones(A.rows());
}

std::string FeatureKernel::Name() const {
  return type == Type::Linear ? "linear" : type == Type::Polynomial ? "polynomial" : "gaussian";
}

FeatureKernel::Type FeatureKernel::FromName(const std::string& name) {
  if (name == "linear") return Type::Linear;
  if (name == "polynomial") return Type::Polynomial;
  if (name == "gaussian") return Type::Gaussian;
  throw std::invalid_argument("unknown kernel function \"" + name + "\"");
}

double Median(std::vector<double>& values) {
  if (values.empty()) throw std::invalid_argument("Median: no value");
  const std::size_t h = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(h), values.end());
  const double upper = values[h];
  if (values.size() % 2) return upper;
  return 0.5 * (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(h)) + upper);
}

TabularFit FitTabular(const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::Ref<const Eigen::VectorXi>& train, const TabularSteps& steps,
                      const std::vector<std::string>& columns, const std::string& where, bool everyColumn) {
  const Eigen::Index p = X.cols();
  TabularFit fit{Eigen::RowVectorXd::Constant(p, std::numeric_limits<double>::quiet_NaN()), Eigen::RowVectorXd::Zero(p), Eigen::RowVectorXd::Ones(p)};
  auto name = [&](Eigen::Index c) { return static_cast<std::size_t>(c) < columns.size() ? columns[static_cast<std::size_t>(c)] : std::to_string(c); };
  std::vector<double> values;
  for (Eigen::Index c = 0; c < p; ++c) {
    const bool missing = X.col(c).hasNaN();
    if (missing && !steps.impute)
      throw InputError("tabular:Missing", where, fmt::format("column \"{}\" has a missing value; set \"impute\": \"median\" to fill it inside the folds", name(c)));
    values.clear();
    for (Eigen::Index i = 0; i < train.size(); ++i)
      if (const double v = X(train[i], c); !std::isnan(v)) values.push_back(v);
    if ((missing || everyColumn) && steps.impute) {
      if (values.empty())
        throw InputError("tabular:NothingToImpute", where,
                         fmt::format("none of the {} training subjects has a value in column \"{}\", so its missing values cannot be imputed", train.size(),
                                     name(c)));
      fit.fill[c] = Median(values);
    }
    if (!steps.standardise) continue;
    // The statistics of the training column as the kernels see it: its missing values filled.
    const double filled = std::isnan(fit.fill[c]) ? 0.0 : fit.fill[c];
    const auto l = static_cast<double>(train.size());
    double sum = 0;
    for (Eigen::Index i = 0; i < train.size(); ++i) sum += std::isnan(X(train[i], c)) ? filled : X(train[i], c);
    const double mean = sum / l;
    double squares = 0;
    for (Eigen::Index i = 0; i < train.size(); ++i) {
      const double d = (std::isnan(X(train[i], c)) ? filled : X(train[i], c)) - mean;
      squares += d * d;
    }
    const double sd = std::sqrt(squares / std::max(1.0, l - 1));
    fit.mean[c] = mean;
    fit.sd[c] = sd > 0 ? sd : 1.0;
  }
  return fit;
}

Eigen::MatrixXd ApplyTabular(const TabularFit& fit, const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::Ref<const Eigen::VectorXi>& rows) {
  Eigen::MatrixXd out(rows.size(), X.cols());
  for (Eigen::Index c = 0; c < X.cols(); ++c)
    for (Eigen::Index i = 0; i < rows.size(); ++i) {
      const double v = X(rows[i], c);
      out(i, c) = ((std::isnan(v) ? fit.fill[c] : v) - fit.mean[c]) / fit.sd[c];
    }
  return out;
}

}  // namespace neuromkl::gram
