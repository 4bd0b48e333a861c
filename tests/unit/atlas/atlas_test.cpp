#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include <gmock/gmock.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"
#include "image_fixtures.hpp"
#include "testing.hpp"

using namespace neuromkl;
using neuromkl::testing::SourcePath;
using neuromkl::testing::TestData;
using ::testing::HasSubstr;

namespace {

const atlas::Atlas& Aal2mm() {
  static const atlas::Atlas a = atlas::LoadAtlas(SourcePath("atlases/aal/ROI_MNI_V4.nii.gz"), TestData("atlases/aal_spm_2mm/ROI_MNI_V4.txt"));
  return a;
}
const atlas::Atlas& Aal1mm() {
  static const atlas::Atlas a = atlas::LoadAtlas(TestData("atlases/aal_mricron_1mm/aal.nii.gz"), TestData("atlases/aal_mricron_1mm/aal.nii.txt"));
  return a;
}

TEST(Atlas, BothAalCodingsGive116NamedRegions) {
  EXPECT_EQ(Aal2mm().regions.size(), 116u);
  EXPECT_EQ(Aal2mm().labelColumn, "col3");  // ROI_MNI_V4.txt: ABBREV name code
  EXPECT_EQ(Aal2mm().regions[0].label, 2001);
  EXPECT_EQ(Aal2mm().regions[0].name, "Precentral_L");
  EXPECT_EQ(Aal1mm().regions.size(), 116u);
  EXPECT_EQ(Aal1mm().regions[0].label, 1);
  EXPECT_EQ(Aal1mm().regions[0].name, "Precentral_L");
  EXPECT_TRUE(Aal2mm().warnings.empty());
}

TEST(Atlas, BuiltinAalShipsWithTheRepository) {
  const auto files = atlas::BuiltinAtlas("aal");
  ASSERT_TRUE(files);
  const atlas::Atlas a = atlas::LoadAtlas(files->image, files->table);
  EXPECT_EQ(a.regions.size(), 116u);
  EXPECT_EQ(a.labelColumn, "code");  // aal116_labels.tsv has index and code; the image holds codes
  EXPECT_EQ(a.labels, Aal2mm().labels);
  EXPECT_FALSE(atlas::BuiltinAtlas("aal3"));
}

TEST(Atlas, DataOfABuildTreeBinaryComeFromItsSourceTreeUnlessTheEnvironmentSaysOtherwise) {
  // This test binary lies in the build tree, with no share/neuromkl beside it (an installation's case is the
  // ctest install_prefix_runs_the_example): the source tree, or NEUROMKL_DATA_DIR when it is set.
  unsetenv("NEUROMKL_DATA_DIR");
  const atlas::DataDirLookup inTree = atlas::FindDataDir();
  EXPECT_EQ(std::filesystem::canonical(inTree.dir), std::filesystem::canonical(SourcePath("")));
  EXPECT_THAT(inTree.how, HasSubstr("the source tree of the build tree"));
  ASSERT_EQ(inTree.tried.size(), 3u);  // <bin>/../share/neuromkl, the Python module's and a package's data/: none holds atlases/
  EXPECT_THAT(inTree.tried[0], HasSubstr("share/neuromkl"));
  EXPECT_EQ(atlas::BuiltinAtlas("aal")->image, inTree.dir + "/atlases/aal/ROI_MNI_V4.nii.gz");
  setenv("NEUROMKL_DATA_DIR", "/elsewhere/neuromkl", 1);
  EXPECT_EQ(atlas::FindDataDir().how, "NEUROMKL_DATA_DIR");
  EXPECT_EQ(atlas::DataDir(), "/elsewhere/neuromkl");
  unsetenv("NEUROMKL_DATA_DIR");
}

/// Name-level agreement between the 1 mm atlas sampled at 2 mm voxel centres and the 2 mm atlas.
double Agreement(const io::Geometry& g1) {
  const auto& a2 = Aal2mm();
  const auto& a1 = Aal1mm();
  // FieldTrip's ROI_MNI_V4.txt spells "Cerebellum_*", the original AAL (and MRIcron) "Cerebelum_*".
  auto canonical = [](std::string n) {
    if (n.rfind("Cerebellum", 0) == 0) n.replace(0, 10, "Cerebelum");
    return n;
  };
  std::map<std::int64_t, std::string> name1, name2;
  for (const auto& r : a1.regions) name1[r.label] = canonical(r.name);
  for (const auto& r : a2.regions) name2[r.label] = canonical(r.name);
  const auto resampled = atlas::ResampleLabels(g1, a1.labels, a2.geometry);
  long both = 0, same = 0;
  for (std::size_t i = 0; i < resampled.size(); ++i) {
    if (a2.labels[i] == 0 && resampled[i] == 0) continue;
    ++both;
    same += a2.labels[i] != 0 && resampled[i] != 0 && name1[resampled[i]] == name2[a2.labels[i]];
  }
  return static_cast<double>(same) / static_cast<double>(both);
}

TEST(Atlas, WorldSpaceResamplingReproducesTheOtherAalCopy) {
  // PROVENANCE.md: the 1 mm copy's header places labels 1 mm away in y and z; at face value the
  // labels agree at 79.6 % of 2 mm voxels (union of non-background), 100 % with the offset undone
  // (both figures reproduced independently in Python from the raw headers: 0.7955 and 1.0).
  const double faceValue = Agreement(Aal1mm().geometry);
  EXPECT_NEAR(faceValue, 0.796, 0.01);
  io::Geometry shifted = Aal1mm().geometry;
  shifted.origin[1] += 1.0;  // LPS y = -RAS y: move the labels 1 mm anterior... or posterior
  shifted.origin[2] -= 1.0;
  const double a = Agreement(shifted);
  shifted.origin[1] -= 2.0;
  shifted.origin[2] += 2.0;
  const double b = Agreement(shifted);
  EXPECT_GT(std::max(a, b), 0.999);
}

TEST(Atlas, RegionIndexOnTheWagerGrid) {
  const io::Geometry grid = io::ReadGeometry(SourcePath("examples/wager2008_emoreg/nifti/sub-01_con_00810001.nii.gz"));
  const atlas::RegionIndex index = atlas::BuildRegionIndex(Aal2mm(), grid, nullptr);
  EXPECT_TRUE(index.resampled);
  EXPECT_EQ(index.regions.size() + index.emptyRegions.size(), 116u);
  // 27,498 atlas voxels land on the Wager grid: counted independently (Python, world-space nearest
  // neighbour, round half up) from the raw headers.
  EXPECT_EQ(index.TotalVoxels(), 27498);
}

TEST(Atlas, MaskRestrictsRegions) {
  const auto& a = Aal2mm();
  io::Volume mask;
  mask.geometry = a.geometry;
  mask.data.assign(a.labels.size(), 0.0f);
  for (std::size_t i = 0; i < a.labels.size(); ++i)
    if (a.labels[i] == 2001 || a.labels[i] == 2002) mask.data[i] = 1.0f;
  const auto index = atlas::BuildRegionIndex(a, a.geometry, &mask, "m.nii");
  ASSERT_EQ(index.regions.size(), 2u);
  EXPECT_EQ(index.emptyRegions.size(), 114u);
  EXPECT_EQ(index.regions[0].name, "Precentral_L");
}

TEST(Atlas, NoLabelInsideTheMaskIsAnError) {
  const auto& a = Aal2mm();
  io::Volume mask;
  mask.geometry = a.geometry;
  mask.data.assign(a.labels.size(), 0.0f);
  mask.data[0] = 1.0f;  // a corner voxel: background
  EXPECT_THAT([&] { atlas::BuildRegionIndex(a, a.geometry, &mask, "corner_mask.nii"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("corner_mask.nii"), HasSubstr("no atlas label left"))));
}

TEST(Atlas, NoWorldOverlapIsAnError) {
  io::Geometry far = Aal2mm().geometry;
  far.origin = {5000, 5000, 5000};
  EXPECT_THAT([&] { atlas::BuildRegionIndex(Aal2mm(), far, nullptr); },
              ::testing::ThrowsMessage<GeometryMismatch>(HasSubstr("do not overlap in world space")));
}

TEST(Atlas, TableThatDoesNotMatchTheImageIsAnError) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "other.tsv", "label\tname\n70001\tA\n70002\tB\n");
  EXPECT_THAT([&] { atlas::LoadAtlas(SourcePath("atlases/aal/ROI_MNI_V4.nii.gz"), tmp / "other.tsv"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("no label of the table occurs in the atlas image")));
}

TEST(Atlas, PartlyMatchingTableIsReported) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "partial.tsv", "label\tname\n2001\tPrecentral_L\n2002\tPrecentral_R\n99\tNowhere\n");
  const atlas::Atlas a = atlas::LoadAtlas(SourcePath("atlases/aal/ROI_MNI_V4.nii.gz"), tmp / "partial.tsv");
  EXPECT_EQ(a.regions.size(), 116u);  // 2 named + 114 unnamed, named label_<value>
  ASSERT_EQ(a.warnings.size(), 2u);
  EXPECT_THAT(a.warnings[0], HasSubstr("Nowhere (99)"));
  EXPECT_THAT(a.warnings[1], HasSubstr("114 label value(s) of the image are missing from the table"));
}

TEST(Atlas, NonIntegerLabelImageIsAnError) {
  neuromkl::testing::TempDir tmp;
  io::Volume v;
  v.geometry.dims = {4, 5, 6};
  v.data.assign(120, 0.5f);
  io::WriteVolume(tmp / "prob.nii", v);
  neuromkl::testing::WriteFile(tmp / "t.tsv", "label\tname\n1\tA\n");
  EXPECT_THAT([&] { atlas::LoadAtlas(tmp / "prob.nii", tmp / "t.tsv"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("non-integer")));
}

// A label of 1e10 does not fit int32 (converting it would be undefined behaviour): an error naming the file and
// the value. A table code beyond 32 bits likewise names the table.
TEST(Atlas, LabelsBeyondThe32BitRangeAreAnError) {
  neuromkl::testing::TempDir tmp;
  io::Volume v;
  v.geometry.dims = {4, 5, 6};
  v.data.assign(120, 1.0f);
  v.data[7] = 1e10f;
  io::WriteVolume(tmp / "big.nii", v);
  neuromkl::testing::WriteFile(tmp / "t.tsv", "label\tname\n1\tA\n");
  EXPECT_THAT([&] { atlas::LoadAtlas(tmp / "big.nii", tmp / "t.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("big.nii"), HasSubstr("found 1 voxels beyond that range (stored as float32), the first with label 1e+10"))));
  v.data[7] = 2.0f;
  io::WriteVolume(tmp / "ok.nii", v);
  neuromkl::testing::WriteFile(tmp / "huge.tsv", "label\tname\n1\tA\n4294967298\tB\n");
  EXPECT_THAT([&] { atlas::LoadAtlas(tmp / "ok.nii", tmp / "huge.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("huge.tsv"), HasSubstr("label code 4294967298"))));
}

}  // namespace

namespace {
// A table listing a code twice would give two regions sharing voxels, or one name silently winning: an error
// naming the code and both lines of the file.
TEST(Atlas, LabelCodeListedTwiceIsAnErrorNamingBothLines) {
  neuromkl::testing::TempDir tmp;
  io::Volume v;
  v.geometry.dims = {4, 5, 6};
  v.data.assign(120, 1.0f);
  v.data[7] = 2.0f;
  io::WriteVolume(tmp / "two.nii", v);
  neuromkl::testing::WriteFile(tmp / "dup.tsv", "label\tname\n# a comment line\n1\tA\n2\tB\n1\tC\n");
  EXPECT_THAT([&] { atlas::LoadAtlas(tmp / "two.nii", tmp / "dup.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("dup.tsv"),
                                                                     HasSubstr("label code 1 (column label) is listed twice: line 3 (A) and line 5 (C)"))));
  // FreeSurfer LUT rows are line-numbered the same way.
  neuromkl::testing::WriteFile(tmp / "dup_lut.txt", "0 Unknown 0 0 0 0\n1 A 10 10 10 0\n2 B 20 20 20 0\n2 C 30 30 30 0\n");
  EXPECT_THAT([&] { atlas::LoadAtlas(tmp / "two.nii", tmp / "dup_lut.txt"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("label code 2 (column value) is listed twice: line 3 (B) and line 4 (C)")));
  // Unique codes load.
  neuromkl::testing::WriteFile(tmp / "ok.tsv", "label\tname\n1\tA\n2\tB\n");
  EXPECT_EQ(atlas::LoadAtlas(tmp / "two.nii", tmp / "ok.tsv").regions.size(), 2u);
}
}  // namespace

namespace {
/// Labels are the file's integers, exactly: not passed through float32, where 16777216 and 16777217 are one
/// value (two regions merged) and 2147483647 rounds to 2^31 (a valid int32 code refused); a uint64 code
/// beyond 32 bits is refused with its exact value (through float32 and back it wrapped to another label).
TEST(Atlas, LabelsAreTheExactIntegersOfTheFilesType) {
  namespace t = neuromkl::testing;
  t::TempDir tmp;
  t::FixtureImage image;
  image.dims = {2, 2, 2};
  image.datatype = 8;  // int32
  image.stored = {0, 16777216, 16777217, 16777217, 2147483647, 2147483600, 0, 16777216};
  t::WriteFixtureImage(tmp / "int32.nii", t::FixtureFormat::Nifti1, image);
  t::WriteFile(tmp / "t.tsv", "label\tname\n16777216\tA\n16777217\tB\n2147483647\tC\n2147483600\tD\n");
  const atlas::Atlas a = atlas::LoadAtlas(tmp / "int32.nii", tmp / "t.tsv");
  ASSERT_EQ(a.regions.size(), 4u);
  EXPECT_EQ(a.regions[0].label, 16777216);
  EXPECT_EQ(a.regions[1].label, 16777217);
  EXPECT_EQ(a.regions[2].label, 2147483647);
  EXPECT_EQ(a.regions[3].label, 2147483600);
  EXPECT_EQ(a.labels, (std::vector<std::int32_t>{0, 16777216, 16777217, 16777217, 2147483647, 2147483600, 0, 16777216}));
  EXPECT_TRUE(a.warnings.empty());
  const auto index = atlas::BuildRegionIndex(a, a.geometry, nullptr);
  ASSERT_EQ(index.regions.size(), 4u);
  EXPECT_EQ(index.regions[0].voxels, (std::vector<std::int64_t>{1, 7}));
  EXPECT_EQ(index.regions[1].voxels, (std::vector<std::int64_t>{2, 3}));

  // uint64 2^63 + 5: its low bits would read as label 5.
  image.datatype = 1280;
  image.stored = {0, 1, 1, 5, 0, 0, 0, 0};
  t::WriteFixtureImage(tmp / "uint64.nii", t::FixtureFormat::Nifti1, image);
  auto bytes = t::ReadBytes(tmp / "uint64.nii");
  const std::uint64_t huge = (std::uint64_t{1} << 63) + 5;
  std::memcpy(bytes.data() + 352 + 2 * 8, &huge, 8);
  t::WriteBytes(tmp / "uint64.nii", bytes);
  t::WriteFile(tmp / "u.tsv", "label\tname\n1\tA\n5\tB\n");
  EXPECT_THAT([&] { atlas::LoadAtlas(tmp / "uint64.nii", tmp / "u.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(
                  HasSubstr("uint64.nii"),
                  HasSubstr("found 1 voxels beyond that range (stored as uint64), the first with label 9223372036854775813"))));
}
}  // namespace

namespace {
// Atlas tables refused without a line number (one bad index cell made the column stop counting as labels: "no
// integer column"; a header alone read as a data row) say which line and what was found.
TEST(Atlas, LabelTableErrorsNameTheLine) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "bad_cell.tsv", "index\tname\n1\tA\n\n2x\tB\n3\tC\n");
  EXPECT_THAT([&] { atlas::ReadLabelTable(tmp / "bad_cell.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(
                  HasSubstr("bad_cell.tsv:4"), HasSubstr("column \"index\" holds \"2x\", expected an integer label code (as in its other rows)"))));
  neuromkl::testing::WriteFile(tmp / "header_only.tsv", "# made by hand\nindex\tname\n");
  EXPECT_THAT([&] { atlas::ReadLabelTable(tmp / "header_only.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("header_only.tsv:2"),
                                                                     HasSubstr("has a header (\"index name\") but no rows"))));
  neuromkl::testing::WriteFile(tmp / "ragged.tsv", "index\tname\n1\tA\n2\tB\textra\n");
  EXPECT_THAT([&] { atlas::ReadLabelTable(tmp / "ragged.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("ragged.tsv:3"), HasSubstr("this row has 3 columns, expected 2"))));
  // Header-less AAL text: a code column with one bad cell among integers.
  neuromkl::testing::WriteFile(tmp / "aal.txt", "FAG\tPrecentral_L\t2001\nFAD\tPrecentral_R\t2002\nF1G\tFrontal_Sup_L\t2101?\n");
  EXPECT_THAT([&] { atlas::ReadLabelTable(tmp / "aal.txt"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("aal.txt:3"), HasSubstr("column 3 holds \"2101?\""))));
}
}  // namespace

