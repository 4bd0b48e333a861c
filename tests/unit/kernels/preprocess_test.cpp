#include <random>

#include <gtest/gtest.h>

#include "neuromkl/gram/preprocess.hpp"
#include "testing.hpp"

using namespace neuromkl;
using neuromkl::testing::MatrixNear;

namespace {

struct Data {
  Eigen::MatrixXd X;  // 9 subjects x 5 features, non-zero mean (centring must matter)
  Eigen::VectorXi train, test;
  Data() : X(9, 5), train(6), test(3) {
    std::mt19937 rng(3);
    std::normal_distribution<double> n(2.0, 1.0);
    for (Eigen::Index i = 0; i < X.size(); ++i) X.data()[i] = n(rng);
    train << 0, 2, 3, 5, 7, 8;
    test << 1, 4, 6;
  }
};

Eigen::MatrixXd Rows(const Eigen::MatrixXd& X, const Eigen::VectorXi& idx) {
  Eigen::MatrixXd out(idx.size(), X.cols());
  for (Eigen::Index i = 0; i < idx.size(); ++i) out.row(i) = X.row(idx[i]);
  return out;
}

TEST(Preprocess, CentringEqualsInnerProductsOfTrainingCentredFeatures) {
  Data d;
  gram::FoldKernel k = gram::SliceFold(d.X * d.X.transpose(), d.train, d.test);
  gram::CentreFold(k);
  const Eigen::MatrixXd Xtr = Rows(d.X, d.train), Xte = Rows(d.X, d.test);
  const Eigen::RowVectorXd mu = Xtr.colwise().mean();  // training mean only
  const Eigen::MatrixXd Ctr = Xtr.rowwise() - mu, Cte = Xte.rowwise() - mu;
  EXPECT_TRUE(MatrixNear(k.train, Ctr * Ctr.transpose(), 1e-12));
  EXPECT_TRUE(MatrixNear(k.testTrain, Cte * Ctr.transpose(), 1e-12));
  EXPECT_TRUE(MatrixNear(k.testDiag, (Cte * Cte.transpose()).diagonal(), 1e-12));
}

TEST(Preprocess, NormalisationIsTheCosineOfCentredFeatures) {
  Data d;
  gram::FoldKernel k = gram::SliceFold(d.X * d.X.transpose(), d.train, d.test);
  gram::CentreFold(k);
  gram::NormaliseFold(k);
  const Eigen::RowVectorXd mu = Rows(d.X, d.train).colwise().mean();
  Eigen::MatrixXd Ctr = Rows(d.X, d.train).rowwise() - mu, Cte = Rows(d.X, d.test).rowwise() - mu;
  Ctr.rowwise().normalize();
  Cte.rowwise().normalize();
  EXPECT_TRUE(MatrixNear(k.train, Ctr * Ctr.transpose(), 1e-12));
  EXPECT_TRUE(MatrixNear(k.testTrain, Cte * Ctr.transpose(), 1e-12));
  EXPECT_TRUE(MatrixNear(k.testDiag, Eigen::VectorXd::Ones(3), 1e-12));
}

TEST(Preprocess, TestSubjectsDoNotLeakIntoTrainingStatistics) {
  Data d;
  gram::FoldKernel a = gram::SliceFold(d.X * d.X.transpose(), d.train, d.test);
  Eigen::MatrixXd X2 = d.X;
  X2.row(4) *= -7.0;  // change a held-out subject
  gram::FoldKernel b = gram::SliceFold(X2 * X2.transpose(), d.train, d.test);
  for (auto* k : {&a, &b}) {
    gram::CentreFold(*k);
    gram::NormaliseFold(*k);
  }
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.testTrain.row(0), b.testTrain.row(0));  // other test subjects untouched
  EXPECT_NE(a.testTrain.row(1), b.testTrain.row(1));
}

TEST(Preprocess, ASampleAtTheTrainingMeanGetsZerosNotNan) {
  Data d;
  Eigen::MatrixXd X = d.X;
  X.row(1) = Rows(d.X, d.train).colwise().mean();  // test subject 1 equals the training mean
  gram::FoldKernel k = gram::SliceFold(X * X.transpose(), d.train, d.test);
  gram::CentreFold(k);
  gram::NormaliseFold(k);
  EXPECT_TRUE(k.testTrain.allFinite());
  EXPECT_NEAR(k.testTrain.row(0).cwiseAbs().maxCoeff(), 0.0, 1e-6);
}

// The fold's preprocessing as vectors, from the full kernel in place (no copy of the fold's blocks).
TEST(FoldVectors, DescribeTheCopiesEntriesAndProducts) {
  const Data d;
  const Eigen::MatrixXd K = d.X * d.X.transpose();
  for (const bool centre : {true, false})
    for (const bool normalise : {true, false}) {
      gram::FoldKernel fk = gram::SliceFold(K, d.train, d.test);
      if (centre) gram::CentreFold(fk);
      const Eigen::VectorXd centredTrainDiag = fk.train.diagonal(), centredTestDiag = fk.testDiag;
      if (normalise) gram::NormaliseFold(fk);
      const gram::FoldVectors v = gram::MakeFoldVectors(K, d.train, d.test, centre, normalise);
      // Every prepared entry rebuilt from the vectors. Entries are O(10) here (features of mean 2): 1e-13
      // absolute is a few hundred ulps, the means being summed in another order than Eigen's reductions.
      Eigen::MatrixXd train(d.train.size(), d.train.size()), test(d.test.size(), d.train.size());
      for (Eigen::Index b = 0; b < d.train.size(); ++b) {
        for (Eigen::Index a = 0; a < d.train.size(); ++a)
          train(a, b) = (v.invTrain[a] * (((K(d.train[a], d.train[b]) - v.colMean[b]) - v.colMean[a]) + v.grand)) * v.invTrain[b];
        for (Eigen::Index i = 0; i < d.test.size(); ++i)
          test(i, b) = (v.invTest[i] * (((K(d.test[i], d.train[b]) - v.colMean[b]) - v.testMean[i]) + v.grand)) * v.invTrain[b];
      }
      EXPECT_TRUE(MatrixNear(train, fk.train, 1e-13)) << centre << normalise;
      EXPECT_TRUE(MatrixNear(test, fk.testTrain, 1e-13)) << centre << normalise;
      EXPECT_TRUE(MatrixNear(v.trainDiag, centredTrainDiag, 1e-13));
      EXPECT_TRUE(MatrixNear(v.testDiag, centredTestDiag, 1e-13));
      EXPECT_NEAR(v.Trace(), fk.train.trace(), 1e-12);
      // Products with the prepared block without forming it: two right-hand sides, one with zeros.
      Eigen::MatrixXd A = Eigen::MatrixXd::Random(d.train.size(), 2);
      A(2, 1) = 0.0;
      EXPECT_TRUE(MatrixNear(gram::PreparedProducts(K, d.train, v, A), fk.train * A, 1e-12)) << centre << normalise;
    }
}

TEST(FoldVectors, ASampleAtTheTrainingMeanGetsAZeroScale) {
  Data d;
  d.X.row(d.test[0]) = Rows(d.X, d.train).colwise().mean();
  const Eigen::MatrixXd K = d.X * d.X.transpose();
  const gram::FoldVectors v = gram::MakeFoldVectors(K, d.train, d.test, true, true);
  EXPECT_EQ(v.invTest[0], 0.0);
  EXPECT_GT(v.invTest[1], 0.0);
  EXPECT_TRUE(v.invTrain.allFinite());
}

TEST(FoldVectors, SlicedBlocksGiveTheFullKernelsVectorsAndBlocksBitForBit) {
  // The Python estimators receive blocks already sliced; nested CV reads the full kernel. Both must give the
  // same prepared blocks to the last bit (the package's fits equal the CLI's).
  const Data d;
  const Eigen::MatrixXd K = d.X * d.X.transpose();
  for (const bool centre : {true, false})
    for (const bool normalise : {true, false}) {
      const gram::FoldVectors full = gram::MakeFoldVectors(K, d.train, d.test, centre, normalise);
      const gram::FoldKernel expected = gram::PreparedBlocks(K, d.train, d.test, full, normalise);
      gram::FoldKernel sliced = gram::SliceFold(K, d.train, d.test);
      const gram::FoldVectors blocks = gram::BlockFoldVectors(sliced.train, sliced.testTrain, sliced.testDiag, centre, normalise);
      EXPECT_EQ(blocks.colMean, full.colMean);
      EXPECT_EQ(blocks.testMean, full.testMean);
      EXPECT_EQ(blocks.invTrain, full.invTrain);
      EXPECT_EQ(blocks.invTest, full.invTest);
      gram::PrepareBlocksInPlace(sliced.train, sliced.testTrain, blocks);
      EXPECT_EQ(sliced.train, expected.train) << centre << normalise;
      EXPECT_EQ(sliced.testTrain, expected.testTrain) << centre << normalise;
    }
}

}  // namespace
