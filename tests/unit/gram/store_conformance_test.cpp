// Every backend of a study's kernels answers every operation as the float64 kernels in this process do (the reference):
// the compact float32 store as its values widened to float64, kernels held by 1, 2, 3 or 6 owners (dealt kernel by
// kernel or source by source) with the owners' in-process transport, the reference of the MPI ranks. Per-kernel results
// (scales, copies, test blocks, products, quadratics, bounds, subject weights, floors) are equal bit for bit; sums over
// kernels (the summed kernel, a combined kernel, all quadratics at once) are equal with one owner and the owners'
// partial sums added in owner order with several (to their rounding).
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gram_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/compact.hpp"
#include "neuromkl/gram/fold_formed.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/gram/owners.hpp"
#include "testing.hpp"

using namespace neuromkl;

namespace {

/// Raw linear kernels of features with a common mean (as image kernels are), of different sizes and scales.
gram::KernelList RawKernels(int n, int m, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  gram::KernelList kernels;
  for (int j = 0; j < m; ++j) {
    Eigen::MatrixXd X(n, 4 + 3 * (j % 3));
    for (Eigen::Index k = 0; k < X.size(); ++k) X.data()[k] = 2.0 + (1.0 + j) * normal(rng);
    kernels.push_back(X * X.transpose());
  }
  return kernels;
}

gram::KernelList Widened(const gram::CompactKernelList& store) {
  gram::KernelList out;
  for (const auto& K : store.kernels) out.push_back(K.cast<double>());
  return out;
}

/// A backend under test, and the float64 kernels in memory whose answers it must give.
struct Backend {
  std::string name;
  std::shared_ptr<gram::KernelStore> kernels;
  std::shared_ptr<const gram::KernelList> referenceValues;  ///< the reference's kernels (kept alive)
  std::shared_ptr<gram::MemoryKernels> reference;
  int owners = 0;  ///< 0: held in this process
};

std::vector<Backend> Backends(const gram::KernelList& kernels, const gram::Preprocessing& pre) {
  std::vector<Backend> out;
  auto float64 = std::make_shared<const gram::KernelList>(kernels);
  // Centred with the cohort's mean where the folds centre (the store a float32 study makes), else raw.
  const auto compact = std::make_shared<gram::CompactKernelList>(gram::CompactKernels(kernels, pre.centre));
  auto widened = std::make_shared<const gram::KernelList>(Widened(*compact));
  const auto ref64 = std::make_shared<gram::MemoryKernels>(*float64), ref32 = std::make_shared<gram::MemoryKernels>(*widened);
  out.push_back({"float64 in memory", std::make_shared<gram::MemoryKernels>(*float64), float64, ref64, 0});
  // The compact store refers to `compact`, which the lambda's shared pointer keeps alive with the backend.
  std::shared_ptr<gram::KernelStore> store(new gram::MemoryKernels(*compact), [compact](gram::KernelStore* p) { delete p; });
  out.push_back({"float32 in memory", store, widened, ref32, 0});
  for (const int owners : {1, 2, 3, 6}) {
    auto held = std::make_shared<gram::LocalKernelOwners>(kernels, owners);
    held->SetPreprocessing(pre);
    out.push_back({std::to_string(owners) + " owners", held, float64, ref64, owners});
  }
  auto blocks = std::make_shared<gram::LocalKernelOwners>(kernels, 2, std::vector<std::size_t>{0, 2, 5});
  blocks->SetPreprocessing(pre);
  out.push_back({"2 owners, three sources", blocks, float64, ref64, 2});
  auto held32 = std::make_shared<gram::LocalKernelOwners>(*compact, 3);
  held32->SetPreprocessing(pre);
  std::shared_ptr<gram::KernelStore> kept(held32.get(), [held32, compact](gram::KernelStore*) {});
  out.push_back({"3 owners, float32", kept, widened, ref32, 3});
  // The store of harmonised sources prepares its folds from the fold's own kernels: with no harmonised source, those are
  // the full kernels' fold rows, and every answer must be the in-memory one.
  auto design = std::make_shared<gram::Harmonisation>();
  design->sites.assign(static_cast<std::size_t>(kernels[0].rows()), 0);
  design->covariates.resize(kernels[0].rows(), 0);
  out.push_back({"harmonised store, no harmonised source",
                 std::make_shared<gram::FoldFormedKernels>(float64, std::vector<gram::KernelOrigin>(kernels.size()),
                                                           std::make_shared<const std::vector<gram::HarmonisedSource>>(), design),
                 float64, ref64, 0});
  return out;
}

/// Centring, normalising, equal source weighting and covariates in the combinations the studies use.
std::vector<std::pair<std::string, gram::Preprocessing>> Preprocessings(Eigen::Index rows) {
  Eigen::MatrixXd design(rows, 3);
  std::srand(11);
  design << Eigen::VectorXd::Ones(rows), Eigen::MatrixXd::Random(rows, 2);
  const auto covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
  gram::Preprocessing plain, groups, withCovariates, both, uncentred, unnormalised;
  groups.kernelGroups = both.kernelGroups = {0, 0, 1, 1, 1, 2, 2};
  withCovariates.covariates = both.covariates = covariates;
  uncentred.centre = false;
  unnormalised.normalise = false;
  unnormalised.kernelGroups = groups.kernelGroups;
  return {{"centre + normalise", plain}, {"source weighting", groups}, {"covariates", withCovariates},
          {"covariates + source weighting", both}, {"normalise only", uncentred}, {"centre + source weighting, no normalising", unnormalised}};
}

/// Every operation of `x` (a backend) against `y` (the reference) on one fold.
void ExpectSameFold(const Backend& b, const std::vector<int>& train, const std::vector<int>& test, const gram::Preprocessing& pre,
                    const std::string& what) {
  const gram::KernelStore& x = *b.kernels;
  const gram::MemoryKernels& y = *b.reference;
  const bool oneSum = b.owners <= 1;  // sums over kernels in one piece: equal bit for bit
  const auto fx = x.OpenFold(train, test, pre), fy = y.OpenFold(train, test, pre);
  const std::size_t R = y.Count();
  // Scales and products.
  const Eigen::VectorXd scales = fy->Scales();
  EXPECT_EQ(fx->Scales(), scales) << what;
  const Eigen::MatrixXd A = Eigen::MatrixXd::Random(static_cast<Eigen::Index>(train.size()), 2);
  const std::vector<std::size_t> which{5, 0, 3};
  EXPECT_EQ(fx->Products(which, A, scales), fy->Products(which, A, scales)) << what;
  // The summed kernel.
  const gram::FoldKernels sx = fx->Summed(), sy = fy->Summed();
  if (oneSum) {
    EXPECT_EQ(sx.train, sy.train) << what;
    EXPECT_EQ(sx.test, sy.test) << what;
  } else {  // partial sums of order-1 entries: 1e-12 is a few thousand times their rounding
    EXPECT_TRUE(neuromkl::testing::MatrixNear(sx.train[0], sy.train[0], 1e-12)) << what;
    EXPECT_TRUE(neuromkl::testing::MatrixNear(sx.test[0], sy.test[0], 1e-12)) << what;
  }
  // The training kernels of the learners of kernel weights, in every form the backend offers, against the reference
  // copies: a stack reads them as it reads the copies, and the test blocks are the copies'.
  const gram::FoldKernels copies = gram::PrepareFold(y, train, test, pre);
  const auto reference = gram::MakeStack(copies.train);
  for (const gram::TrainingForm form : {gram::TrainingForm::Copies, gram::TrainingForm::Float32Copies, gram::TrainingForm::InPlace}) {
    if (form == gram::TrainingForm::InPlace && pre.covariates && b.owners == 0) continue;  // residualising mixes rows: copies
    if (form == gram::TrainingForm::Float32Copies && !x.Compact()) continue;
    const std::string how = what + (form == gram::TrainingForm::Copies ? ", copies" : form == gram::TrainingForm::InPlace ? ", in place" : ", float32 copies");
    gram::WeightedKernels w;
    fx->Weighted(form, w);
    Eigen::MatrixXd buffer;
    const gram::TestBlocks blocks = w.Test(buffer);
    ASSERT_EQ(blocks.count, static_cast<Eigen::Index>(R)) << how;
    for (Eigen::Index k = static_cast<Eigen::Index>(R) - 1; k >= 0; --k) EXPECT_EQ(blocks.block(k), copies.test[static_cast<std::size_t>(k)]) << how << " block " << k;
    if (blocks.products) {
      const std::vector<Eigen::Index> asked{4, 1};
      const auto products = blocks.products(asked, A, gram::kProductColumns);
      for (std::size_t i = 0; i < asked.size(); ++i)
        EXPECT_EQ(products[i], gram::TestProduct(copies.test[static_cast<std::size_t>(asked[i])], A, gram::kProductColumns)) << how;
    }
    if (form == gram::TrainingForm::Float32Copies) continue;  // a second rounding: compact_kernels_test bounds it
    if (!w.kernels) {
      EXPECT_EQ(w.train, copies.train) << how;
      continue;
    }
    EXPECT_EQ(w.kernels->FirstNonFinite(), -1) << how;
    EXPECT_EQ(w.kernels->NonZero().size(), R) << how;
    const auto stack = w.kernels->Stack();
    const Eigen::VectorXd weights = (Eigen::VectorXd(7) << 0.3, 0.0, 1.7, 0.25, 1e-3, 0.9, 0.0).finished();
    const Eigen::VectorXd a = A.col(0);
    const std::vector<Eigen::Index> kernels{6, 2, 0};
    if (oneSum) {
      EXPECT_EQ(stack->Combine(weights), reference->Combine(weights)) << how;
      EXPECT_EQ(stack->Quadratics(a), reference->Quadratics(a)) << how;
    } else {
      EXPECT_TRUE(neuromkl::testing::MatrixNear(stack->Combine(weights), reference->Combine(weights), 1e-12)) << how;
      EXPECT_TRUE(neuromkl::testing::MatrixNear(stack->Quadratics(a), reference->Quadratics(a), 0, 1e-12)) << how;
    }
    EXPECT_EQ(stack->Products(kernels, a), reference->Products(kernels, a)) << how;
    EXPECT_EQ(stack->Form(A)->Values(kernels), reference->Form(A)->Values(kernels)) << how;
    for (const Eigen::Index k : kernels) {
      EXPECT_EQ(stack->Form(A)->Value(k), reference->Form(A)->Value(k)) << how << " kernel " << k;
      EXPECT_EQ(stack->RootSpectralBound(k), reference->RootSpectralBound(k)) << how << " kernel " << k;
    }
  }
}

TEST(StoreConformance, EveryBackendAnswersEveryFoldOperationAsTheFloat64KernelsInMemory) {
  const int n = 40;
  const gram::KernelList kernels = RawKernels(n, 7, 3);
  std::vector<int> train, test;
  for (int i = 0; i < n; ++i) (i % 4 == 1 ? test : train).push_back(i);
  std::swap(train[2], train[9]);  // fold orders are not always sorted
  for (const auto& [pname, pre] : Preprocessings(n))
    for (const Backend& b : Backends(kernels, pre)) {
      const std::string what = b.name + ", " + pname;
      ExpectSameFold(b, train, test, pre, what);
      // Store-level operations, per kernel: bit for bit.
      const gram::FoldModel model{train, test, Eigen::VectorXd::Random(static_cast<Eigen::Index>(train.size())),
                                  (Eigen::VectorXd(7) << 0.2, 0, 0.2, 0.1, 0.1, 0.4, 0).finished()};
      EXPECT_EQ(b.kernels->SubjectWeights(model, pre), b.reference->SubjectWeights(model, pre)) << what;
      EXPECT_EQ(b.kernels->LargestCentredSelfSimilarities(train, pre), b.reference->LargestCentredSelfSimilarities(train, pre)) << what;
      EXPECT_EQ(b.kernels->Count(), 7u) << what;
      EXPECT_EQ(b.kernels->Subjects(), n) << what;
    }
}

// Below kPackedStackBelow subjects a fold prepares the columns of the learners of kernel weights kernel by kernel
// (MemoryFold::Weighted): each kernel's test block, packed stack column and finiteness together, with its fold vectors
// when the fold has none yet. Whether the columns come first (the vectors made with them) or after the summed kernel (the
// vectors made before): the test blocks, the stack, the check and the summed kernel are those of the reference copies
// (gram::PrepareFold) and of a stack packed from the columns afterwards, bit for bit; a kernel with a NaN entry is the one
// reported.
TEST(StoreConformance, ColumnsPreparedKernelByKernelAreThoseOfTheSeparatePasses) {
  const int n = 40;
  const gram::KernelList kernels = RawKernels(n, 7, 13);
  std::vector<int> train, test;
  for (int i = 0; i < n; ++i) (i % 5 == 2 ? test : train).push_back(i);
  std::swap(train[1], train[7]);
  gram::KernelList withNaN = kernels;
  withNaN[4](train[3], train[5]) = withNaN[4](train[5], train[3]) = std::numeric_limits<double>::quiet_NaN();
  gram::Preprocessing uncentred, weighted;
  uncentred.centre = false;
  weighted.kernelGroups = {0, 0, 1, 1, 1, 2, 2};  // scales from the traces: the vectors come first
  const Eigen::MatrixXd A = Eigen::MatrixXd::Random(static_cast<Eigen::Index>(train.size()), 2);
  const Eigen::VectorXd weights = (Eigen::VectorXd(7) << 0.3, 0.0, 1.7, 0.25, 1e-3, 0.9, 0.0).finished();
  const std::vector<Eigen::Index> asked{6, 2, 0, 4};
  for (const auto& [pname, pre] : std::vector<std::pair<std::string, gram::Preprocessing>>{{"centre + normalise", {}}, {"normalise only", uncentred},
                                                                                          {"source weighting", weighted}})
    for (const bool nan : {false, true})
      for (const bool summedFirst : {false, true}) {
        const std::string what = pname + (nan ? ", kernel 4 with a NaN" : "") + (summedFirst ? ", summed kernel first" : ", columns first");
        const gram::KernelList& values = nan ? withNaN : kernels;
        const gram::MemoryKernels store(values), reference(values);
        const auto fold = store.OpenFold(train, test, pre), other = reference.OpenFold(train, test, pre);
        const gram::FoldKernels summedReference = other->Summed();
        gram::FoldKernels summed;
        if (summedFirst) summed = fold->Summed();
        gram::WeightedKernels w;
        fold->Weighted(gram::TrainingForm::InPlace, w);
        if (!summedFirst) summed = fold->Summed();
        ASSERT_TRUE(w.kernels) << what;
        EXPECT_EQ(w.kernels->FirstNonFinite(), nan ? 4 : -1) << what;
        const gram::FoldKernels copies = gram::PrepareFold(reference, train, test, pre);
        Eigen::MatrixXd buffer;
        const gram::TestBlocks blocks = w.Test(buffer);
        for (Eigen::Index k = 0; k < 7; ++k) {
          const Eigen::MatrixXd block = blocks.block(k), expected = copies.test[static_cast<std::size_t>(k)];
          EXPECT_TRUE(block.cwiseEqual(expected).all() || (nan && k == 4 && block.hasNaN() && expected.hasNaN())) << what << " block " << k;
        }
        if (nan) continue;
        EXPECT_EQ(summed.train, summedReference.train) << what;
        EXPECT_EQ(summed.test, summedReference.test) << what;
        const auto stack = w.kernels->Stack(), again = w.kernels->Stack(), copied = gram::MakeStack(copies.train);
        for (const auto* other : {again.get(), copied.get()}) {
          EXPECT_EQ(stack->Combine(weights), other->Combine(weights)) << what;
          EXPECT_EQ(stack->Quadratics(A.col(0)), other->Quadratics(A.col(0))) << what;
          EXPECT_EQ(stack->Products(asked, A.col(1)), other->Products(asked, A.col(1))) << what;
        }
      }
}

TEST(StoreConformance, FoldsAreClosedOnTheOwnersWhenTheirLastHolderGoes) {
  const gram::KernelList kernels = RawKernels(24, 3, 5);
  gram::LocalKernelOwners held(kernels, 2);
  held.SetPreprocessing({});
  std::vector<int> train, test;
  for (int i = 0; i < 24; ++i) (i % 3 == 0 ? test : train).push_back(i);
  gram::WeightedKernels w;
  {
    const auto fold = held.OpenFold(train, test, {});
    EXPECT_EQ(held.OpenFolds(), 2);  // open on both owners
    fold->Weighted(gram::TrainingForm::InPlace, w);
  }
  EXPECT_EQ(held.OpenFolds(), 2);  // the learners' training kernels still read it
  w.kernels.reset();
  w.testOnDemand = nullptr;
  EXPECT_EQ(held.OpenFolds(), 0);
}

TEST(StoreConformance, KernelsHeldByOwnersArePreparedWithTheOwnersPreprocessingOnly) {
  // The owners prepare every fold as they were told (SetPreprocessing); asking for another is a programming error.
  const gram::KernelList kernels = RawKernels(20, 3, 7);
  gram::LocalKernelOwners held(kernels, 2);
  gram::Preprocessing pre;
  pre.normalise = false;
  held.SetPreprocessing(pre);
  EXPECT_NO_THROW(held.CheckPreprocessing(pre));
  EXPECT_THROW(held.OpenFold({0, 1, 2, 3}, {4, 5}, gram::Preprocessing{}), std::logic_error);
  EXPECT_THROW(held.SubjectWeights({{0, 1}, {2}, Eigen::VectorXd::Ones(2), Eigen::VectorXd::Ones(3)}, gram::Preprocessing{}), std::logic_error);
}

TEST(StoreConformance, ASubsetIsTheSelectedKernelsInTheirNewOrder) {
  // Each fold of a subset prepares exactly what the parent's kernels `which` give, in either precision; kernels held
  // by owners have no subset in this process, which is said, not guessed.
  const gram::KernelList kernels = RawKernels(24, 5, 11);
  const gram::CompactKernelList compact = gram::CompactKernels(kernels, true);
  const std::vector<std::size_t> which = {3, 0, 3};
  const std::vector<int> train = {0, 2, 3, 5, 7, 8, 10, 11, 13, 15, 16, 18, 19, 21, 23}, test = {1, 4, 6, 9, 12};
  const gram::Preprocessing pre;
  for (const bool float32 : {false, true}) {
    const auto parent = float32 ? std::make_unique<gram::MemoryKernels>(compact) : std::make_unique<gram::MemoryKernels>(kernels);
    const auto part = parent->Subset(which);
    ASSERT_EQ(part->Count(), 3u);
    EXPECT_EQ(part->Compact(), float32);
    EXPECT_EQ(part->Centred(), float32);
    const gram::FoldKernels whole = gram::PrepareFold(*parent, train, test, pre), subset = gram::PrepareFold(*part, train, test, pre);
    for (std::size_t i = 0; i < which.size(); ++i) {
      EXPECT_EQ(subset.train[i], whole.train[which[i]]) << "kernel " << which[i] << (float32 ? " (float32)" : "");
      EXPECT_EQ(subset.test[i], whole.test[which[i]]) << "kernel " << which[i] << (float32 ? " (float32)" : "");
    }
    EXPECT_THROW(parent->Subset({5}), std::out_of_range);
  }
  gram::LocalKernelOwners held(kernels, 2);
  try {
    held.Subset({0});
    ADD_FAILURE() << "expected gram:SubsetOfHeldKernels";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "gram:SubsetOfHeldKernels");
  }
}

}  // namespace
