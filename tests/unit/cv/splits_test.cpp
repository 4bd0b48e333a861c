#include <set>

#include <gmock/gmock.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/cv/splits.hpp"

using namespace neuromkl;
using cv::Scheme;
using ::testing::HasSubstr;

namespace {

Eigen::VectorXd Labels(int pos, int neg) {
  Eigen::VectorXd y(pos + neg);
  for (int i = 0; i < pos + neg; ++i) y[i] = i < pos ? 1.0 : -1.0;
  return y;
}

void ExpectPartition(const std::vector<cv::Fold>& folds, int n, int repeats = 1) {
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (const auto& f : folds) {
    std::set<int> test(f.test.begin(), f.test.end()), train(f.train.begin(), f.train.end());
    EXPECT_EQ(test.size() + train.size(), static_cast<std::size_t>(n));
    for (int t : f.test) {
      EXPECT_FALSE(train.count(t));
      ++seen[static_cast<std::size_t>(t)];
    }
  }
  for (int c : seen) EXPECT_EQ(c, repeats);  // every subject tested exactly once per repetition
}

TEST(Splits, KFoldIsASeededPartitionOfNearlyEqualFolds) {
  const auto y = Labels(11, 12);
  const auto a = cv::MakeFolds({Scheme::KFold, 5, 1}, learners::Task::Classification, y, {}, {}, 7, "t");
  ASSERT_EQ(a.size(), 5u);
  ExpectPartition(a, 23);
  for (const auto& f : a) EXPECT_TRUE(f.test.size() == 4 || f.test.size() == 5);
  const auto b = cv::MakeFolds({Scheme::KFold, 5, 1}, learners::Task::Classification, y, {}, {}, 7, "t");
  const auto c = cv::MakeFolds({Scheme::KFold, 5, 1}, learners::Task::Classification, y, {}, {}, 8, "t");
  EXPECT_EQ(a[0].test, b[0].test);
  EXPECT_NE(a[0].test, c[0].test);
}

TEST(Splits, StratifiedKeepsClassProportions) {
  const auto y = Labels(10, 30);
  const auto folds = cv::MakeFolds({Scheme::StratifiedKFold, 5, 1}, learners::Task::Classification, y, {}, {}, 1, "t");
  ExpectPartition(folds, 40);
  for (const auto& f : folds) {
    int pos = 0;
    for (int t : f.test) pos += y[t] > 0;
    EXPECT_EQ(pos, 2);
    EXPECT_EQ(f.test.size(), 8u);
  }
  EXPECT_THAT([&] { cv::MakeFolds({Scheme::StratifiedKFold, 5, 1}, learners::Task::Classification, Labels(3, 20), {}, {}, 1, "study.json /cv/outer"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("/cv/outer"), HasSubstr("positive has 3 subjects, fewer than k = 5"))));
}

TEST(Splits, StratifiedRegressionSpansTheTargetRange) {
  Eigen::VectorXd y(20);
  for (int i = 0; i < 20; ++i) y[i] = (i * 7) % 20;  // a permutation of 0..19
  const auto folds = cv::MakeFolds({Scheme::StratifiedKFold, 4, 1}, learners::Task::Regression, y, {}, {}, 3, "t");
  ExpectPartition(folds, 20);
  for (const auto& f : folds) {
    std::set<int> blocks;
    for (int t : f.test) blocks.insert(static_cast<int>(y[t]) / 4);  // sorted blocks of k = 4
    EXPECT_EQ(blocks.size(), 5u) << "one subject from each quantile block";
  }
}

TEST(Splits, RepeatedKFoldAndLeaveOneOut) {
  const auto y = Labels(6, 6);
  const auto rep = cv::MakeFolds({Scheme::RepeatedKFold, 3, 4}, learners::Task::Classification, y, {}, {}, 5, "t");
  ASSERT_EQ(rep.size(), 12u);
  ExpectPartition(rep, 12, 4);
  EXPECT_EQ(rep.back().repeat, 3);
  EXPECT_NE(rep[0].test, rep[3].test);  // repetitions differ
  const auto loo = cv::MakeFolds({Scheme::LeaveOneOut, 5, 1}, learners::Task::Classification, y, {}, {}, 5, "t");
  ASSERT_EQ(loo.size(), 12u);
  ExpectPartition(loo, 12);
}

TEST(Splits, GroupsNeverStraddleTrainAndTest) {
  const auto y = Labels(12, 12);
  std::vector<std::string> site;
  for (int i = 0; i < 24; ++i) site.push_back("site" + std::to_string(i % 6));
  for (Scheme s : {Scheme::LeaveOneGroupOut, Scheme::GroupKFold}) {
    const auto folds = cv::MakeFolds({s, 3, 1}, learners::Task::Classification, y, site, {}, 2, "t");
    ExpectPartition(folds, 24);
    EXPECT_EQ(folds.size(), s == Scheme::LeaveOneGroupOut ? 6u : 3u);
    for (const auto& f : folds) {
      std::set<std::string> testSites, trainSites;
      for (int t : f.test) testSites.insert(site[static_cast<std::size_t>(t)]);
      for (int t : f.train) trainSites.insert(site[static_cast<std::size_t>(t)]);
      for (const auto& g : testSites) EXPECT_FALSE(trainSites.count(g)) << g;
    }
  }
  EXPECT_THAT([&] { cv::MakeFolds({Scheme::LeaveOneGroupOut, 3, 1}, learners::Task::Classification, y, std::vector<std::string>(24, "A"), {}, 2, "t"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("single value (\"A\")")));
  EXPECT_THAT([&] { cv::MakeFolds({Scheme::GroupKFold, 10, 1}, learners::Task::Classification, y, site, {}, 2, "t"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("k = 10 folds need at least 10 groups, found 6")));
}

TEST(Splits, CustomFoldsFollowTheColumn) {
  const auto y = Labels(3, 3);
  const std::vector<std::string> fold = {"b", "a", "b", "a", "c", "c"};
  const auto folds = cv::MakeFolds({Scheme::Custom, 5, 1}, learners::Task::Classification, y, {}, fold, 0, "t");
  ASSERT_EQ(folds.size(), 3u);
  EXPECT_EQ(folds[0].test, (std::vector<int>{1, 3}));  // "a" sorts first
  EXPECT_EQ(folds[2].test, (std::vector<int>{4, 5}));
}

TEST(Splits, PermutationsStayWithinGroups) {
  std::vector<std::string> g = {"x", "y", "x", "y", "x", "y", "x"};
  const auto p = cv::PermuteWithinGroups(7, g, 11);
  std::multiset<int> all(p.begin(), p.end());
  EXPECT_EQ(all, (std::multiset<int>{0, 1, 2, 3, 4, 5, 6}));
  for (int i = 0; i < 7; ++i) EXPECT_EQ(g[static_cast<std::size_t>(p[static_cast<std::size_t>(i)])], g[static_cast<std::size_t>(i)]);
  EXPECT_EQ(p, cv::PermuteWithinGroups(7, g, 11));
  EXPECT_NE(cv::PermuteWithinGroups(50, {}, 1), cv::PermuteWithinGroups(50, {}, 2));
}

}  // namespace
