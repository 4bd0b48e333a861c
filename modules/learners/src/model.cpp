// A fitted model's decision values and class scores (learner.hpp), from test blocks held or prepared one at a time.
#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {

std::string_view ToString(FitStatus s) {
  switch (s) {
    case FitStatus::Converged: return "converged";
    case FitStatus::MaxIterReached: return "max_iterations_reached";
    case FitStatus::Stalled: return "stalled";
  }
  return "unknown";
}

namespace {
/// Checks test-vs-train blocks against a model with `cols` training columns; returns the test count.
Eigen::Index CheckTestKernels(const KernelList& testVsTrain, const Eigen::VectorXd& beta, Eigen::Index cols) {
  if (testVsTrain.size() != static_cast<std::size_t>(beta.size()))
    throw InputError("learners:KernelCount", "decision",
                     fmt::format("got {} test kernels, the model was trained on {}", testVsTrain.size(), beta.size()));
  const Eigen::Index m = testVsTrain.empty() ? 0 : testVsTrain[0].rows();
  for (std::size_t j = 0; j < testVsTrain.size(); ++j) {
    const auto& Kt = testVsTrain[j];
    if (Kt.rows() != m || Kt.cols() != cols)
      throw InputError("learners:TestShape", "decision",
                       fmt::format("test kernel {} is {}x{}, expected {}x{} (= test subjects x training subjects)", j, Kt.rows(),
                                   Kt.cols(), m, cols));
  }
  return m;
}
}  // namespace

namespace {
/// Block j of `test`, its shape checked against the model's training subjects.
const Eigen::MatrixXd& CheckedBlock(const gram::TestBlocks& test, Eigen::Index j, Eigen::Index cols) {
  const Eigen::MatrixXd& Kt = test.block(j);
  if (Kt.rows() != test.rows || Kt.cols() != cols)
    throw InputError("learners:TestShape", "decision",
                     fmt::format("test kernel {} is {}x{}, expected {}x{} (= test subjects x training subjects)", j, Kt.rows(), Kt.cols(), test.rows, cols));
  return Kt;
}

void CheckBlockCount(const gram::TestBlocks& test, const Eigen::VectorXd& beta) {
  if (test.count != beta.size())
    throw InputError("learners:KernelCount", "decision", fmt::format("got {} test kernels, the model was trained on {}", test.count, beta.size()));
}
}  // namespace

Eigen::VectorXd Model::Decision(const KernelList& testVsTrain) const {
  if (Multiclass())
    throw InputError("learners:MulticlassModel", "decision", "a multiclass model has one score per class: use Scores, not Decision");
  CheckTestKernels(testVsTrain, beta, coef.size());
  return Decision(gram::HeldBlocks(testVsTrain));
}

Eigen::MatrixXd Model::Scores(const KernelList& testVsTrain) const {
  if (!Multiclass()) return Decision(testVsTrain);
  CheckTestKernels(testVsTrain, beta, coefs.rows());
  return Scores(gram::HeldBlocks(testVsTrain));
}


namespace {
/// TestProduct of every block in `which` (the kernels a decision uses): computed here from the blocks, or where
/// they are held (TestBlocks::products). Either way each product is formed whole before it is weighted and added, so
/// a decision's value does not depend on where its blocks are.
std::vector<Eigen::MatrixXd> BlockProducts(const gram::TestBlocks& test, const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) {
  if (test.products) {
    std::vector<Eigen::MatrixXd> P = test.products(which, C, form);
    for (std::size_t i = 0; i < P.size(); ++i)
      if (P[i].rows() != test.rows || P[i].cols() != C.cols())
        throw InputError("learners:TestShape", "decision",
                         fmt::format("test kernel {} gave {}x{} products, expected {}x{}", which[i], P[i].rows(), P[i].cols(), test.rows, C.cols()));
    return P;
  }
  std::vector<Eigen::MatrixXd> P;
  for (const Eigen::Index j : which) P.push_back(gram::TestProduct(CheckedBlock(test, j, C.rows()), C, form));
  return P;
}
}  // namespace

Eigen::VectorXd Model::Decision(const gram::TestBlocks& test) const {
  if (Multiclass())
    throw InputError("learners:MulticlassModel", "decision", "a multiclass model has one score per class: use Scores, not Decision");
  CheckBlockCount(test, beta);
  Eigen::VectorXd f = Eigen::VectorXd::Constant(test.rows, bias);
  std::vector<Eigen::Index> used;
  for (Eigen::Index j = 0; j < test.count; ++j)
    if (beta[j] != 0.0) used.push_back(j);
  if (used.empty()) return f;
  const auto P = BlockProducts(test, used, Eigen::MatrixXd(coef), gram::kProductVector);
  for (std::size_t i = 0; i < used.size(); ++i) f.noalias() += beta[used[i]] * P[i].col(0);  // in kernel order
  return f;
}

Eigen::MatrixXd Model::DecisionParts(const gram::TestBlocks& test) const {
  if (Multiclass())
    throw InputError("learners:MulticlassModel", "decision parts", "a multiclass model has one score per class: its parts are not one decision's");
  CheckBlockCount(test, beta);
  Eigen::MatrixXd parts = Eigen::MatrixXd::Zero(test.rows, test.count);
  std::vector<Eigen::Index> used;
  for (Eigen::Index j = 0; j < test.count; ++j)
    if (beta[j] != 0.0) used.push_back(j);
  if (used.empty()) return parts;
  const auto P = BlockProducts(test, used, Eigen::MatrixXd(coef), gram::kProductVector);
  for (std::size_t i = 0; i < used.size(); ++i) parts.col(used[i]) = beta[used[i]] * P[i].col(0);
  return parts;
}

Eigen::MatrixXd Model::Scores(const gram::TestBlocks& test) const {
  if (!Multiclass()) return Decision(test);
  CheckBlockCount(test, beta);
  Eigen::MatrixXd S = biases.transpose().replicate(test.rows, 1);
  std::vector<Eigen::Index> used;
  if (betas.cols() > 0) {  // per-class kernel weights; each class's column adds its kernels in kernel order
    for (Eigen::Index j = 0; j < test.count; ++j)
      if (!(betas.row(j).array() == 0.0).all()) used.push_back(j);
    if (used.empty()) return S;
    const auto P = BlockProducts(test, used, coefs, gram::kProductColumns);
    for (std::size_t i = 0; i < used.size(); ++i)
      for (Eigen::Index c = 0; c < coefs.cols(); ++c)
        if (const double b = betas(used[i], c); b != 0.0) S.col(c).noalias() += b * P[i].col(c);
    return S;
  }
  for (Eigen::Index j = 0; j < test.count; ++j)
    if (beta[j] != 0.0) used.push_back(j);
  if (used.empty()) return S;
  const auto P = BlockProducts(test, used, coefs, gram::kProductMatrix);
  for (std::size_t i = 0; i < used.size(); ++i) S.noalias() += beta[used[i]] * P[i];
  return S;
}

}  // namespace neuromkl::learners
