// Inputs the way the field stores them, end to end through the CLI: SPM-style int16 .hdr/.img
// pairs with scl_slope, NIfTI-2, gzip, BIDS datasets found by entities, and atlases in dseg.tsv,
// FSL XML, FreeSurfer LUT and 4-D probabilistic form. Every fixture is written here byte by byte.
#include <cmath>
#include <filesystem>
#include <random>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "image_fixtures.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/strings.hpp"
#include "testing.hpp"

using neuromkl::testing::FixtureFormat;
using neuromkl::testing::FixtureImage;
using neuromkl::testing::ReadFile;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using neuromkl::testing::WriteFixtureImage;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

constexpr int kSubjects = 16;
const std::array<std::int64_t, 3> kDims{6, 5, 4};
constexpr std::size_t kVoxels = 6 * 5 * 4;
// SPM-style scaling of int16 data; a power of two so that NIfTI-1 (float32 scl_slope) and NIfTI-2
// (float64) headers hold the same slope and every format decodes to the same float32 values.
constexpr double kSlope = 1.0 / 128;

FixtureImage Grid() {
  FixtureImage im;
  im.dims = kDims;
  im.spacing = {2, 2, 2};
  im.rasOrigin = {-6, -4, -4};
  return im;
}

/// Region "left" is x < 3, "right" x >= 3; the class signal sits in "left".
int LeftRight(std::size_t v) { return static_cast<int>(v % 6) < 3 ? 1 : 2; }

/// Stored int16 values of every subject (deterministic), and the float32 values a reader must give.
struct CohortValues {
  std::vector<std::vector<double>> stored;
  std::vector<std::string> groups;
  CohortValues() {
    std::mt19937 rng(21);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int s = 0; s < kSubjects; ++s) {
      const double y = s % 2 ? 1.0 : -1.0;
      groups.push_back(y > 0 ? "AD" : "CN");
      std::vector<double> values;
      for (std::size_t v = 0; v < kVoxels; ++v) values.push_back(std::round((100.0 + 20.0 * normal(rng) + (LeftRight(v) == 1 ? 15.0 * y : 0.0)) / kSlope));
      stored.push_back(values);
    }
  }
  /// What decoding gives: float32(stored * float32(slope)), the scaling in double.
  std::vector<double> Decoded(int s) const {
    std::vector<double> out;
    for (double x : stored[static_cast<std::size_t>(s)]) out.push_back(static_cast<float>(x * static_cast<double>(static_cast<float>(kSlope))));
    return out;
  }
};

/// Writes the cohort's images (`extension` decides the name, `format` the header) and a participants.tsv.
void WriteCohort(const std::string& dir, const CohortValues& values, FixtureFormat format, const std::string& extension, bool scaledInt16) {
  std::string table = "participant_id\tgroup\timage\n";
  for (int s = 0; s < kSubjects; ++s) {
    FixtureImage im = Grid();
    if (scaledInt16) {
      im.datatype = 4;
      im.slope = kSlope;
      im.stored = values.stored[static_cast<std::size_t>(s)];
    } else {
      im.datatype = 16;
      im.stored = values.Decoded(s);
    }
    const std::string name = "sub-" + std::to_string(s + 1) + extension;
    WriteFixtureImage(dir + "/images/" + name, format, im);
    table += "sub-" + std::to_string(s + 1) + "\t" + values.groups[static_cast<std::size_t>(s)] + "\timages/" + name + "\n";
  }
  WriteFile(dir + "/participants.tsv", table);
}

/// A label image on the cohort grid with the given value for "left"/"right" voxels.
void WriteLabels(const std::string& path, int left, int right) {
  FixtureImage im = Grid();
  im.datatype = 4;
  for (std::size_t v = 0; v < kVoxels; ++v) im.stored.push_back(v < 6 ? 0 : (LeftRight(v) == 1 ? left : right));  // first row: background
  WriteFixtureImage(path, FixtureFormat::Nifti1, im);
}

std::string Study(const std::string& name, const std::string& subjects, const std::string& atlas) {
  return R"({"name": ")" + name + R"(", "subjects": )" + subjects + R"(,
    "target": {"column": "group", "task": "classification", "positive_class": "AD"},
    "atlas": )" + atlas + R"(, "cv": {"outer": {"k": 4}}, "kernels": {"cache": false},
    "learners": [{"name": "krr", "params": {"lambda": 1}}, {"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5}}]})";
}

const char* kDsegAtlas = R"({"image": "atlas/seg_dseg.nii", "labels": "atlas/seg_dseg.tsv", "space": "MNI152NLin2009cAsym"})";

void WriteDseg(const std::string& dir) {
  WriteLabels(dir + "/atlas/seg_dseg.nii", 1, 2);
  WriteFile(dir + "/atlas/seg_dseg.tsv", "index\tname\tabbreviation\n1\tleft\tL\n2\tright\tR\n");
}

Eigen::MatrixXd Kernel(const std::string& results, const std::string& file) { return neuromkl::ReadNpy(results + "/kernels/" + file); }

}  // namespace

TEST(InputFormats, SpmInt16PairsNifti2AndGzipRunAndEqualTheNiiRun) {
  const CohortValues values;
  struct Variant {
    std::string name;
    FixtureFormat format;
    std::string extension;
    bool scaled;
  };
  const std::vector<Variant> variants = {{"nii", FixtureFormat::Nifti1, ".nii", false},
                                         {"spm_pair", FixtureFormat::Nifti1Pair, ".hdr", true},
                                         {"pair_gz", FixtureFormat::Nifti1Pair, ".hdr.gz", true},
                                         {"nii_gz", FixtureFormat::Nifti1, ".nii.gz", true},
                                         {"nifti2", FixtureFormat::Nifti2, ".nii", true},
                                         {"nifti2_pair", FixtureFormat::Nifti2Pair, ".hdr", true}};
  TempDir root;
  std::string referencePredictions;
  Eigen::MatrixXd referenceLeft;
  for (const auto& variant : variants) {
    SCOPED_TRACE(variant.name);
    const std::string dir = root / variant.name;
    WriteCohort(dir, values, variant.format, variant.extension, variant.scaled);
    WriteDseg(dir);
    WriteFile(dir + "/study.json", Study("s", R"({"table": "participants.tsv"})", kDsegAtlas));
    const auto r = RunCli("run " + dir + "/study.json -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const std::string results = dir + "/results/s";
    const Eigen::MatrixXd left = Kernel(results, "k000_left.npy");
    ASSERT_EQ(left.rows(), kSubjects);
    const std::string predictions = ReadFile(results + "/predictions.tsv");
    if (variant.name == "nii") {
      referenceLeft = left;
      referencePredictions = predictions;
      // The kernel is X X' of the decoded values (float32 inputs, products summed in double).
      const auto x0 = values.Decoded(0), x1 = values.Decoded(1);
      double k01 = 0;
      for (std::size_t v = 6; v < kVoxels; ++v)
        if (LeftRight(v) == 1) k01 += x0[v] * x1[v];
      EXPECT_NEAR(left(0, 1), k01, 1e-6 * std::abs(k01));
      continue;
    }
    // Same decoded voxels, so bit-identical kernels and predictions.
    EXPECT_EQ(left, referenceLeft);
    EXPECT_EQ(predictions, referencePredictions);
  }
}

TEST(InputFormats, AnalyzePairsRunWithTheSpmConventionWarnedOnce) {
  const CohortValues values;
  TempDir dir;
  std::string table = "participant_id\tgroup\timage\n";
  for (int s = 0; s < kSubjects; ++s) {
    FixtureImage im = Grid();
    im.datatype = 4;
    im.slope = kSlope;
    im.stored = values.stored[static_cast<std::size_t>(s)];
    im.analyzeOriginator = {3, 3, 3};  // SPM: x = -2 (i - 3), y = 2 (j - 3), z = 2 (k - 3): Grid() mirrored in x
    WriteFixtureImage(dir / ("images/s" + std::to_string(s) + ".hdr"), FixtureFormat::Analyze, im);
    table += "sub-" + std::to_string(s) + "\t" + values.groups[static_cast<std::size_t>(s)] + "\timages/s" + std::to_string(s) + ".hdr\n";
  }
  WriteFile(dir / "participants.tsv", table);
  WriteDseg(dir.Path());
  WriteFile(dir / "study.json", Study("a", R"({"table": "participants.tsv"})", R"({"image": "atlas/seg_dseg.nii", "labels": "atlas/seg_dseg.tsv"})"));
  const auto r = RunCli("run " + (dir / "study.json"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // One warning for the study, not one per image.
  const std::string note = "images are Analyze 7.5 files";
  ASSERT_NE(r.output.find(note), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(note), r.output.rfind(note)) << r.output;
  EXPECT_THAT(r.output, HasSubstr("SPM"));
  EXPECT_THAT(ReadFile(dir / "results/a/results.json"), HasSubstr(note));
  // An SPM .mat beside an Analyze image (a reoriented image) is named: neuromkl cannot read it.
  WriteFile(dir / "images/s3.mat", "MATLAB 5.0 MAT-file");
  const auto v = RunCli("validate " + (dir / "study.json"));
  EXPECT_EQ(v.exitCode, 0) << v.output;
  EXPECT_THAT(v.output, HasSubstr("1 Analyze image(s) have an SPM .mat file beside them"));
  EXPECT_THAT(v.output, HasSubstr("s3.mat"));
}

TEST(InputFormats, AtlasTablesInDsegFslXmlAndFreeSurferLutRunEndToEnd) {
  const CohortValues values;
  TempDir dir;
  WriteCohort(dir.Path(), values, FixtureFormat::Nifti1, ".nii", false);
  WriteDseg(dir.Path());
  // FSL XML: region i is value i + 1 in a label image.
  WriteLabels(dir / "atlas/fsl.nii", 1, 2);
  WriteFile(dir / "atlas/fsl.xml", R"(<?xml version="1.0" encoding="ISO-8859-1"?>
<atlas version="1.0">
  <header><name>Test atlas</name><type>Label</type></header>
  <data>
    <label index="0" x="10" y="20" z="30">Left &amp; lateral</label>
    <label index="1" x="40" y="20" z="30">Right</label>
  </data>
</atlas>)");
  // FreeSurfer LUT with aseg-style values.
  WriteLabels(dir / "atlas/aseg.nii", 17, 53);
  WriteFile(dir / "atlas/lut.txt", "#No. Label Name:                R   G   B   A\n0   Unknown  0 0 0 0\n17  Left-Hippocampus  220 216  20 0\n"
                                   "53  Right-Hippocampus 220 216 20 0\n2   Left-Cerebral-White-Matter 245 245 245 0\n");
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"dseg", kDsegAtlas, "left"},
      {"fsl", R"({"image": "atlas/fsl.nii", "labels": "atlas/fsl.xml"})", "Left & lateral"},
      {"lut", R"({"image": "atlas/aseg.nii", "labels": "atlas/lut.txt"})", "Left-Hippocampus"},
      {"combined", R"({"images": [{"image": "atlas/seg_dseg.nii", "labels": "atlas/seg_dseg.tsv", "prefix": "ctx"},
                                  {"image": "atlas/aseg.nii", "labels": "atlas/lut.txt", "prefix": "sub"}]})", "ctx_left"}};
  for (const auto& [name, atlas, leftName] : cases) {
    SCOPED_TRACE(name);
    WriteFile(dir / (name + ".json"), Study(name, R"({"table": "participants.tsv"})", atlas));
    const auto r = RunCli("run " + (dir / (name + ".json")) + " -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto regions = neuromkl::testing::ReadTsv(dir / ("results/" + name + "/regions_enmkl_krr.tsv"));
    ASSERT_EQ(regions.size(), name == "combined" ? 5u : 3u);  // header + regions
    std::string all;
    for (const auto& row : regions) all += neuromkl::Join(row, "|") + "\n";
    EXPECT_THAT(all, HasSubstr(leftName));
    // The signal region ranks first (it carries the class difference).
    EXPECT_THAT(neuromkl::ToLower(neuromkl::Join(regions[1], "|")), HasSubstr("left"));
  }
  // The combined study: both images' regions, prefixed, with labels kept apart; same voxels, same kernels.
  const std::string combined = dir / "results/combined";
  EXPECT_EQ(Kernel(combined, "k000_ctx_left.npy"), Kernel(dir / "results/dseg", "k000_left.npy"));
  EXPECT_THAT(ReadFile(combined + "/regions.tsv"), HasSubstr("1000017"));
  // validate names the detected table formats.
  const auto v = RunCli("validate " + (dir / "combined.json"));
  EXPECT_EQ(v.exitCode, 0) << v.output;
  EXPECT_THAT(v.output, HasSubstr("tsv;"));
  EXPECT_THAT(v.output, HasSubstr("freesurfer_lut;"));
}

TEST(InputFormats, ProbabilisticAtlasGivesVoxelWeightedKernels) {
  const CohortValues values;
  TempDir dir;
  WriteCohort(dir.Path(), values, FixtureFormat::Nifti1, ".nii", false);
  // Two overlapping regions in percent (as FSL stores them): p_left falls from 100 to 0 along x.
  FixtureImage prob = Grid();
  prob.volumes = 2;
  prob.datatype = 2;  // uint8 percent
  std::vector<double> pLeft(kVoxels), pRight(kVoxels);
  for (std::size_t v = 0; v < kVoxels; ++v) {
    const double x = static_cast<double>(v % 6);
    pLeft[v] = 100 - 20 * x;
    pRight[v] = 20 * x;
  }
  prob.stored = pLeft;
  prob.stored.insert(prob.stored.end(), pRight.begin(), pRight.end());
  WriteFixtureImage(dir / "atlas/prob.nii.gz", FixtureFormat::Nifti1, prob);
  WriteFile(dir / "atlas/prob.xml", R"(<atlas><header><type>Probabilistic</type></header><data>
<label index="0">left</label><label index="1">right</label></data></atlas>)");
  WriteFile(dir / "study.json",
            Study("p", R"({"table": "participants.tsv"})", R"({"image": "atlas/prob.nii.gz", "labels": "atlas/prob.xml", "probabilistic": true, "threshold": 0.3})"));
  const auto r = RunCli("run " + (dir / "study.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // K_r = X diag(p_r) X' over voxels with p_r > 0.3, p in [0, 1].
  for (const auto& [file, p] : {std::pair{"k000_left.npy", pLeft}, std::pair{"k001_right.npy", pRight}}) {
    const Eigen::MatrixXd K = Kernel(dir / "results/p", file);
    Eigen::MatrixXd expected = Eigen::MatrixXd::Zero(kSubjects, kSubjects);
    for (int a = 0; a < kSubjects; ++a) {
      const auto xa = values.Decoded(a);
      for (int b = 0; b < kSubjects; ++b) {
        const auto xb = values.Decoded(b);
        for (std::size_t v = 0; v < kVoxels; ++v)
          if (p[v] / 100 > 0.3) expected(a, b) += static_cast<double>(static_cast<float>(p[v]) / 100.0f) * xa[v] * xb[v];
      }
    }
    // float32 products summed in double: ~1e-6 relative (README "Precision").
    EXPECT_TRUE(neuromkl::testing::MatrixNear(K, expected, 0, 1e-5)) << file;
  }
  EXPECT_TRUE(fs::exists(dir / "results/p/weights/sub-group_desc-EnmklKrrMean_weights.nii.gz"));
  // Rows and volumes must agree.
  WriteFile(dir / "atlas/three.xml", R"(<atlas><data><label index="0">a</label><label index="1">b</label><label index="2">c</label></data></atlas>)");
  WriteFile(dir / "bad.json",
            Study("b", R"({"table": "participants.tsv"})", R"({"image": "atlas/prob.nii.gz", "labels": "atlas/three.xml", "probabilistic": true})"));
  const auto bad = RunCli("run " + (dir / "bad.json") + " -q");
  EXPECT_EQ(bad.exitCode, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("the table names 3 regions but the probabilistic atlas"));
  EXPECT_THAT(bad.output, HasSubstr("has 2 volumes"));
}

TEST(InputFormats, BidsDerivativesFoundByEntitiesWithOnlyRootAndEntities) {
  const CohortValues values;
  TempDir dir;
  const std::string ds = dir / "ds";
  std::string table = "participant_id\tgroup\tage\n";
  for (int s = 0; s < kSubjects; ++s) {
    const std::string sub = "sub-" + std::string(s < 9 ? "0" : "") + std::to_string(s + 1);
    table += sub + "\t" + values.groups[static_cast<std::size_t>(s)] + "\t" + std::to_string(60 + s) + "\n";
    FixtureImage im = Grid();
    im.stored = values.Decoded(s);
    const std::string anat = ds + "/derivatives/fmriprep/" + sub + "/anat/";
    WriteFixtureImage(anat + sub + "_space-MNI152NLin2009cAsym_label-GM_probseg.nii.gz", FixtureFormat::Nifti1, im);
    // Distractors: other tissue, other space, the preprocessed T1w, and the raw image.
    WriteFixtureImage(anat + sub + "_space-MNI152NLin2009cAsym_label-WM_probseg.nii.gz", FixtureFormat::Nifti1, im);
    WriteFixtureImage(anat + sub + "_label-GM_probseg.nii.gz", FixtureFormat::Nifti1, im);
    WriteFixtureImage(anat + sub + "_space-MNI152NLin2009cAsym_desc-preproc_T1w.nii.gz", FixtureFormat::Nifti1, im);
    WriteFixtureImage(ds + "/" + sub + "/anat/" + sub + "_T1w.nii.gz", FixtureFormat::Nifti1, im);
    WriteFile(anat + sub + "_space-MNI152NLin2009cAsym_label-GM_probseg.json", "{}");
  }
  WriteFile(ds + "/participants.tsv", table);
  WriteFile(ds + "/participants.json", R"({"group": {"Description": "diagnosis", "Levels": {"AD": "Alzheimer's disease", "CN": "cognitively normal"}},
                                          "age": {"Units": "years"}})");
  WriteFile(ds + "/dataset_description.json", R"({"Name": "test", "BIDSVersion": "1.8.0"})");
  WriteDseg(dir.Path());
  const std::string bids = R"({"bids": {"root": "ds", "entities": {"space": "MNI152NLin2009cAsym", "label": "GM", "suffix": "probseg"}}})";
  WriteFile(dir / "study.json", Study("bids", bids, kDsegAtlas));
  const auto v = RunCli("validate " + (dir / "study.json"));
  ASSERT_EQ(v.exitCode, 0) << v.output;
  EXPECT_THAT(v.output, HasSubstr("\"AD\" = Alzheimer's disease"));
  EXPECT_THAT(v.output, HasSubstr("found by BIDS entities"));
  const auto r = RunCli("run " + (dir / "study.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // The same images as a plain table: identical kernels.
  std::string plain = "subject\tgroup\timage\n";  // the old "subject" column, ids without "sub-"
  for (int s = 0; s < kSubjects; ++s) {
    const std::string label = std::string(s < 9 ? "0" : "") + std::to_string(s + 1);
    plain += label + "\t" + values.groups[static_cast<std::size_t>(s)] + "\tds/derivatives/fmriprep/sub-" + label + "/anat/sub-" + label +
             "_space-MNI152NLin2009cAsym_label-GM_probseg.nii.gz\n";
  }
  WriteFile(dir / "plain.tsv", plain);
  WriteFile(dir / "plain.json", Study("plain", R"({"table": "plain.tsv"})", kDsegAtlas));
  const auto p = RunCli("run " + (dir / "plain.json") + " -q");
  ASSERT_EQ(p.exitCode, 0) << p.output;
  EXPECT_EQ(Kernel(dir / "results/bids", "k000_left.npy"), Kernel(dir / "results/plain", "k000_left.npy"));
  // The outputs are a BIDS derivative of that dataset (docs/outputs.md): SourceDatasets names it, the maps carry the atlas space.
  const std::string description = ReadFile(dir / "results/bids/dataset_description.json");
  EXPECT_THAT(description, HasSubstr("\"DatasetType\": \"derivative\""));
  EXPECT_THAT(description, HasSubstr("\"URL\": \"file://" + fs::absolute(dir / "ds").lexically_normal().string() + "\""));
  EXPECT_THAT(ReadFile(dir / "results/plain/dataset_description.json"), Not(HasSubstr("SourceDatasets")));
  for (const char* map : {"KrrMean", "KrrFold3", "EnmklKrrMean"}) {
    const std::string stem = std::string("results/bids/weights/sub-group_space-MNI152NLin2009cAsym_desc-") + map + "_weights";
    EXPECT_TRUE(fs::exists(dir / (stem + ".nii.gz"))) << map;
    EXPECT_THAT(ReadFile(dir / (stem + ".json")), HasSubstr("\"AtlasSpace\": \"MNI152NLin2009cAsym\"")) << map;
  }
  // A "subject" column without "sub-" also finds BIDS images; derivatives narrows the search.
  WriteFile(dir / "ids.tsv", "subject\tgroup\n" + [&] {
    std::string rows;
    for (int s = 0; s < kSubjects; ++s)
      rows += std::string(s < 9 ? "0" : "") + std::to_string(s + 1) + "\t" + values.groups[static_cast<std::size_t>(s)] + "\n";
    return rows;
  }());
  WriteFile(dir / "ids.json",
            Study("ids", R"({"table": "ids.tsv", "bids": {"root": "ds", "derivatives": "derivatives/fmriprep", "entities": {"space": "MNI152NLin2009cAsym", "label": "GM", "suffix": "probseg", "extension": ".nii.gz"}}})",
                  kDsegAtlas));
  const auto ids = RunCli("validate " + (dir / "ids.json"));
  EXPECT_EQ(ids.exitCode, 0) << ids.output;
  // The atlas in another space than the images: a warning.
  WriteFile(dir / "space.json", Study("space", bids, R"({"image": "atlas/seg_dseg.nii", "labels": "atlas/seg_dseg.tsv", "space": "MNI152NLin6Asym"})"));
  const auto sp = RunCli("validate " + (dir / "space.json"));
  EXPECT_EQ(sp.exitCode, 0) << sp.output;
  EXPECT_THAT(sp.output, HasSubstr("/atlas/space is \"MNI152NLin6Asym\" but image names say space-MNI152NLin2009cAsym"));
}

TEST(InputFormats, BadInputsAreClearErrorsWithExitCode2) {
  const CohortValues values;
  TempDir dir;
  WriteCohort(dir.Path(), values, FixtureFormat::Nifti1Pair, ".hdr", true);
  WriteDseg(dir.Path());
  WriteFile(dir / "study.json", Study("e", R"({"table": "participants.tsv"})", kDsegAtlas));
  auto expectError = [&](const std::string& what, const std::vector<std::string>& phrases) {
    SCOPED_TRACE(what);
    const auto r = RunCli("run " + (dir / "study.json") + " -q");
    EXPECT_EQ(r.exitCode, 2) << r.output;
    for (const auto& phrase : phrases) EXPECT_THAT(r.output, HasSubstr(phrase));
  };
  // A pair with its .img missing.
  fs::rename(dir / "images/sub-3.img", dir / "images/sub-3.img.moved");
  expectError("missing .img", {"sub-3.hdr", "a .hdr/.img pair needs both files", "sub-3.img"});
  fs::rename(dir / "images/sub-3.img.moved", dir / "images/sub-3.img");
  // An .img shorter than its header says.
  auto bytes = neuromkl::testing::ReadBytes(dir / "images/sub-5.img");
  bytes.resize(bytes.size() / 2);
  neuromkl::testing::WriteBytes(dir / "images/sub-5.img", bytes);
  expectError(".img too short", {"sub-5.img", "240 bytes", "only 120 bytes", "truncated"});
  // Analyze with a datatype Analyze cannot hold as a scalar (128 = RGB).
  FixtureImage rgb = Grid();
  rgb.datatype = 128;
  rgb.stored.assign(kVoxels, 1.0);
  WriteFixtureImage(dir / "images/sub-5.hdr", FixtureFormat::Analyze, rgb);
  expectError("Analyze RGB", {"sub-5.hdr", "Analyze 7.5 header: unsupported datatype 128"});
  WriteCohort(dir.Path(), values, FixtureFormat::Nifti1Pair, ".hdr", true);
  // Atlas table and image that do not match.
  WriteFile(dir / "atlas/seg_dseg.tsv", "index\tname\n7\tseven\n8\teight\n");
  expectError("atlas table mismatch", {"seg_dseg.tsv", "no label of the table occurs in the atlas image"});
  WriteDseg(dir.Path());
  // participants.json levels that do not include a class of the target.
  WriteFile(dir / "participants.json", R"({"group": {"Levels": {"AD": "Alzheimer's disease", "HC": "healthy control"}}})");
  expectError("undeclared level", {"participants.json", "\"CN\" (8 subjects)", "declared levels: AD, HC"});
  fs::remove(dir / "participants.json");
  // BIDS: one participant with two sessions, one with no match: one error listing both.
  const std::string ds = dir / "ds";
  std::string table = "participant_id\tgroup\n";
  for (int s = 0; s < 4; ++s) {
    const std::string sub = "sub-" + std::to_string(s + 1);
    table += sub + "\t" + (s % 2 ? "AD" : "CN") + "\n";
    FixtureImage im = Grid();
    im.stored = values.Decoded(s);
    const std::string name = sub + "_space-MNI_desc-smoothed_pet.nii";
    if (s == 1) {
      WriteFixtureImage(ds + "/" + sub + "/ses-1/pet/" + sub + "_ses-1_space-MNI_desc-smoothed_pet.nii", FixtureFormat::Nifti1, im);
      WriteFixtureImage(ds + "/" + sub + "/ses-2/pet/" + sub + "_ses-2_space-MNI_desc-smoothed_pet.nii", FixtureFormat::Nifti1, im);
    } else if (s == 2) {
      WriteFixtureImage(ds + "/" + sub + "/pet/" + sub + "_space-MNI_pet.nii", FixtureFormat::Nifti1, im);
    } else {
      WriteFixtureImage(ds + "/" + sub + "/pet/" + name, FixtureFormat::Nifti1, im);
    }
  }
  WriteFile(ds + "/participants.tsv", table);
  WriteFile(dir / "study.json", Study("e", R"({"bids": {"root": "ds", "entities": {"space": "MNI", "desc": "smoothed", "suffix": "pet"}}})", kDsegAtlas));
  expectError("ambiguous BIDS", {"2 of 4 participants have none or several",
                                 "sub-2: 2 images match (sub-2_ses-1_space-MNI_desc-smoothed_pet.nii, sub-2_ses-2_space-MNI_desc-smoothed_pet.nii)",
                                 "sub-3: no image matches; its images are sub-3_space-MNI_pet.nii"});
}

TEST(InputFormats, KernelCacheSeesAChangedImgOfAPair) {
  // The cache key hashes both halves of a pair: new voxels in an .img (same .hdr) are new kernels.
  const CohortValues values;
  TempDir dir;
  WriteCohort(dir.Path(), values, FixtureFormat::Nifti1Pair, ".hdr", true);
  WriteDseg(dir.Path());
  std::string study = Study("c", R"({"table": "participants.tsv"})", kDsegAtlas);
  study.replace(study.find(R"("kernels": {"cache": false})"), std::string(R"("kernels": {"cache": false})").size(), R"("kernels": {"cache": true})");
  WriteFile(dir / "study.json", study);
  auto r = RunCli("run " + (dir / "study.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const Eigen::MatrixXd before = Kernel(dir / "results/c", "k000_left.npy");
  FixtureImage im = Grid();
  im.datatype = 4;
  im.slope = kSlope;
  im.stored = values.stored[0];
  im.stored[7] += 1000;  // voxel 7 is in "left"
  WriteFixtureImage(dir / "images/sub-1.hdr", FixtureFormat::Nifti1Pair, im);
  r = RunCli("run " + (dir / "study.json") + " -q --force");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const Eigen::MatrixXd after = Kernel(dir / "results/c", "k000_left.npy");
  EXPECT_GT(std::abs(after(0, 0) - before(0, 0)), 1e-3 * before(0, 0));  // 1000 / 128 more in one of ~45 voxels: ~0.3 %
  // Other subjects' entries keep their value; not bit for bit, because subject 0 is the reference row
  // of the float products (README "Precision": ~1e-6 relative).
  EXPECT_NEAR(after(1, 2), before(1, 2), 1e-6 * before(1, 2));
}

/// kernels.sources in a BIDS dataset: each image source picks its image by its own entities, and a
/// participant without a match of one source is listed (error) or dropped (missing_source "drop").
TEST(InputFormats, BidsSourcesPickTheirImagesByTheirOwnEntities) {
  const CohortValues values;
  TempDir dir;
  const std::string ds = dir / "ds";
  std::string table = "participant_id\tgroup\n";
  for (int s = 0; s < kSubjects; ++s) {
    const std::string sub = "sub-" + std::string(s < 9 ? "0" : "") + std::to_string(s + 1);
    table += sub + "\t" + values.groups[static_cast<std::size_t>(s)] + "\n";
    FixtureImage gm = Grid(), wm = Grid();
    gm.stored = values.Decoded(s);
    wm.stored = values.Decoded((s + 5) % kSubjects);  // another image: the two sources differ
    const std::string anat = ds + "/derivatives/fmriprep/" + sub + "/anat/" + sub + "_space-MNI152NLin2009cAsym_label-";
    WriteFixtureImage(anat + "GM_probseg.nii.gz", FixtureFormat::Nifti1, gm);
    if (s != 4) WriteFixtureImage(anat + "WM_probseg.nii.gz", FixtureFormat::Nifti1, wm);  // sub-05 has no WM map
  }
  WriteFile(ds + "/participants.tsv", table);
  WriteFile(ds + "/dataset_description.json", R"({"Name": "test", "BIDSVersion": "1.8.0"})");
  WriteDseg(dir.Path());
  const std::string subjects = R"({"bids": {"root": "ds", "entities": {"space": "MNI152NLin2009cAsym", "suffix": "probseg", "label": "GM"}}})";
  auto study = [&](const std::string& name, const std::string& extra) {
    std::string text = Study(name, subjects, kDsegAtlas);
    const std::string plain = R"("kernels": {"cache": false})";
    const std::string sources = R"("kernels": {"cache": false, )" + extra + R"("sources": [{"name": "gm", "kind": "images"},
        {"name": "wm", "kind": "images", "bids_entities": {"space": "MNI152NLin2009cAsym", "suffix": "probseg", "label": "WM"}}]})";
    text.replace(text.find(plain), plain.size(), sources);
    WriteFile(dir / (name + ".json"), text);
    return dir / (name + ".json");
  };
  auto r = RunCli("validate " + study("both", ""));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("1 of 16 subjects lack a source's data: sub-05 (source \"wm\": no image with its BIDS entities)"));
  r = RunCli("run " + study("dropped", R"("missing_source": "drop", )") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string results = ReadFile(dir / "results/dropped/results.json");
  EXPECT_THAT(results, HasSubstr("\"dropped\": ["));
  EXPECT_THAT(results, HasSubstr("\"id\": \"sub-05\""));
  // Each source read its own images: the sources' kernels differ, and gm's equal the single-source study's
  // without the dropped participant.
  const auto gm = Kernel(dir / "results/dropped", "k000_gm_left.npy");
  EXPECT_NE(gm, Kernel(dir / "results/dropped", "k002_wm_left.npy"));
  WriteFile(dir / "single.json", Study("single", subjects, kDsegAtlas));
  r = RunCli("run " + (dir / "single.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto all = Kernel(dir / "results/single", "k000_left.npy");
  std::vector<int> keep;
  for (int s = 0; s < kSubjects; ++s)
    if (s != 4) keep.push_back(s);
  const Eigen::VectorXi k = Eigen::Map<const Eigen::VectorXi>(keep.data(), static_cast<Eigen::Index>(keep.size()));
  // Not bit for bit: the kernels' float products are taken relative to the first subject's image, which
  // differs once sub-05 is out (README "Precision": ~1e-6 relative).
  EXPECT_TRUE(gm.isApprox(Eigen::MatrixXd(all(k, k)), 1e-6));
}
