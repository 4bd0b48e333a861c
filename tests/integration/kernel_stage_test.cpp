// The kernel stage on the real Wager cohort (30 subjects, NaNs, a 3.4375 x 3.4375 x 4.5 mm grid).
#include <gmock/gmock.h>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "testing.hpp"

using namespace neuromkl;

TEST(KernelStage, WagerCohortYields116RegionKernelsWithANanReport) {
  neuromkl::testing::TempDir tmp;
  const auto study = config::ParseStudyConfig(
      R"({"name": "w", "subjects": {"table": ")" + neuromkl::testing::SourcePath("examples/wager2008_emoreg/participants.tsv") +
          R"("}, "target": {"column": "Y_Reappraisal_Success", "task": "regression"}, "atlas": "aal", "learners": [{"name": "krr"}],
             "output": {"cache_dir": "cache"}})",
      tmp.Path(), "study.json");
  const auto cohort = pipeline::LoadCohort(study);
  ASSERT_EQ(cohort.ids.size(), 30u);
  const auto first = pipeline::RunKernelStage(study, cohort, tmp.Path());
  EXPECT_FALSE(first.cacheHit);
  EXPECT_EQ(first.set.Size(), 116u);
  EXPECT_TRUE(first.set.excluded.empty());
  std::int64_t voxels = 0, nonFinite = 0;
  for (const auto& k : first.set.info) {
    voxels += k.features + k.nonFiniteVoxels;
    nonFinite += k.nonFiniteVoxels;
    EXPECT_GT(k.features, 0) << k.name;
  }
  EXPECT_EQ(voxels, 27498);  // atlas voxels on this grid (independent count, see atlas_test)
  // NaNs inside the atlas: counted independently in Python (world-space nearest neighbour from the
  // raw headers, round half up): sub-20 has 2 (in regions 6001 and 6401), the others none.
  EXPECT_EQ(nonFinite, 2);
  for (const auto& K : first.set.kernels) EXPECT_TRUE(K.allFinite());

  const auto second = pipeline::RunKernelStage(study, cohort, tmp.Path());
  EXPECT_TRUE(second.cacheHit);
  ASSERT_EQ(second.set.Size(), 116u);
  for (std::size_t r = 0; r < 116; ++r) EXPECT_EQ(second.set.kernels[r], first.set.kernels[r]);
  EXPECT_EQ(second.set.info[5].nonFiniteVoxels, first.set.info[5].nonFiniteVoxels);
}
