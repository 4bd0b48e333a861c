// Connectivity sources: hand-computed kernels, bad matrices, exact edge weights, a study mixing an
// image, a tabular and a connectivity source end to end, and subjects a source lacks (error / drop).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/gram/memory.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/learners/learner.hpp"
#include "neuromkl/pipeline/connectivity.hpp"
#include "neuromkl/weights/weights.hpp"
#include "testing.hpp"

namespace {

using neuromkl::InputError;
using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;
namespace np = neuromkl::pipeline;
namespace config = neuromkl::config;

/// A subjects table with one matrix file per subject (text, tab separated) and the study/cohort that read it.
struct Fixture {
  TempDir dir;
  config::StudyConfig study;
  config::ConnectivitySpec spec;
  np::Cohort cohort;
  explicit Fixture(const std::vector<Eigen::MatrixXd>& matrices, const std::string& nodes = "") {
    std::string table = "subject\tgroup\tconn\n";
    for (std::size_t i = 0; i < matrices.size(); ++i) {
      std::string id = "s";
      id += std::to_string(i + 1);
      std::ostringstream m;
      m.precision(17);
      for (Eigen::Index a = 0; a < matrices[i].rows(); ++a) {
        for (Eigen::Index b = 0; b < matrices[i].cols(); ++b) m << (b ? "\t" : "") << matrices[i](a, b);
        m << "\n";
      }
      WriteFile(dir / ("m/" + id + ".tsv"), m.str());
      table += id + "\t" + (i % 2 ? "a" : "b") + "\tm/" + id + ".tsv\n";
      cohort.ids.push_back(id);
    }
    WriteFile(dir / "participants.tsv", table);
    study.subjects.table = dir / "participants.tsv";
    study.subjects.idColumn = "subject";
    spec.column = "conn";
    if (!nodes.empty()) {
      WriteFile(dir / "nodes.tsv", nodes);
      spec.nodes = dir / "nodes.tsv";
    }
  }
};

Eigen::MatrixXd Symmetric(int nodes, unsigned seed) {
  Eigen::MatrixXd M(nodes, nodes);
  for (int a = 0; a < nodes; ++a)
    for (int b = a; b < nodes; ++b) M(a, b) = M(b, a) = a == b ? 1.0 : std::sin(seed * 1.3 + a * 0.7 + b * 1.9);
  return M;
}

TEST(ConnectivityKernels, NodeNetworkAndWholeKernelsAreHandComputable) {
  std::vector<Eigen::MatrixXd> ms = {Symmetric(4, 1), Symmetric(4, 2), Symmetric(4, 3)};
  // The diagonal is ignored: NaN and infinity there (e.g. Fisher z of 1) change nothing.
  ms[1](2, 2) = std::nan("");
  ms[2](0, 0) = std::numeric_limits<double>::infinity();
  Fixture f(ms, "name\tnetwork\nv1\tA\nv2\tA\nv3\tB\nv4\tB\n");
  auto dot = [&](std::size_t i, std::size_t j, const std::vector<std::pair<int, int>>& edges) {
    double s = 0;
    for (auto [a, b] : edges) s += ms[i](a, b) * ms[j](a, b);
    return s;
  };
  const std::vector<std::pair<int, int>> node1 = {{0, 1}, {0, 2}, {0, 3}};
  const std::vector<std::pair<int, int>> netA = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}};  // every connection with an end in A
  const std::vector<std::pair<int, int>> all = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  struct Case {
    config::ConnectivitySpec::Kernels kind;
    std::size_t count;
    std::string name;
    std::vector<std::pair<int, int>> edges;
  };
  for (const auto& c : {Case{config::ConnectivitySpec::Kernels::Node, 4, "v1", node1}, Case{config::ConnectivitySpec::Kernels::Network, 2, "A", netA},
                        Case{config::ConnectivitySpec::Kernels::Whole, 1, "whole", all}}) {
    f.spec.kernels = c.kind;
    const auto set = np::ConnectivityKernels(f.study, f.spec, f.cohort);
    ASSERT_EQ(set.Size(), c.count);
    EXPECT_EQ(set.info[0].name, c.name);
    EXPECT_EQ(set.info[0].features, static_cast<std::int64_t>(c.edges.size()));
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 3; ++j)  // sums of a few products of numbers in [-1, 1]: exact to rounding
        EXPECT_NEAR(set.kernels[0](static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)), dot(i, j, c.edges), 1e-13) << c.name;
  }
}

TEST(ConnectivityKernels, BadMatricesNameTheSubjectTheFileAndWhatIsWrong) {
  struct Case {
    std::function<void(std::vector<Eigen::MatrixXd>&)> edit;
    std::string code, message;
  };
  const std::vector<Case> cases = {
      {[](auto& m) { m[1](0, 2) += 0.5; }, "connectivity:Asymmetric", "subject s2"},
      {[](auto& m) { m[2] = Eigen::MatrixXd::Ones(4, 3); }, "connectivity:NotSquare", "expected a square node x node matrix, found 4 x 3"},
      {[](auto& m) { m[1] = Symmetric(5, 9); }, "connectivity:Size", "has 5 nodes, but subject s1"},
      {[](auto& m) { m[0](1, 3) = m[0](3, 1) = std::nan(""); }, "connectivity:NonFinite", "connection (2, 4) is nan"},
  };
  for (const auto& c : cases) {
    std::vector<Eigen::MatrixXd> ms = {Symmetric(4, 1), Symmetric(4, 2), Symmetric(4, 3)};
    c.edit(ms);
    Fixture f(ms);
    try {
      np::ReadConnectivity(f.study, f.spec, f.cohort);
      ADD_FAILURE() << c.code << " not raised";
    } catch (const InputError& e) {
      EXPECT_EQ(e.code(), c.code);
      EXPECT_THAT(e.what(), HasSubstr(c.message)) << c.code;
    }
  }
  // A node table that does not match the matrices, and a missing matrix file.
  Fixture rows({Symmetric(4, 1), Symmetric(4, 2)}, "name\nv1\nv2\nv3\n");
  EXPECT_THROW(
      try { np::ReadConnectivity(rows.study, rows.spec, rows.cohort); } catch (const InputError& e) {
        EXPECT_EQ(e.code(), "connectivity:NodeCount");
        EXPECT_THAT(e.what(), HasSubstr("the node table has 3 rows, but the matrices have 4 nodes"));
        throw;
      },
      InputError);
  Fixture missing({Symmetric(4, 1), Symmetric(4, 2), Symmetric(4, 3)});
  std::filesystem::remove(missing.dir / "m/s2.tsv");
  EXPECT_THROW(
      try { np::ReadConnectivity(missing.study, missing.spec, missing.cohort); } catch (const InputError& e) {
        EXPECT_EQ(e.code(), "sources:MissingData");
        EXPECT_THAT(e.what(), HasSubstr("s2: file not found"));
        throw;
      },
      InputError);
}

/// The edge weights of a fold model are its primal weights: for two held-out subjects the difference of
/// their decision values is <W, x1 - x2> over the connections (centred kernels; equal source weighting on,
/// so the map uses beta_r g_r as the learner saw kernel r scaled by g_r).
TEST(ConnectivityKernels, EdgeWeightsReproduceDecisionValuesOfHeldOutSubjects) {
  const int n = 24, N = 6;
  std::vector<Eigen::MatrixXd> ms;
  for (int i = 0; i < n; ++i) ms.push_back(Symmetric(N, static_cast<unsigned>(i + 1)) * (1.0 + (i % 2) * 0.3));
  Fixture f(ms, "name\tnetwork\nv1\tA\nv2\tA\nv3\tB\nv4\tB\nv5\tC\nv6\tC\n");
  f.spec.kernels = config::ConnectivitySpec::Kernels::Node;
  const auto data = np::ReadConnectivity(f.study, f.spec, f.cohort);
  const auto plan = np::PlanConnectivityKernels(data, f.spec.kernels);
  const auto set = np::ConnectivityKernels(f.study, f.spec, f.cohort);
  std::vector<int> train, test;
  for (int i = 0; i < n; ++i) (i % 4 == 0 ? test : train).push_back(i);
  neuromkl::gram::Preprocessing pre;
  pre.centre = true;
  pre.normalise = false;  // a held-out subject's own norm would make the decision non-linear in x
  pre.kernelGroups = {0, 0, 0, 1, 1, 1};  // two groups of node kernels, as two sources
  const neuromkl::gram::MemoryKernels kernels(set.kernels);
  const auto fold = neuromkl::gram::PrepareFold(kernels, train, test, pre);
  neuromkl::learners::Targets y;
  y.y.resize(static_cast<Eigen::Index>(train.size()));
  for (std::size_t i = 0; i < train.size(); ++i) y.y[static_cast<Eigen::Index>(i)] = train[i] % 2 ? 1.0 : -1.0;
  const auto model = neuromkl::learners::MakeLearner("enmkl_svm", {{"c", 1.0}, {"mu", 0.5}})->Fit(fold.train, y);
  const Eigen::VectorXd decision = model.Decision(fold.test);
  const Eigen::VectorXd scales = neuromkl::gram::FoldScales(kernels, train, test, pre);
  EXPECT_GT((scales.array() - 1.0).abs().maxCoeff(), 0.0) << "the two groups have different traces: the scales matter";
  const Eigen::MatrixXd D = kernels.SubjectWeights({train, test, model.coef, model.beta.cwiseProduct(scales)}, pre);
  const Eigen::MatrixXd W = np::WeightEdges(data, plan, D);
  EXPECT_TRUE(W.isApprox(W.transpose(), 0.0));
  for (std::size_t t = 1; t < test.size(); ++t) {
    double predicted = 0;
    for (int a = 0; a < N; ++a)
      for (int b = a + 1; b < N; ++b) predicted += W(a, b) * (ms[static_cast<std::size_t>(test[t])](a, b) - ms[static_cast<std::size_t>(test[0])](a, b));
    const double actual = decision[static_cast<Eigen::Index>(t)] - decision[0];
    // Both sides are the same sums in another order: rounding only (values O(1), ~100 terms).
    EXPECT_NEAR(predicted, actual, 1e-9 * std::max(1.0, std::abs(actual))) << "test subject " << test[t];
  }
}

/// The CLI on a simulated cohort with an image, a tabular and a connectivity source.
class ConnectivityCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = RunCli("simulate --out " + (*dir_ / "cohort") + " --subjects 60 --downsample 4 --seed 11 --effect 1.2 --signal Hippocampus_L "
                          "--clinical-effect 0.8 --connectivity 12 --connectivity-signal node03 -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Study(const std::string& name, const std::string& table, const std::string& extraKernels = "",
                           const std::string& extraSources = "") {
    const std::string path = *dir_ / (name + ".json");
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": {"table": ")" + table + R"("},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "kernels": {)" + extraKernels + R"("sources": [
        {"name": "gm", "kind": "images"},
        {"name": "clin", "kind": "tabular", "tabular": {"table": "cohort/participants.tsv", "groups": {"clinical": ["clinical"]}}},
        {"name": "fc", "kind": "connectivity", "connectivity": {"column": "connectome", "kernels": "node", "nodes": "cohort/nodes.tsv"}})" +
                        extraSources + R"(]},
      "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}], "cv": {"outer": {"k": 4}}, "seed": 3})");
    return path;
  }
  static nlohmann::json Results(const std::string& name) { return nlohmann::json::parse(ReadFile(*dir_ / ("results/" + name + "/results.json"))); }
  /// The table without the connectome cell of the given rows (1-based data rows).
  static std::string TableWithout(const std::string& name, std::set<int> rows, bool deleteRows = false) {
    std::istringstream in(ReadFile(*dir_ / "cohort/participants.tsv"));
    std::string line, out;
    for (int r = 0; std::getline(in, line); ++r) {
      if (rows.count(r) && deleteRows) continue;
      if (rows.count(r)) line = line.substr(0, line.rfind('\t')) + "\tn/a";
      out += line + "\n";
    }
    WriteFile(*dir_ / ("cohort/" + name), out);
    return "cohort/" + name;
  }
  static TempDir* dir_;
};
TempDir* ConnectivityCli::dir_ = nullptr;

TEST_F(ConnectivityCli, ImageTabularAndConnectivitySourcesRunEndToEnd) {
  const std::string study = Study("mixed", "cohort/participants.tsv");
  auto r = RunCli("validate " + study);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Connectivity: 60 matrices from column \"connectome\", 12 nodes"));
  EXPECT_THAT(r.output, HasSubstr("Kernels: 12 linear kernels (one per node)"));
  r = RunCli("run " + study + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto j = Results("mixed");
  ASSERT_EQ(j["sources"].size(), 3u);
  EXPECT_EQ(j["sources"][2]["kind"], "connectivity");
  EXPECT_EQ(j["sources"][2]["kernels"], 12);
  EXPECT_EQ(j["kernels"]["source_weighting"], "none");
  // The planted signal of every source ranks high: its region, its node, and the clinical score.
  const auto rows = ReadTsv(*dir_ / "results/mixed/regions_enmkl_svm.tsv");
  std::vector<std::string> top;
  for (std::size_t i = 1; i <= 4 && i < rows.size(); ++i) top.push_back(rows[i][2]);
  EXPECT_THAT(top, ::testing::IsSupersetOf({"gm:Hippocampus_L", "fc:node03", "clin:clinical"}));
  EXPECT_EQ(rows[0][3], "source");
  // Edge weights: the connections of node03 carry the effect.
  const auto edges = ReadTsv(*dir_ / "results/mixed/weights/fc/edges_enmkl_svm.tsv");
  ASSERT_EQ(edges.size(), 1u + 66u);  // every connection of 12 nodes
  for (std::size_t i = 1; i <= 5; ++i) EXPECT_TRUE(edges[i][1] == "node03" || edges[i][2] == "node03") << edges[i][1] << "-" << edges[i][2];
  const auto square = ReadTsv(*dir_ / "results/mixed/weights/fc/edges_enmkl_svm_mean.tsv");
  EXPECT_EQ(square.size(), 13u);
  EXPECT_EQ(j["learners"][0]["weight_maps"]["edges"]["fc"]["ranked"], "weights/fc/edges_enmkl_svm.tsv");
  EXPECT_TRUE(std::filesystem::exists(*dir_ / "results/mixed/weights/gm/sub-group_desc-EnmklSvmMean_weights.nii.gz"));
  const std::string report = ReadFile(*dir_ / "results/mixed/report.html");
  EXPECT_THAT(report, HasSubstr("Source <b>fc</b> (connectivity)"));
  EXPECT_THAT(report, HasSubstr("Source <b>gm</b>: map"));
  // The resolved study parses again.
  r = RunCli("validate " + (*dir_ / "results/mixed/study.resolved.json"));
  EXPECT_EQ(r.exitCode, 0) << r.output;
}

/// The region tables say what each kernel is made of: a size column per source kind (voxels of an image region,
/// connections of a connectivity kernel, columns of a tabular one; n/a in the others), atlas labels for image
/// regions only, and the source; regions_<learner>.json explains those columns.
TEST_F(ConnectivityCli, RegionTablesNameWhatEachKernelIsMadeOf) {
  const std::string study = Study("kinds", "cohort/participants.tsv");
  const auto r = RunCli("run " + study + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string out = *dir_ / "results/kinds";
  // Cells of the rows of these kernels, by column name.
  auto cells = [](const std::vector<std::vector<std::string>>& rows, const std::string& kernel) {
    std::map<std::string, std::string> byColumn;
    for (const auto& row : rows)
      if (std::find(row.begin(), row.end(), kernel) != row.end())
        for (std::size_t c = 0; c < row.size(); ++c) byColumn[rows[0][c]] = row[c];
    return byColumn;
  };
  const auto ranking = ReadTsv(out + "/regions_enmkl_svm.tsv");
  EXPECT_EQ(std::vector<std::string>(ranking[0].begin(), ranking[0].begin() + 10),
            (std::vector<std::string>{"rank", "label", "name", "source", "voxels", "non_finite_voxels", "connections", "columns", "subjects_with_signal",
                                      "low_coverage"}));
  const auto node = cells(ranking, "fc:node03"), clinical = cells(ranking, "clin:clinical"), hippocampus = cells(ranking, "gm:Hippocampus_L");
  // A node kernel holds the node's connections to the 11 other nodes; the clinical group one column.
  EXPECT_EQ(node.at("connections"), "11");
  EXPECT_EQ(node.at("source"), "fc");
  EXPECT_EQ(clinical.at("columns"), "1");
  for (const auto& kernel : {node, clinical}) {
    EXPECT_EQ(kernel.at("label"), "n/a");
    EXPECT_EQ(kernel.at("voxels"), "n/a");
    EXPECT_EQ(kernel.at("non_finite_voxels"), "n/a");
  }
  EXPECT_EQ(node.at("columns"), "n/a");
  EXPECT_EQ(clinical.at("connections"), "n/a");
  EXPECT_EQ(hippocampus.at("label"), "4101");  // AAL's Hippocampus_L
  EXPECT_GT(std::stoi(hippocampus.at("voxels")), 0);
  EXPECT_EQ(hippocampus.at("connections"), "n/a");
  EXPECT_EQ(hippocampus.at("columns"), "n/a");
  // regions.tsv: the same per-kind columns after the image columns.
  const auto kernels = ReadTsv(out + "/regions.tsv");
  EXPECT_EQ(kernels[0], (std::vector<std::string>{"label", "name", "source", "status", "voxels_used", "atlas_voxels", "non_finite_voxels", "zeroed_values",
                                                  "connections", "columns", "subjects_with_signal", "reason"}));
  EXPECT_EQ(cells(kernels, "fc:node03").at("connections"), "11");
  EXPECT_EQ(cells(kernels, "fc:node03").at("atlas_voxels"), "n/a");
  EXPECT_EQ(cells(kernels, "clin:clinical").at("columns"), "1");
  EXPECT_EQ(cells(kernels, "gm:Hippocampus_L").at("atlas_voxels"), hippocampus.at("voxels"));  // no mask, no NaN voxels: all used
  const auto notes = nlohmann::json::parse(ReadFile(out + "/regions_enmkl_svm.json"));
  for (const char* column : {"label", "source", "voxels", "connections", "columns"}) EXPECT_TRUE(notes.contains(column)) << column;
  // The report names them too: per source, its kernels and what they are made of.
  const std::string report = ReadFile(out + "/report.html");
  EXPECT_THAT(report, HasSubstr("<code>fc</code> (connectivity, 12 kernels of 11 connections;"));
  EXPECT_THAT(report, HasSubstr("<code>clin</code> (tabular, 1 kernel of 1 column;"));
  EXPECT_THAT(report, ::testing::ContainsRegex("<code>gm</code> \\(images, [0-9]+ kernels of [0-9]+ to [0-9]+ voxels;"));
  EXPECT_THAT(report, HasSubstr("<th>kernels selected</th>"));
}

TEST_F(ConnectivityCli, EqualSourceWeightingRunsAndIsRecorded) {
  const auto r = RunCli("run " + Study("equal", "cohort/participants.tsv", R"("source_weighting": "equal", )") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto j = Results("equal");
  EXPECT_EQ(j["kernels"]["source_weighting"], "equal");
  // The region notes quote the setting: still a JSON document.
  const auto notes = nlohmann::json::parse(ReadFile(*dir_ / "results/equal/regions_enmkl_svm.json"));
  EXPECT_THAT(notes["weights"].get<std::string>(), HasSubstr("(source_weighting \"equal\")"));
  // 116-ish image kernels against 1 clinical kernel: with equal traces the clinical kernel (scaled up) is
  // cheaper for the l1 part of the penalty, so its weight rises against the unscaled run.
  auto clinical = [&](const std::string& name) { return Results(name)["sources"][1]["weight_percent"]["enmkl_svm"]["mean"].get<double>(); };
  if (!std::filesystem::exists(*dir_ / "results/mixed/results.json")) {
    ASSERT_EQ(RunCli("run " + Study("mixed", "cohort/participants.tsv") + " -q").exitCode, 0);
  }
  EXPECT_GT(clinical("equal"), clinical("mixed"));
}

TEST_F(ConnectivityCli, SubjectsLackingASourceAreListedOrDroppedAsIfAbsent) {
  const std::string gaps = TableWithout("gaps.tsv", {3, 8});
  auto r = RunCli("validate " + Study("gaps", gaps));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[sources:MissingData]"));
  EXPECT_THAT(r.output, HasSubstr("2 of 60 subjects lack a source's data: sub-0003 (source \"fc\": no connectivity matrix in column \"connectome\"), "
                                  "sub-0008 (source \"fc\""));
  // A precomputed source beside them: its file covers every row of the table.
  const auto table = ReadTsv(*dir_ / "cohort/participants.tsv");
  const auto n = static_cast<Eigen::Index>(table.size() - 1);
  Eigen::VectorXd clin(n);
  for (Eigen::Index i = 0; i < n; ++i) clin[i] = std::stod(table[static_cast<std::size_t>(i + 1)][3]);
  const Eigen::MatrixXd K = clin * clin.transpose() + Eigen::MatrixXd::Constant(n, n, 0.5);
  neuromkl::WriteNpy(*dir_ / "cohort/pre.npy", K);
  std::vector<int> keep;
  for (int i = 0; i < n; ++i)
    if (i != 2 && i != 7) keep.push_back(i);
  const Eigen::VectorXi k = Eigen::Map<const Eigen::VectorXi>(keep.data(), static_cast<Eigen::Index>(keep.size()));
  neuromkl::WriteNpy(*dir_ / "cohort/pre_kept.npy", Eigen::MatrixXd(K(k, k)));
  const std::string pre = R"(, {"name": "pre", "kind": "precomputed", "precomputed": [{"name": "k", "file": "cohort/pre.npy"}]})";
  r = RunCli("run " + Study("dropped", gaps, R"("missing_source": "drop", )", pre) + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto j = Results("dropped");
  ASSERT_EQ(j["subjects"]["dropped"].size(), 2u);
  EXPECT_EQ(j["subjects"]["dropped"][0]["id"], "sub-0003");
  EXPECT_THAT(j["subjects"]["dropped"][0]["reason"].get<std::string>(), HasSubstr("no connectivity matrix"));
  EXPECT_THAT(ReadFile(*dir_ / "results/dropped/report.html"), HasSubstr("left out because a source lacks their data"));
  // Dropping equals removing the rows from the table (and the precomputed kernel): the same predictions.
  const std::string removed = TableWithout("removed.tsv", {3, 8}, true);
  const std::string prekept = R"(, {"name": "pre", "kind": "precomputed", "precomputed": [{"name": "k", "file": "cohort/pre_kept.npy"}]})";
  r = RunCli("run " + Study("removed", removed, "", prekept) + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(ReadFile(*dir_ / "results/dropped/predictions.tsv"), ReadFile(*dir_ / "results/removed/predictions.tsv"));
  EXPECT_EQ(ReadFile(*dir_ / "results/dropped/regions_enmkl_svm.tsv"), ReadFile(*dir_ / "results/removed/regions_enmkl_svm.tsv"));
  // Kept with missing_source "impute": every subject predicted, the two listed, and the edge weights made from the
  // matrices that exist (node03's connections still lead).
  r = RunCli("run " + Study("imputed", gaps, R"("missing_source": "impute", )", pre) + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto imputed = Results("imputed");
  ASSERT_EQ(imputed["subjects"]["imputed_sources"]["fc"].size(), 2u);
  EXPECT_EQ(imputed["subjects"]["imputed_sources"]["fc"][1]["id"], "sub-0008");
  EXPECT_EQ(ReadTsv(*dir_ / "results/imputed/predictions.tsv").size(), 61u);
  const auto edges = ReadTsv(*dir_ / "results/imputed/weights/fc/edges_enmkl_svm.tsv");
  ASSERT_EQ(edges.size(), 1u + 66u);
  EXPECT_TRUE(edges[1][1] == "node03" || edges[1][2] == "node03") << edges[1][1] << "-" << edges[1][2];
}

// predict's connectivity errors, before any output: a subject without a matrix under a model that does not impute the
// source (every one named), and a matrix of another size than the training subjects' (the subject, the file, both sizes).
TEST_F(ConnectivityCli, PredictRefusesMissingOrMisshapenMatricesOfAModelThatDoesNotImpute) {
  auto r = RunCli("run " + Study("predict_errors", "cohort/participants.tsv") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string model = *dir_ / "results/predict_errors/model";
  r = RunCli("predict " + model + " " + (*dir_ / TableWithout("no_matrix.tsv", {3, 8})) + " --out " + (*dir_ / "pred_no_matrix"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[predict:MissingConnectivity]"));
  EXPECT_THAT(r.output, HasSubstr("2 subjects have no connectivity matrix in column \"connectome\": sub-0003, sub-0008"));
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "pred_no_matrix"));
  // sub-0002's matrix replaced by a 5 x 5 one.
  std::string small;
  for (int a = 0; a < 5; ++a) {
    for (int b = 0; b < 5; ++b) small += std::string(b ? "\t" : "") + (a == b ? "1" : "0.5");
    small += "\n";
  }
  WriteFile(*dir_ / "cohort/small.tsv", small);
  auto rows = ReadTsv(*dir_ / "cohort/participants.tsv");
  const auto column = static_cast<std::size_t>(std::find(rows[0].begin(), rows[0].end(), "connectome") - rows[0].begin());
  rows[2][column] = "small.tsv";
  std::string text;
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) text += (c ? "\t" : "") + row[c];
    text += "\n";
  }
  WriteFile(*dir_ / "cohort/small_matrix.tsv", text);
  r = RunCli("predict " + model + " " + (*dir_ / "cohort/small_matrix.tsv") + " --out " + (*dir_ / "pred_small"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[predict:ConnectivitySize]"));
  EXPECT_THAT(r.output, HasSubstr("subject sub-0002"));
  EXPECT_THAT(r.output, HasSubstr("has 5 nodes, but the model's connectivity source \"fc\" has 12"));
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "pred_small"));
}

// The exported models of a study imputing a connectivity source (sub-0003 and sub-0008 have no matrix) and a tabular one
// (sub-0005 and sub-0012 have no row in its table) do what its folds did: each outer fold's model, applied by predict to
// the whole table (those subjects' cells empty), gives the study's out-of-fold decisions of its held-out subjects. The
// connections are imputed in primal form (the training mean of the subjects having a matrix), the tabular rows in
// kernel space (the means of the training rows' kernel values). Tolerance: 1e-6 of the fold's largest decision.
TEST_F(ConnectivityCli, ExportedModelsOfAnImputingStudyReproduceItsDecisions) {
  const std::string gaps = TableWithout("gaps.tsv", {3, 8});
  TableWithout("clin_partial.tsv", {5, 12}, true);
  auto rows = ReadTsv(*dir_ / gaps);
  const auto clinical = static_cast<std::size_t>(std::find(rows[0].begin(), rows[0].end(), "clinical") - rows[0].begin());
  std::string text;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (r == 5 || r == 12) rows[r][clinical] = "n/a";
    for (std::size_t c = 0; c < rows[r].size(); ++c) text += (c ? "\t" : "") + rows[r][c];
    text += "\n";
  }
  WriteFile(*dir_ / "cohort/gaps_clin.tsv", text);
  const std::string path = *dir_ / "imputed_export.json";
  WriteFile(path, R"({"name": "imputed_export", "subjects": {"table": "cohort/gaps.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
    "kernels": {"missing_source": "impute", "sources": [
      {"name": "gm", "kind": "images"},
      {"name": "clin", "kind": "tabular", "tabular": {"table": "cohort/clin_partial.tsv", "groups": {"clinical": ["clinical"]}}},
      {"name": "fc", "kind": "connectivity", "connectivity": {"column": "connectome", "kernels": "node", "nodes": "cohort/nodes.tsv"}}]},
    "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}], "cv": {"outer": {"k": 4}}, "output": {"weight_maps": false}, "seed": 3})");
  auto r = RunCli("run " + path + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string results = *dir_ / "results/imputed_export";
  const auto imputed = Results("imputed_export")["subjects"]["imputed_sources"];
  ASSERT_EQ(imputed["fc"].size(), 2u);
  ASSERT_EQ(imputed["clin"].size(), 2u);
  const auto card = nlohmann::json::parse(ReadFile(results + "/model/EnmklSvm/model.json"));
  std::map<std::string, bool> imputes;  // source -> whether the card keeps what imputing it needs
  for (const auto& source : card["sources"]) imputes[source["name"]] = source.contains("imputed") || source.contains("training_has");
  EXPECT_EQ(imputes, (std::map<std::string, bool>{{"clin", true}, {"fc", true}, {"gm", false}}));
  const auto check = neuromkl::testing::ExpectFoldModelsGiveTheStudyDecisions(results, "EnmklSvm", *dir_ / "cohort/gaps_clin.tsv",
                                                                              *dir_ / "imputed_pred_", 60);
  EXPECT_EQ(check.outputs.size(), 4u);
  for (const auto& [fold, out] : check.outputs) {
    const std::string warnings = nlohmann::json::parse(ReadFile(out + "/summary.json"))["warnings"].dump();
    EXPECT_THAT(warnings, HasSubstr("source fc: 2 subject(s) without its data (sub-0003, sub-0008)"));
    EXPECT_THAT(warnings, HasSubstr("subject sub-0012: no value in any column of tabular source clin"));
  }
  std::set<std::string> lackingChecked;
  for (const auto& id : check.checked)
    if (id == "sub-0003" || id == "sub-0008" || id == "sub-0005" || id == "sub-0012") lackingChecked.insert(id);
  EXPECT_EQ(lackingChecked.size(), 4u);
}

}  // namespace

namespace {

/// A batch matrix with a sources axis: one study per combination of the base study's sources, the
/// shared sources computed once, and a summary with a "sources" column.
TEST_F(ConnectivityCli, BatchSourcesAxisComparesCombinationsOfSources) {
  const std::string base = Study("base", "cohort/participants.tsv");
  const std::string batch = *dir_ / "combos.json";
  WriteFile(batch, R"({"name": "combos", "matrix": {"base": ")" + base + R"(",
    "sources": [{"name": "gm_only", "use": ["gm"]}, {"use": ["fc", "gm"]}]}})");
  auto r = RunCli("batch " + batch + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string out = *dir_ / "results/combos";
  const auto summary = ReadTsv(out + "/batch_summary.tsv");
  ASSERT_EQ(summary.size(), 3u);
  EXPECT_EQ(summary[0][4], "sources");
  EXPECT_EQ(summary[1][4], "gm_only");
  EXPECT_EQ(summary[2][4], "fc_gm");  // the default name joins the names ('+' is not a name character)
  const auto one = nlohmann::json::parse(ReadFile(out + "/studies/gm_only/results.json"));
  const auto two = nlohmann::json::parse(ReadFile(out + "/studies/fc_gm/results.json"));
  ASSERT_EQ(one["sources"].size(), 1u);
  ASSERT_EQ(two["sources"].size(), 2u);
  EXPECT_EQ(two["sources"][0]["name"], "gm");  // in the base study's order
  EXPECT_EQ(two["sources"][1]["name"], "fc");
  EXPECT_THAT(ReadFile(out + "/index.html"), HasSubstr("<th>sources</th>"));
  // Bad axes: an unknown source, and a base study without sources.
  WriteFile(batch, R"({"name": "combos", "matrix": {"base": ")" + base + R"(", "sources": [{"use": ["gm", "pet"]}]}})");
  r = RunCli("validate " + batch);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/matrix/sources/0/use/1: the base study has no source \"pet\" (sources: gm, clin, fc)"));
  WriteFile(*dir_ / "plain.json", R"({"name": "plain", "subjects": {"table": "cohort/participants.tsv"},
    "target": {"column": "group", "task": "classification"}, "learners": [{"name": "svm"}]})");
  WriteFile(batch, R"({"name": "combos", "matrix": {"base": "plain.json", "sources": [{"use": ["gm"]}]}})");
  r = RunCli("validate " + batch);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/matrix/sources: the sources axis selects among the base study's /kernels/sources"));
}

}  // namespace

namespace {

/// Multiclass studies with several image sources: one mean map per class under each source's folder
/// (this crashed before: the per-source class maps were indexed before they were sized).
TEST(SourcesMulticlass, EachImageSourceGetsOneMeanMapPerClass) {
  TempDir dir;
  auto r = RunCli("simulate --out " + (dir / "c") + " --subjects 45 --classes 3 --downsample 4 --second-modality --signal-b Hippocampus_L -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  WriteFile(dir / "s.json", R"({"name": "mc", "subjects": {"table": "c/participants.tsv"}, "target": {"column": "group", "task": "multiclass"},
    "kernels": {"sources": [{"name": "a", "kind": "images"}, {"name": "b", "kind": "images", "image_column": "image_b"}]},
    "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}], "cv": {"outer": {"k": 3}}, "output": {"dir": "out"}})");
  r = RunCli("run " + (dir / "s.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  for (const char* source : {"a", "b"})
    for (const char* cls : {"A", "B", "C"}) {
      const std::string stem = dir / ("out/weights/" + std::string(source) + "/sub-group_desc-EnmklSvmClass" + cls + "Mean_weights");
      EXPECT_TRUE(std::filesystem::exists(stem + ".nii.gz")) << stem;
      EXPECT_THAT(ReadFile(stem + ".json"), HasSubstr(std::string("\"Class\": \"") + cls + " vs rest")) << stem;
    }
}

}  // namespace
