// The contract every learner keeps (sklearn's estimator checks): run over the whole catalogue.
#include <gmock/gmock.h>

#include "../unit/learners/learner_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"

using namespace neuromkl;
using ::testing::HasSubstr;

namespace {

class Contract : public ::testing::TestWithParam<std::string> {
 protected:
  const learners::LearnerInfo& Info() const { return *learners::FindLearner(GetParam()); }
  learners::Task Task() const { return Info().classification ? learners::Task::Classification : learners::Task::Regression; }
  neuromkl::testing::MklProblem Problem() const { return neuromkl::testing::MakeMklProblem(24, 3, {0}, 1.0, 21, Task()); }
  std::unique_ptr<learners::Learner> Make() const { return learners::MakeLearner(GetParam(), {}); }
};

TEST_P(Contract, FitTwiceGivesIdenticalResults) {
  const auto p = Problem();
  const auto learner = Make();
  const auto a = learner->Fit(p.kernels, p.targets);
  const auto b = learner->Fit(p.kernels, p.targets);
  EXPECT_EQ(a.beta, b.beta);
  EXPECT_EQ(a.coef, b.coef);
  EXPECT_EQ(a.bias, b.bias);
  EXPECT_EQ(a.Decision(p.kernels), b.Decision(p.kernels));
  EXPECT_EQ(learner->Name(), GetParam());
}

TEST_P(Contract, ReportsWeightsCoefficientsAndFitInfo) {
  const auto p = Problem();
  const auto m = Make()->Fit(p.kernels, p.targets);
  EXPECT_EQ(m.beta.size(), 3);
  EXPECT_NEAR(m.beta.sum(), 1.0, 1e-12);
  EXPECT_TRUE((m.beta.array() >= 0).all());
  EXPECT_EQ(m.coef.size(), 24);
  EXPECT_GT(m.info.innerSolves, 0);
  EXPECT_GE(m.info.seconds, 0.0);
  EXPECT_TRUE(m.coef.allFinite() && std::isfinite(m.bias));
}

TEST_P(Contract, NonFiniteKernelIsAnError) {
  auto p = Problem();
  p.kernels[1](3, 4) = std::nan("");
  EXPECT_THAT([&] { Make()->Fit(p.kernels, p.targets); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr(GetParam()), HasSubstr("kernel 1 has NaN"))));
}

TEST_P(Contract, WrongShapesAreErrorsWithTheShapes) {
  auto p = Problem();
  p.kernels[2] = Eigen::MatrixXd::Identity(23, 23);
  EXPECT_THAT([&] { Make()->Fit(p.kernels, p.targets); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("23x23"), HasSubstr("expected 24x24"))));
  const auto good = Problem();
  const auto m = Make()->Fit(good.kernels, good.targets);
  learners::KernelList test = {Eigen::MatrixXd::Zero(5, 24), Eigen::MatrixXd::Zero(5, 24), Eigen::MatrixXd::Zero(5, 20)};
  EXPECT_THAT([&] { m.Decision(test); }, ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("5x20"), HasSubstr("expected 5x24"))));
  EXPECT_THAT([&] { m.Decision({test[0]}); }, ::testing::ThrowsMessage<InputError>(HasSubstr("got 1 test kernels")));
}

TEST_P(Contract, SingleClassTargetsAreAnError) {
  if (!Info().classification) GTEST_SKIP() << "regression only";
  auto p = Problem();
  p.targets.task = learners::Task::Classification;
  p.targets.y.setOnes();
  EXPECT_THAT([&] { Make()->Fit(p.kernels, p.targets); }, ::testing::ThrowsMessage<InputError>(HasSubstr("both classes")));
}

TEST_P(Contract, UnsupportedTaskIsAnErrorNotAGuess) {
  auto p = Problem();
  if (Info().classification && Info().regression) GTEST_SKIP() << "supports both tasks";
  p.targets.task = Info().classification ? learners::Task::Regression : learners::Task::Classification;
  EXPECT_THROW(Make()->Fit(p.kernels, p.targets), InputError);
}

TEST_P(Contract, ParametersAreValidatedInOnePlace) {
  const auto& spec = Info().params.front();
  EXPECT_THAT([&] { learners::MakeLearner(GetParam(), {{spec.name, -5.0}}); },
              ::testing::ThrowsMessage<InvalidParameter>(HasSubstr(GetParam() + "." + spec.name)));
  EXPECT_THAT([&] { learners::MakeLearner(GetParam(), {{"no_such_param", 1.0}}); },
              ::testing::ThrowsMessage<InvalidParameter>(HasSubstr("unknown parameter")));
}

TEST_P(Contract, MulticlassOnlyWhereDeclared) {
  const auto p = Problem();
  learners::Targets three{learners::Task::Multiclass, Eigen::VectorXd(24), 3};
  for (int i = 0; i < 24; ++i) three.y[i] = i % 3;
  if (!Info().multiclass) {
    EXPECT_THAT([&] { Make()->Fit(p.kernels, three); }, ::testing::ThrowsMessage<InputError>(HasSubstr("not a multiclass learner")));
    return;
  }
  const auto m = Make()->Fit(p.kernels, three);
  EXPECT_EQ(m.coefs.rows(), 24);
  EXPECT_EQ(m.coefs.cols(), 3);
  EXPECT_EQ(m.Scores(p.kernels).cols(), 3);
  EXPECT_NEAR(m.beta.sum(), 1.0, 1e-12);
}

TEST_P(Contract, MissingTargetsOnlyForSemiSupervisedLearners) {
  auto p = Problem();
  p.targets.y[5] = std::nan("");
  if (!Info().semiSupervised) {
    EXPECT_THAT([&] { Make()->Fit(p.kernels, p.targets); }, ::testing::ThrowsMessage<InputError>(HasSubstr("NaN")));
    return;
  }
  const auto m = Make()->Fit(p.kernels, p.targets);
  EXPECT_EQ(m.coef.size(), 24);  // unlabelled training subjects are part of the model
  EXPECT_TRUE(m.Decision(p.kernels).allFinite());
}

TEST_P(Contract, SubjectOrderDoesNotMatter) {
  // Decision values are a property of the subjects, not of their order (tolerance: iterative
  // solvers stop at slightly different points on a permuted problem).
  const auto p = Problem();
  Eigen::VectorXi perm(24);
  for (int i = 0; i < 24; ++i) perm[i] = (i * 7 + 3) % 24;
  const auto q = neuromkl::testing::Permute(p, perm);
  const auto a = Make()->Fit(p.kernels, p.targets).Decision(p.kernels);
  const auto b = Make()->Fit(q.kernels, q.targets).Decision(q.kernels);
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(b[i], a[perm[i]], 1e-3 * (1 + std::abs(a[perm[i]]))) << i;
}

std::vector<std::string> AllLearners() {
  std::vector<std::string> names;
  for (const auto& l : learners::LearnerCatalog()) names.push_back(l.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllLearners, Contract, ::testing::ValuesIn(AllLearners()),
                         [](const auto& info) { return info.param; });

}  // namespace
