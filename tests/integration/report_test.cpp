// Results a researcher can read: region rankings find the planted signal, maps are non-zero there,
// and report.html renders in a real browser (Debian's chromium, headless).
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using namespace neuromkl;
using neuromkl::testing::ReadFile;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

class Report : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_EQ(RunCli("simulate --out " + (*dir_ / "cohort") + " --subjects 30 --effect 1.2 --seed 8 -q").exitCode, 0);
    // With a permutation test, so the report shows its null distributions.
    std::string study = ReadFile(*dir_ / "cohort/study.json");
    study.insert(study.find('{') + 1, "\n  \"permutations\": {\"count\": 9},");
    neuromkl::testing::WriteFile(*dir_ / "cohort/study.json", study);
    const auto r = RunCli("run " + (*dir_ / "cohort/study.json") + " --out " + (*dir_ / "out") + " -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
};
TempDir* Report::dir_ = nullptr;

TEST_F(Report, TopRankedRegionsAreThePlantedSignal) {
  const auto rows = neuromkl::testing::ReadTsv(*dir_ / "out/regions_enmkl_svm.tsv");
  ASSERT_GT(rows.size(), 4u);
  EXPECT_EQ(rows[0][0], "rank");
  std::set<std::string> top = {rows[1][2], rows[2][2], rows[3][2]};
  EXPECT_EQ(top, (std::set<std::string>{"Hippocampus_L", "Precuneus_R", "Frontal_Mid_L"}));
  EXPECT_THAT(ReadFile(*dir_ / "out/regions_enmkl_svm.json"), HasSubstr("rank 1 = largest weight, ties share the average"));
}

TEST_F(Report, MeanWeightMapIsNonZeroWhereTheSignalWas) {
  const io::Volume map = io::ReadVolume(*dir_ / "out/weights/sub-group_space-MNIColin27_desc-EnmklSvmMean_weights.nii.gz");
  const auto files = atlas::BuiltinAtlas("aal");
  const atlas::Atlas aal = atlas::LoadAtlas(files->image, files->table);
  ASSERT_TRUE(map.geometry.DifferenceFrom(aal.geometry).empty());
  double signal = 0, elsewhere = 0;
  long signalVoxels = 0, nonzeroSignal = 0;
  for (std::size_t v = 0; v < map.data.size(); ++v) {
    const auto label = aal.labels[v];
    const bool planted = label == 4101 || label == 6302 || label == 2201;  // Hippocampus_L, Precuneus_R, Frontal_Mid_L
    if (planted) {
      ++signalVoxels;
      nonzeroSignal += map.data[v] != 0.0f;
      signal += std::abs(map.data[v]);
    } else {
      elsewhere += std::abs(map.data[v]);
    }
  }
  EXPECT_EQ(nonzeroSignal, signalVoxels);
  EXPECT_GT(signal, 10 * elsewhere);
  for (int f = 0; f < 5; ++f) EXPECT_TRUE(fs::exists(*dir_ / ("out/weights/sub-group_space-MNIColin27_desc-EnmklSvmFold" + std::to_string(f) + "_weights.nii.gz")));
}

TEST_F(Report, RendersInChromiumWithEveryFigure) {
  const std::string report = *dir_ / "out/report.html";
  ASSERT_TRUE(fs::exists(report));
  EXPECT_EQ(ReadFile(report).find("http"), std::string::npos) << "the report must not load anything from the network";
  if (std::system("command -v chromium > /dev/null 2>&1") != 0)
    FAIL() << "chromium is not installed: the browser check needs Debian's chromium package (scripts/test.sh installs it)";
  const std::string chromium = neuromkl::testing::HeadlessChromium(*dir_ / "chromium");
  const std::string dom = *dir_ / "dom.html";
  ASSERT_EQ(std::system((chromium + " --dump-dom file://" + report + " > " + dom + " 2>/dev/null").c_str()), 0);
  const std::string html = ReadFile(dom);
  // The page's own check: images decoded and SVG charts laid out: ROC, the reliability diagram, and per learner (2)
  // a confusion matrix, a null distribution, the region chart, the selected-counts chart, the weight map's and the
  // activation pattern's montages and their colour bars.
  EXPECT_THAT(html, HasSubstr("data-figures=\"18\" data-figures-ok=\"18\" data-figures-bad=\"0\""));
  const std::string shot = std::string(NEUROMKL_BINARY_DIR) + "/report_screenshot.png";
  ASSERT_EQ(std::system((chromium + " --window-size=1200,2400 --screenshot=" + shot + " file://" + report + " > /dev/null 2>&1").c_str()), 0);
  EXPECT_GT(fs::file_size(shot), 10000u);
}

}  // namespace

namespace {

TEST_F(Report, ResultsJsonFollowsItsDocumentedSchema) {
  const auto schema = nlohmann::json::parse(ReadFile(neuromkl::testing::SourcePath("configs/results.schema.json")));
  const auto results = nlohmann::json::parse(ReadFile(*dir_ / "out/results.json"));
  for (const auto& key : schema["required"]) EXPECT_TRUE(results.contains(key.get<std::string>())) << key;
  EXPECT_EQ(results["format_version"], schema["properties"]["format_version"]["const"]);
  const auto& learnerProps = schema["$defs"]["learner"]["properties"];
  for (const auto& learner : results["learners"]) {
    for (const auto& [key, _] : learnerProps.items())
      if (key != "permutations") {
        EXPECT_TRUE(learner.contains(key)) << learner["label"] << " lacks " << key;
      }
    for (const auto& [key, _] : learnerProps["folds"]["items"]["properties"].items())
      if (key != "error" && key != "inner_scores" && key != "corrected_predictions" && key != "bias_correction") {  // the last two: regression with bias_correction only
        EXPECT_TRUE(learner["folds"][0].contains(key)) << "fold lacks " << key;
      }
  }
}

}  // namespace
