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

/// The chart texts the page found cut off at their figure's edge (its data-texts-cut-list), for a failure message.
std::string TextsCut(const std::string& dom) {
  const auto at = dom.find("data-texts-cut-list=\"");
  return at == std::string::npos ? "no data-texts-cut-list" : "cut off: " + dom.substr(at, dom.find('"', at + 21) - at + 1);
}

/// The DOM of `report` after its scripts ran in headless chromium.
std::string RenderedDom(const std::string& report, const std::string& scratch) {
  if (std::system("command -v chromium > /dev/null 2>&1") != 0) return "chromium is not installed (scripts/test.sh installs it)";
  const std::string dom = scratch + "/dom.html";
  const std::string cmd = neuromkl::testing::HeadlessChromium(scratch + "/chromium") + " --dump-dom file://" + report + " > " + dom + " 2>/dev/null";
  return std::system(cmd.c_str()) == 0 ? ReadFile(dom) : "chromium failed";
}

TEST_F(Report, TopRankedRegionsAreThePlantedSignal) {
  const auto rows = neuromkl::testing::ReadTsv(*dir_ / "out/regions_enmkl_svm.tsv");
  ASSERT_GT(rows.size(), 4u);
  // An images study's table: atlas label and voxels, no columns of other kernel kinds.
  EXPECT_EQ(std::vector<std::string>(rows[0].begin(), rows[0].begin() + 6),
            (std::vector<std::string>{"rank", "label", "name", "voxels", "non_finite_voxels", "subjects_with_signal"}));
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
  // No text of a chart (legend, axis title, label) is cut off at its figure's edge.
  EXPECT_NE(html.find("data-texts-cut=\"0\""), std::string::npos) << TextsCut(html);
  const std::string shot = std::string(NEUROMKL_BINARY_DIR) + "/report_screenshot.png";
  ASSERT_EQ(std::system((chromium + " --window-size=1200,2400 --screenshot=" + shot + " file://" + report + " > /dev/null 2>&1").c_str()), 0);
  EXPECT_GT(fs::file_size(shot), 10000u);
}

/// Long names everywhere (learner labels, class names, sources, kernels, networks) and every kind of source: each
/// chart makes room for its texts, and the tables of the report fit the page.
TEST(ReportLayout, LongNamesFitTheirFiguresInChromium) {
  TempDir dir;
  auto r = RunCli("simulate --out " + (dir / "c") + " --subjects 36 --downsample 3 --second-modality --signal-b Hippocampus_L --clinical-effect 0.8 "
                  "--connectivity 10 --connectivity-signal node03 --seed 4 -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  std::string table = ReadFile(dir / "c/participants.tsv");
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"\tpatient\t", "\tmild_cognitive_impairment_converter\t"},
                                 {"\tcontrol\t", "\tcognitively_unimpaired_control\t"}})
    for (auto at = table.find(from); at != std::string::npos; at = table.find(from, at + to.size())) table.replace(at, from.size(), to);
  neuromkl::testing::WriteFile(dir / "c/participants.tsv", table);
  neuromkl::testing::WriteFile(dir / "c/s.json", R"({"name": "long_names", "subjects": {"table": "participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "mild_cognitive_impairment_converter"},
    "kernels": {"sources": [{"name": "grey_matter_density_vbm", "kind": "images"},
      {"name": "fdg_pet_suvr_cerebellum", "kind": "images", "image_column": "image_b"},
      {"name": "clinical_scores_baseline", "kind": "tabular", "tabular": {"table": "participants.tsv", "groups": {"clinical_composite_score": ["clinical"]}}},
      {"name": "resting_state_functional_connectivity", "kind": "connectivity", "connectivity": {"column": "connectome", "kernels": "network", "nodes": "nodes.tsv"}}]},
    "learners": [{"name": "enmkl_svm", "label": "enmkl_svm_elastic_net_mu_half_c_one", "params": {"c": 1.0, "mu": 0.5}},
                 {"name": "svm", "label": "linear_svm_on_every_kernel_summed", "params": {"c": 1.0}}],
    "cv": {"outer": {"k": 3}, "inner": {"k": 3}}, "permutations": {"count": 5}, "seed": 3})");
  r = RunCli("run " + (dir / "c/s.json") + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string html = RenderedDom(dir / "out/report.html", dir.Path());
  // ROC, reliability, per learner (2) a confusion matrix, a null distribution, the region and the counts charts, and per
  // learner two image sources' montages with their colour bars.
  EXPECT_THAT(html, HasSubstr("data-figures=\"18\" data-figures-ok=\"18\" data-figures-bad=\"0\""));
  EXPECT_NE(html.find("data-texts-cut=\"0\""), std::string::npos) << TextsCut(html);
  const std::string report = ReadFile(dir / "out/report.html");
  EXPECT_THAT(report, HasSubstr("(tabular, 1 kernel of 1 column;"));
  EXPECT_THAT(report, ::testing::ContainsRegex("\\(connectivity, 4 kernels of [0-9]+ to [0-9]+ connections;"));
  // A screenshot beside the other one (report_screenshot.png), to look at.
  const std::string shot = std::string(NEUROMKL_BINARY_DIR) + "/report_long_names_screenshot.png";
  const std::string cmd = neuromkl::testing::HeadlessChromium(dir / "chromium") + " --window-size=1200,7000 --screenshot=" + shot + " file://" +
                          (dir / "out/report.html") + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
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
