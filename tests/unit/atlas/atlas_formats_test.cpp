// Label tables in the formats atlases ship with, detected from the content; probabilistic atlases
// and several atlas images combined. Fixtures are written here.
#include <gmock/gmock.h>

#include "image_fixtures.hpp"
#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/core/errors.hpp"
#include "testing.hpp"

using namespace neuromkl;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using neuromkl::testing::WriteFixtureImage;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

TEST(AtlasFormats, TablesAreDetectedFromTheirContent) {
  TempDir dir;
  WriteFile(dir / "a_dseg.tsv", "index\tname\tabbreviation\tcolor\n1\tFrontal pole\tFP\t#ff0000\n2\tInsula\tIns\t#00ff00\n");
  auto t = atlas::ReadLabelTable(dir / "a_dseg.tsv");
  EXPECT_EQ(t.format, "tsv");
  EXPECT_THAT(t.names, ElementsAre("Frontal pole", "Insula"));
  ASSERT_EQ(t.labelColumns.size(), 1u);
  EXPECT_EQ(t.labelColumns[0].first, "index");

  WriteFile(dir / "fsl.xml", R"(<?xml version="1.0"?><atlas><data>
    <label index="0" x="1" y="2" z="3">Frontal Pole</label>
    <label index='1' x="1" y="2" z="3">Heschl&apos;s Gyrus &amp; Planum</label></data></atlas>)");
  t = atlas::ReadLabelTable(dir / "fsl.xml");
  EXPECT_EQ(t.format, "fsl_xml");
  EXPECT_THAT(t.names, ElementsAre("Frontal Pole", "Heschl's Gyrus & Planum"));
  EXPECT_THAT(t.labelColumns[0].second, ElementsAre(1, 2));  // label images: value = index + 1
  EXPECT_THAT(t.volumeIndex, ElementsAre(0, 1));             // probabilistic: volume = index

  WriteFile(dir / "lut.txt", "# FreeSurferColorLUT\n#No. Label Name: R G B A\n\n0 Unknown 0 0 0 0\n10 Left-Thalamus 0 118 14 0\n"
                             "1035 ctx-lh-insula 255 192 32 0\n");
  t = atlas::ReadLabelTable(dir / "lut.txt");
  EXPECT_EQ(t.format, "freesurfer_lut");
  EXPECT_THAT(t.names, ElementsAre("Left-Thalamus", "ctx-lh-insula"));  // 0 is background
  EXPECT_THAT(t.labelColumns[0].second, ElementsAre(10, 1035));

  WriteFile(dir / "broken.xml", R"(<atlas><data><label index="0">Open</data></atlas>)");
  EXPECT_THROW(atlas::ReadLabelTable(dir / "broken.xml"), InputError);
}

neuromkl::testing::FixtureImage Probabilities(std::vector<double> a, std::vector<double> b) {
  neuromkl::testing::FixtureImage im;
  im.dims = {4, 1, 1};
  im.volumes = 2;
  im.stored = std::move(a);
  im.stored.insert(im.stored.end(), b.begin(), b.end());
  return im;
}

TEST(AtlasFormats, ProbabilisticAtlasKeepsVoxelsAboveTheThresholdWithTheirProbability) {
  TempDir dir;
  WriteFixtureImage(dir / "p.nii", neuromkl::testing::FixtureFormat::Nifti2, Probabilities({0.9, 0.5, 0.2, 0}, {0.1, 0.5, 0.8, 0}));
  WriteFile(dir / "p.tsv", "index\tname\n1\tA\n2\tB\n");
  const auto a = atlas::LoadProbabilisticAtlas(dir / "p.nii", dir / "p.tsv", 0.15);
  io::Geometry grid = a.geometry;
  const auto index = atlas::BuildRegionIndex(a, grid, nullptr);
  ASSERT_EQ(index.regions.size(), 2u);
  EXPECT_THAT(index.regions[0].voxels, ElementsAre(0, 1, 2));  // p > 0.15; voxel 1 is in both regions
  EXPECT_THAT(index.regions[0].weights, ElementsAre(0.9f, 0.5f, 0.2f));
  EXPECT_THAT(index.regions[1].voxels, ElementsAre(1, 2));
  // A 3-row table for 2 volumes, values outside [0, 100], and a 4-D image given as a label atlas.
  WriteFile(dir / "three.tsv", "index\tname\n1\tA\n2\tB\n3\tC\n");
  try {
    atlas::LoadProbabilisticAtlas(dir / "p.nii", dir / "three.tsv", 0);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "atlas:TableMismatch");
  }
  WriteFixtureImage(dir / "bad.nii", neuromkl::testing::FixtureFormat::Nifti1, Probabilities({0.5, 150, 0, 0}, {0, 0, 0, 0}));
  try {
    atlas::LoadProbabilisticAtlas(dir / "bad.nii", dir / "p.tsv", 0);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "atlas:BadProbability");
    EXPECT_THAT(e.what(), HasSubstr("[0, 150]"));
  }
  try {
    atlas::LoadAtlas(dir / "p.nii", dir / "p.tsv");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("\"probabilistic\": true"));
  }
}

TEST(AtlasFormats, SeveralAtlasImagesCombineWithPrefixesAndDistinctLabels) {
  atlas::RegionIndex cortical, subcortical;
  cortical.regions = {{1, "insula", {0, 1}, 2, {}}};
  subcortical.regions = {{1, "thalamus", {1, 2}, 2, {}}};
  subcortical.emptyRegions = {{2, "pallidum", {}, 0, {}}};
  const auto all = atlas::CombineRegionIndices({cortical, subcortical}, {"ctx", "sub"});
  ASSERT_EQ(all.regions.size(), 2u);
  EXPECT_EQ(all.regions[0].name, "ctx_insula");
  EXPECT_EQ(all.regions[0].label, 1);
  EXPECT_EQ(all.regions[1].name, "sub_thalamus");
  EXPECT_EQ(all.regions[1].label, atlas::kAtlasPartLabelStride + 1);
  ASSERT_EQ(all.emptyRegions.size(), 1u);
  EXPECT_EQ(all.emptyRegions[0].name, "sub_pallidum");
}

}  // namespace
