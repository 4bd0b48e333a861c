// `neuromkl run` under mpirun with a per-rank budget that the subject data exceed: the kernel stage
// is spread over the ranks (each decodes its own subjects, ring exchange of the data blocks). When the
// kernels fit one rank, rank 0 gathers them and runs the rest; when they exceed the budget too, kernel k
// stays on rank k mod P, which runs every computation that reads it, and rank 0 runs the study on the
// results. Every result must equal the single-process run, the cache entry must serve a later
// single-process run, and a bad image on a rank other than 0 must end the job with the error.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "neuromkl/core/npy.hpp"
#include "neuromkl/export/kernel_store.hpp"
#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;
using namespace neuromkl::testing;
using ::testing::HasSubstr;

namespace {

#ifndef NEUROMKL_MPIEXEC
TEST(MpiKernels, NeedsMpirun) { GTEST_SKIP() << "built without MPI or mpirun not found"; }
#else

constexpr int kSubjects = 36;

CliResult RunMpi(int ranks, const std::string& args) {
  const std::string cmd = std::string(NEUROMKL_MPIEXEC) + " --oversubscribe --allow-run-as-root -np " + std::to_string(ranks) + " " + NEUROMKL_CLI + " " +
                          args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string output;
  char buf[4096];
  while (fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

/// A simulated cohort (36 subjects; `downsample` 3: a 6 mm grid, 0.9 MiB of subject data and 1.1 MiB of kernels;
/// 2: a 4 mm grid, 3.2 MiB of data) and a study with per-rank budget `budgetMb`, with the kernel cache in `cache`.
std::string WriteStudy(const TempDir& dir, const std::string& cache, int downsample = 3, double budgetMb = 0.2, const std::string& simulate = "") {
  EXPECT_EQ(RunCli("simulate --out " + dir / "cohort" + " --subjects " + std::to_string(kSubjects) + " --downsample " + std::to_string(downsample) +
                   " --seed 11 -q " + simulate)
                .exitCode,
            0);
  auto study = nlohmann::json::parse(ReadFile(dir / "cohort/study.json"));
  study["kernels"] = {{"memory_budget_mb", budgetMb}, {"cache", true}};
  study["output"] = {{"cache_dir", cache}};
  study["cv"] = {{"outer", {{"k", 4}}}, {"inner", {{"k", 3}}}};
  study["learners"] = nlohmann::json::parse(R"([{"name": "enmkl_svm", "params": {"mu": 0.5}, "grid": {"c": [0.1, 10]}}, {"name": "kelm", "params": {"c": 1}}])");
  WriteFile(dir / "cohort/mpi_study.json", study.dump(2));
  return dir / "cohort/mpi_study.json";
}

// The kernels are not bit-identical to the single-process ones: each entry sums float32 products
// over 2048-voxel chunks inside BLAS (ssyrk/sgemm), and OpenBLAS's order within a chunk depends on
// the shape of the block pair (a single process out of core uses blocks of 4 subjects here, the
// ranks blocks of 12; in memory, one block of 36), so entries differ at float32 rounding: measured
// <= 2e-7 of the kernel's largest entry, as between in-memory and out-of-core single-process runs.
// The learners turn that into results equal to ~5e-6 relative (measured); numbers are compared with
// |a - b| <= 1e-4 max(|a|, |b|) + 1e-9 (20x the measured spread, far below anything reported), text
// (labels, predicted classes, names) exactly.
bool Close(double x, double y) { return x == y || std::abs(x - y) <= 1e-4 * std::max(std::abs(x), std::abs(y)) + 1e-9; }

bool IsNumber(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

void ExpectCloseJson(const nlohmann::json& x, const nlohmann::json& y, const std::string& where) {
  if (x.is_object() && y.is_object()) {
    for (auto it = x.begin(); it != x.end(); ++it) {
      const std::string& key = it.key();
      // Provenance, not results: dates, timings, cache note, where the kernels were computed,
      // checksums of the (float-rounded) arrays and of the model card holding them, the study file's own path.
      if (key == "date" || key == "seconds" || key == "cache" || key == "distributed" || key == "xxh3" || key == "card_xxh3") continue;
      // The float32 store's note says how the fold kernels were prepared (held by the ranks: no float32 copies).
      if (key == "note" && where.size() >= 10 && where.compare(where.size() - 10, 10, "/precision") == 0) continue;
      // auto's reason quotes the kernels' share of the ranks that hold them.
      if (key == "why" && where.size() >= 15 && where.compare(where.size() - 15, 15, "/representation") == 0) continue;
      // A solver's path (iteration counts, the final duality gap below its stopping tolerance)
      // follows the rounding; the solution it stops at is compared.
      if (where.find("/fit") != std::string::npos && (key == "iterations" || key == "inner_iterations" || key == "inner_solves" || key == "gap")) continue;
      ASSERT_TRUE(y.contains(key)) << where << "/" << key;
      ExpectCloseJson(it.value(), y[key], where + "/" + key);
    }
  } else if (x.is_array() && y.is_array()) {
    ASSERT_EQ(x.size(), y.size()) << where;
    for (std::size_t i = 0; i < x.size(); ++i) ExpectCloseJson(x[i], y[i], where + "/" + std::to_string(i));
  } else if (x.is_number() && y.is_number()) {
    // Platt's A and B stop where the gradient is below 1e-5 (LIBSVM's rule), so a B near 0 is only that accurate.
    const bool platt = where.find("/calibration/") != std::string::npos;
    EXPECT_TRUE(Close(x.get<double>(), y.get<double>()) || (platt && std::abs(x.get<double>() - y.get<double>()) <= 1e-5)) << where << ": " << x << " vs " << y;
  } else {
    EXPECT_EQ(x, y) << where;
  }
}

/// Two tables cell by cell: numbers as Close, text exactly; a column "iterations" (a solver's path, as in the JSON
/// comparison) is not compared. A decision's parts (attributions.tsv, the columns after "bias") are compared at the
/// scale of the decision they add up to: the two runs' models agree to 1e-4 of it, and a kernel with a tiny part
/// carries that absolute difference.
void ExpectSameTable(const std::string& a, const std::string& b, const std::string& rel) {
  const auto x = ReadTsv(a), y = ReadTsv(b);
  ASSERT_EQ(x.size(), y.size()) << rel;
  const auto bias = std::find(x[0].begin(), x[0].end(), "bias"), decision = std::find(x[0].begin(), x[0].end(), "decision");
  const bool parts = bias != x[0].end() && decision != x[0].end();
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].size(), y[i].size()) << rel << " row " << i;
    double partScale = 0;
    if (parts && i > 0) IsNumber(x[i][static_cast<std::size_t>(decision - x[0].begin())], partScale);
    for (std::size_t j = 0; j < x[i].size(); ++j) {
      if (i > 0 && j < x[0].size() && x[0][j] == "iterations") continue;
      double u = 0, v = 0;
      if (parts && i > 0 && j > static_cast<std::size_t>(bias - x[0].begin()) && IsNumber(x[i][j], u) && IsNumber(y[i][j], v))
        EXPECT_LE(std::abs(u - v), 1e-4 * std::max(1.0, std::abs(partScale))) << rel << " row " << i << " column " << j << ": " << u << " vs " << v;
      else if (IsNumber(x[i][j], u) && IsNumber(y[i][j], v)) EXPECT_TRUE(Close(u, v)) << rel << " row " << i << " column " << j << ": " << u << " vs " << v;
      else EXPECT_EQ(x[i][j], y[i][j]) << rel << " row " << i << " column " << j;
    }
  }
}

/// Every result file of `a` matches its twin in `b`: tables cell by cell, JSON value by value,
/// .npy arrays and NIfTI maps element by element (numbers as Close), other files byte for byte.
void ExpectSameResults(const std::string& a, const std::string& b) {
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(a)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), a).string(), name = e.path().filename().string(), other = b + "/" + rel;
    ASSERT_TRUE(fs::exists(other)) << rel;
    ++files;
    auto ends = [&](const std::string& suffix) { return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0; };
    if (name == "report.html" || name == "study.resolved.json") continue;  // a rendering of results.json; the study's own paths
    if (ends(".json")) {
      ExpectCloseJson(nlohmann::json::parse(ReadFile(e.path().string())), nlohmann::json::parse(ReadFile(other)), rel);
    } else if (ends(".tsv")) {
      ExpectSameTable(e.path().string(), other, rel);
    } else if (ends(".npy")) {
      const Eigen::MatrixXd x = neuromkl::ReadNpy(e.path().string()), y = neuromkl::ReadNpy(other);
      ASSERT_EQ(x.rows(), y.rows()) << rel;
      ASSERT_EQ(x.cols(), y.cols()) << rel;
      // Arrays hold voxel weights too (images0_weights.npy), with the maps' cancellation (below): the same rule. Seen
      // on an AVX-512 machine (OpenBLAS's SkylakeX kernels sum in another order): 3.3190e-6 vs 3.3174e-6 where the
      // array's largest is 6,813, a difference of 2e-13 of it.
      const double largest = x.cwiseAbs().maxCoeff();
      for (Eigen::Index k = 0; k < x.size(); ++k)
        ASSERT_TRUE(Close(x.data()[k], y.data()[k]) || std::abs(x.data()[k] - y.data()[k]) <= 1e-7 * largest)
            << rel << " element " << k << ": " << x.data()[k] << " vs " << y.data()[k] << " (largest " << largest << ")";
    } else if (ends(".nii.gz")) {
      const auto x = neuromkl::io::ReadVolume(e.path().string()), y = neuromkl::io::ReadVolume(other);
      ASSERT_EQ(x.data.size(), y.data.size()) << rel;
      EXPECT_TRUE(x.geometry.DifferenceFrom(y.geometry).empty()) << rel;
      // A voxel is a sum over subjects that can cancel to ~1e-6 of the map's largest value, where 1e-4 of
      // itself is below the kernels' float32 rounding (2e-7 of their largest entry): voxels are compared
      // with 1e-4 relative or 1e-6 of the map's largest magnitude, whichever is larger. The error of a
      // voxel is bounded by the coefficients' error times the magnitude of the terms it sums, not by its
      // own value: on a machine whose OpenBLAS runs AVX-512 kernels (another summation order), a SimpleMKL
      // fold map at gap 1e-7 was seen 2.3e-7 of its largest apart in a voxel cancelling to 4e-4 of it.
      float largest = 0;
      for (float v : x.data) largest = std::max(largest, std::abs(v));
      for (std::size_t k = 0; k < x.data.size(); ++k)
        ASSERT_TRUE(Close(x.data[k], y.data[k]) || std::abs(x.data[k] - y.data[k]) <= 1e-6 * largest)
            << rel << " voxel " << k << ": " << x.data[k] << " vs " << y.data[k] << " (largest " << largest << ")";
    } else {
      EXPECT_TRUE(ReadFile(e.path().string()) == ReadFile(other)) << rel << " differs";
    }
  }
  EXPECT_GT(files, 20u);  // predictions, region tables, voxel maps, kernels, results.json...
}

/// The study (`json`, written to `study`) run on `ranks` ranks from the cache entry in `cache`, each rank loading its own
/// kernels from it, into `out`: the results of the single-process run in `single`.
void ExpectRanksReadTheEntry(nlohmann::json& json, const std::string& study, const std::string& cache, int ranks, const std::string& out,
                             const std::string& single) {
  json["output"]["cache_dir"] = cache;
  WriteFile(study, json.dump(2));
  const auto hit = RunMpi(ranks, "run " + study + " --out " + out);
  ASSERT_EQ(hit.exitCode, 0) << hit.output;
  EXPECT_THAT(hit.output, HasSubstr("each loaded by the rank that holds it"));
  ExpectSameResults(single, out);
}

TEST(MpiKernels, ThreeRanksGiveTheSingleProcessResults) {
  // 3.2 MiB of subject data over a budget of 2 MiB, 1.1 MiB of kernels within it: gathered on rank 0.
  const TempDir dir;
  const std::string study = WriteStudy(dir, dir / "cache_single", 2, 2.0);
  const auto single = RunCli("run " + study + " --out " + dir / "single");
  ASSERT_EQ(single.exitCode, 0) << single.output;
  EXPECT_THAT(single.output, ::testing::Not(HasSubstr("distributed")));

  // The same study under mpirun with its own (empty) cache: the kernel stage on 3 ranks.
  auto json = nlohmann::json::parse(ReadFile(study));
  json["output"]["cache_dir"] = dir / "cache_mpi";
  WriteFile(study, json.dump(2));
  const auto mpi = RunMpi(3, "run " + study + " --out " + dir / "mpi");
  ASSERT_EQ(mpi.exitCode, 0) << mpi.output;
  EXPECT_THAT(mpi.output, HasSubstr("exceed the per-rank budget of 2.0 MiB (kernels.memory_budget_mb); distributed over 3 ranks"));
  EXPECT_THAT(mpi.output, HasSubstr("distributed kernel stage on 3 ranks: reading"));
  EXPECT_THAT(mpi.output, HasSubstr("gathering"));
  EXPECT_THAT(mpi.output, ::testing::Not(HasSubstr("rank k mod")));
  const auto record = nlohmann::json::parse(ReadFile(dir / "mpi/results.json"));
  EXPECT_EQ(record["kernels"]["distributed"]["ranks"], 3);
  EXPECT_DOUBLE_EQ(record["kernels"]["distributed"]["rank_memory_budget_mb"].get<double>(), 2.0);
  EXPECT_EQ(record["kernels"]["distributed"]["kernels_held_by_ranks"], false);
  EXPECT_FALSE(nlohmann::json::parse(ReadFile(dir / "single/results.json"))["kernels"].contains("distributed"));
  // The same cache key, and kernels equal up to float32 rounding (see Close).
  std::string keySingle, keyMpi;
  const auto a = neuromkl::exporting::LoadKernelStore(fs::directory_iterator(dir / "cache_single")->path().string(), &keySingle);
  const auto b = neuromkl::exporting::LoadKernelStore(fs::directory_iterator(dir / "cache_mpi")->path().string(), &keyMpi);
  EXPECT_EQ(keySingle, keyMpi);
  ASSERT_EQ(a.Size(), b.Size());
  for (std::size_t r = 0; r < a.Size(); ++r) EXPECT_TRUE(MatrixNear(b.kernels[r], a.kernels[r], 1e-6 * a.kernels[r].cwiseAbs().maxCoeff())) << a.info[r].name;
  ExpectSameResults(dir / "single", dir / "mpi");

  // A later single-process run finds the kernels rank 0 stored.
  const auto again = RunCli("run " + study + " --out " + dir / "again");
  ASSERT_EQ(again.exitCode, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("kernels: cache hit"));
  ExpectSameResults(dir / "single", dir / "again");
}

// Kernels over the budget stay on their ranks: a study with a covariate, subjects without a target (the kernels'
// rows the learners see are a subset of those the ranks hold), learners of kernel weights and of the summed kernel,
// a permutation test, weight maps and the exported model all run on them. Every result file equals the
// single-process run's; the cache entry the ranks wrote serves a later single-process run; the exported model
// predicts as the single-process one does.
TEST(MpiKernels, KernelsOverTheBudgetStayOnTheirRanks) {
  const TempDir dir;
  const std::string study = WriteStudy(dir, dir / "cache_single", 3, 0.2, "--unlabelled 4 --age-regions Hippocampus_L");
  auto json = nlohmann::json::parse(ReadFile(study));
  json["covariates"] = {"age"};
  json["permutations"] = {{"count", 10}};
  // SimpleMKL at a tight gap: where it stops then moves less than the comparison's 1e-4 (at the default 1e-4 gap a
  // rounding-level change of the kernels can move its weights by ~1e-4). C from 1: with this covariate, C = 0.1
  // puts every SVM variable of a fold at its bound, where the optimal bias is an interval (LIBSVM takes its midpoint,
  // or the mean over free variables when one is left free by a 1e-16 change of the kernels: 0.30 vs 0.28 seen).
  json["learners"] = nlohmann::json::parse(R"([{"name": "enmkl_svm", "params": {"mu": 0.5}, "grid": {"c": [1, 10]}},
                                               {"name": "simplemkl", "params": {"c": 1, "gap_tolerance": 1e-7}}, {"name": "kelm", "params": {"c": 1}}])");
  WriteFile(study, json.dump(2));
  const auto single = RunCli("run " + study + " --out " + dir / "single");
  ASSERT_EQ(single.exitCode, 0) << single.output;
  json["output"]["cache_dir"] = dir / "cache_mpi";
  WriteFile(study, json.dump(2));
  const auto mpi = RunMpi(3, "run " + study + " --out " + dir / "mpi");
  ASSERT_EQ(mpi.exitCode, 0) << mpi.output;
  EXPECT_THAT(mpi.output, HasSubstr("exceed the per-rank budget of 0.2 MiB (kernels.memory_budget_mb): each of the 3 ranks keeps its share (kernel k on rank k mod 3)"));
  EXPECT_THAT(mpi.output, HasSubstr("handing each kernel to its owner"));
  const auto record = nlohmann::json::parse(ReadFile(dir / "mpi/results.json"));
  EXPECT_EQ(record["kernels"]["distributed"]["kernels_held_by_ranks"], true);
  EXPECT_EQ(record["learners"][0]["permutations"]["count"], 10);
  ExpectSameResults(dir / "single", dir / "mpi");
  // The ranks wrote the cache entry (each its own kernels, rank 0 the index): a single-process run reads it.
  const auto again = RunCli("run " + study + " --out " + dir / "again");
  ASSERT_EQ(again.exitCode, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("kernels: cache hit"));
  ExpectSameResults(dir / "single", dir / "again");
  // The ranks read a cache entry each loading its own kernels: the one the single-process run wrote (float64 files).
  ExpectRanksReadTheEntry(json, study, dir / "cache_single", 3, dir / "mpi_hit", dir / "single");
  // A damaged file (truncated; read by rank 1 of 3): a miss, recomputed, with a warning; the results do not change.
  const fs::path entry = fs::directory_iterator(dir / "cache_single")->path();
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(entry))
    if (f.path().extension() == ".npy") files.push_back(f.path());
  std::sort(files.begin(), files.end());
  ASSERT_GT(files.size(), 2u);
  std::filesystem::resize_file(files[1], fs::file_size(files[1]) / 2);
  const auto damaged = RunMpi(3, "run " + study + " --out " + dir / "mpi_damaged");
  ASSERT_EQ(damaged.exitCode, 0) << damaged.output;
  EXPECT_THAT(damaged.output, HasSubstr("ignoring an unreadable cache entry"));
  EXPECT_THAT(damaged.output, HasSubstr(files[1].string() + ": the kernel file's content does not match its checksum"));
  EXPECT_THAT(ReadFile(dir / "mpi_damaged/results.json"), HasSubstr("kernel cache entry ignored and recomputed"));  // results.json says so
  ExpectSameTable(dir / "single/predictions.tsv", dir / "mpi_damaged/predictions.tsv", "predictions.tsv");
  // The exported final models predict the cohort as the single-process ones do.
  for (const std::string run : {"single", "mpi"}) {
    const auto p = RunCli("predict " + dir / (run + "/model/EnmklSvm") + " " + dir / "cohort/participants.tsv --out " + dir / ("pred_" + run) + " -q");
    ASSERT_EQ(p.exitCode, 0) << p.output;
  }
  ExpectSameTable(dir / "pred_single/predictions.tsv", dir / "pred_mpi/predictions.tsv", "predictions.tsv");
}

// A float32 study (kernels.precision) whose kernels stay on 2 ranks: each rank rounds its kernels into the compact
// store as it assembles them. Its results equal the single-process float32 run's as the float64 ones do, and both
// cache the store (float32 entries under the same key).
TEST(MpiKernels, TwoRanksHoldingTheCompactStoreGiveTheSingleProcessResultsOfAFloat32Study) {
  const TempDir dir;
  const std::string study = WriteStudy(dir, dir / "cache_single");
  auto json = nlohmann::json::parse(ReadFile(study));
  json["kernels"]["precision"] = "float32";
  WriteFile(study, json.dump(2));
  const auto single = RunCli("run " + study + " --out " + dir / "single");
  ASSERT_EQ(single.exitCode, 0) << single.output;
  json["output"]["cache_dir"] = dir / "cache_mpi";
  WriteFile(study, json.dump(2));
  const auto mpi = RunMpi(2, "run " + study + " --out " + dir / "mpi");
  ASSERT_EQ(mpi.exitCode, 0) << mpi.output;
  EXPECT_THAT(mpi.output, HasSubstr("distributed kernel stage on 2 ranks"));
  EXPECT_THAT(mpi.output, HasSubstr("kernel k on rank k mod 2"));
  const auto record = nlohmann::json::parse(ReadFile(dir / "mpi/results.json"));
  EXPECT_EQ(record["kernels"]["precision"]["values"], "float32");
  EXPECT_EQ(record["kernels"]["distributed"]["kernels_held_by_ranks"], true);
  std::string keySingle, keyMpi;
  const auto a = neuromkl::exporting::LoadKernelStore(fs::directory_iterator(dir / "cache_single")->path().string(), &keySingle);
  const auto b = neuromkl::exporting::LoadKernelStore(fs::directory_iterator(dir / "cache_mpi")->path().string(), &keyMpi);
  EXPECT_EQ(keySingle, keyMpi);
  ASSERT_TRUE(a.Compact() && b.Compact());
  ASSERT_EQ(a.Size(), b.Size());
  // Centred entries: compared relative to the centred kernel's largest entry (the raw kernels agree to 2e-7 of
  // theirs, which is larger; 1e-5 leaves room for the data's mean over spread).
  for (std::size_t r = 0; r < a.Size(); ++r) {
    const Eigen::MatrixXd x = a.compact.kernels[r].cast<double>(), y = b.compact.kernels[r].cast<double>();
    EXPECT_TRUE(MatrixNear(y, x, 1e-5 * x.cwiseAbs().maxCoeff())) << a.info[r].name;
  }
  ExpectSameResults(dir / "single", dir / "mpi");
  // The ranks load the single-process run's float32 entry, each its own kernels: the single-process results.
  ExpectRanksReadTheEntry(json, study, dir / "cache_single", 2, dir / "mpi_hit", dir / "single");
}

// A study of several sources whose kernels exceed the per-rank budget: every source's kernels stay on the ranks as they
// are formed (the image source's by its distributed stage, the tabular and connectivity kernels handed out by rank 0,
// which forms them), kernel k of a source on rank k mod P, and the study runs on them as on an images study's held
// kernels: every result file equals the single-process run's, also when every source's kernels come from the cache
// (each rank loading its own image kernels), for a float32 study (the compact store), and in a batch.
/// `dir`/batch.json run in one process (results moved to `dir`/reference), then, from an empty cache, on 3 ranks.
CliResult RunBatchTwice(const TempDir& dir) {
  const auto single = RunCli("batch " + dir / "batch.json");
  EXPECT_EQ(single.exitCode, 0) << single.output;
  fs::rename(dir / "results", dir / "reference");
  fs::remove_all(dir / ".neuromkl_cache");
  return RunMpi(3, "batch " + dir / "batch.json");
}

/// A simulated cohort with a clinical score and 12-node connectomes, and a study of three sources (116 region + 1
/// tabular + 12 node kernels of 36 subjects: 1.3 MiB in float64, 0.6 MiB in float32, over its 0.2 MiB budget).
nlohmann::json MixedStudy(const TempDir& dir) {
  EXPECT_EQ(RunCli("simulate --out " + dir / "cohort" + " --subjects " + std::to_string(kSubjects) +
                   " --downsample 3 --seed 11 --clinical-effect 0.8 --connectivity 12 --connectivity-signal node03 -q")
                .exitCode,
            0);
  auto json = nlohmann::json::parse(R"({"name": "mixed", "target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "atlas": "aal", "kernels": {"memory_budget_mb": 0.2, "cache": true, "sources": [
      {"name": "gm", "kind": "images"},
      {"name": "clin", "kind": "tabular", "tabular": {"groups": {"clinical": ["clinical"]}}},
      {"name": "fc", "kind": "connectivity", "connectivity": {"column": "connectome", "kernels": "node"}}]},
    "learners": [{"name": "enmkl_svm", "params": {"mu": 0.5}, "grid": {"c": [1, 10]}}, {"name": "kelm", "params": {"c": 1}}],
    "permutations": {"count": 4}, "cv": {"outer": {"k": 4}, "inner": {"k": 3}}, "seed": 3})");
  json["subjects"]["table"] = dir / "cohort/participants.tsv";
  json["kernels"]["sources"][1]["tabular"]["table"] = dir / "cohort/participants.tsv";
  json["kernels"]["sources"][2]["connectivity"]["nodes"] = dir / "cohort/nodes.tsv";
  return json;
}

TEST(MpiKernels, KernelsOfSeveralSourcesOverTheBudgetStayOnTheRanksSourceBySource) {
  const TempDir dir;
  auto json = MixedStudy(dir);
  const std::string study = dir / "mixed.json";
  for (const std::string precision : {"float64", "float32"}) {
    SCOPED_TRACE(precision);
    const int ranks = precision == "float64" ? 3 : 2;
    const std::string run = dir / precision;
    json["kernels"]["precision"] = precision;
    json["output"]["cache_dir"] = run + "_cache_single";
    WriteFile(study, json.dump(2));
    const auto single = RunCli("run " + study + " --out " + run + "_single");
    ASSERT_EQ(single.exitCode, 0) << single.output;
    json["output"]["cache_dir"] = run + "_cache_mpi";
    WriteFile(study, json.dump(2));
    const auto mpi = RunMpi(ranks, "run " + study + " --out " + run + "_mpi");
    ASSERT_EQ(mpi.exitCode, 0) << mpi.output;
    const std::string r = std::to_string(ranks);
    EXPECT_THAT(mpi.output, HasSubstr("the study's 129 kernels (several sources, " + std::string(precision == "float64" ? "1.28" : "0.638") +
                                      " MiB, counted before they are formed) exceed the per-rank budget of 0.2 MiB (kernels.memory_budget_mb): every "
                                      "source's kernels stay on the " + r + " ranks as they are formed or read (kernel k of a source on rank k mod " + r + ")"));
    EXPECT_THAT(mpi.output, HasSubstr("products and handing each kernel to its owner"));  // the image source's stage
    EXPECT_THAT(mpi.output, HasSubstr("requests to the " + r + " ranks holding the kernels"));
    const auto record = nlohmann::json::parse(ReadFile(run + "_mpi/results.json"));
    EXPECT_EQ(record["kernels"]["distributed"]["kernels_held_by_ranks"], true);
    EXPECT_EQ(record["kernels"]["distributed"]["ranks"], ranks);
    EXPECT_THAT(record["kernels"]["distributed"]["note"].get<std::string>(), HasSubstr("every source's kernels stayed on the ranks"));
    ExpectSameResults(run + "_single", run + "_mpi");
    // Every source's kernels from the cache the ranks' run wrote (rank 0 wrote it before handing them out).
    const auto hit = RunMpi(ranks, "run " + study + " --out " + run + "_mpi_hit");
    ASSERT_EQ(hit.exitCode, 0) << hit.output;
    EXPECT_THAT(hit.output, HasSubstr("each loaded by the rank that holds it"));  // the image source's entry
    EXPECT_THAT(hit.output, HasSubstr("every source's kernels stay on the " + r + " ranks"));
    ExpectSameResults(run + "_single", run + "_mpi_hit");
  }
  // In a batch the study is planned as held by every rank (its kernels counted from its sources before they are formed).
  json["kernels"]["precision"] = "float64";
  json["output"] = nlohmann::json::object();
  WriteFile(study, json.dump(2));
  WriteFile(dir / "batch.json", R"({"name": "b", "matrix": {"base": ")" + study + R"(", "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]}})");
  const auto mpi = RunBatchTwice(dir);
  ASSERT_EQ(mpi.exitCode, 0) << mpi.output;
  EXPECT_THAT(mpi.output, HasSubstr("then 1 studies whose kernels exceed one rank's budget"));
  EXPECT_THAT(mpi.output, HasSubstr("every source's kernels stay on the 3 ranks"));
  ExpectSameResults(dir / "reference/b/studies/enmkl_svm", dir / "results/b/studies/enmkl_svm");
}

// A batch under mpirun: the studies whose kernels exceed the per-rank budget get no units; once the other studies'
// units are done, rank 0 runs each of them with every rank holding a share of its kernels. Two cohorts: one over the
// budget (two studies: the second reads the first's cache entry, each rank its own kernels), one within it (its
// units as before). Every study's results equal the single-process batch's.
TEST(MpiKernels, ABatchRunsStudiesOverTheBudgetOnEveryRank) {
  const TempDir dir;
  for (const auto& [name, subjects] : {std::pair<std::string, int>{"big", 36}, {"small", 12}})
    ASSERT_EQ(RunCli("simulate --out " + dir / name + " --subjects " + std::to_string(subjects) + " --downsample 3 --seed 4 -q").exitCode, 0);
  // 36 subjects: 116 x 36^2 doubles = 1.1 MiB over the 0.5 MiB budget; 12 subjects: 0.13 MiB within it.
  WriteFile(dir / "batch.json", R"({"name": "b", "overrides": {"cv": {"outer": {"k": 3}, "inner": {"k": 3}}, "kernels": {"memory_budget_mb": 0.5},
    "permutations": {"count": 10}},
    "matrix": {"base": {"name": "x", "subjects": {"table": "x.tsv"}, "target": {"column": "group", "task": "classification", "positive_class": "patient"},
                        "learners": [{"name": "svm"}]},
      "cohorts": [{"name": "big", "subjects": {"table": ")" + dir / "big/participants.tsv" + R"("}},
                  {"name": "small", "subjects": {"table": ")" + dir / "small/participants.tsv" + R"("}}],
      "learners": [{"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5}}, {"name": "kelm", "params": {"c": 1}}]}})");
  const auto mpi = RunBatchTwice(dir);
  ASSERT_EQ(mpi.exitCode, 0) << mpi.output;
  EXPECT_THAT(mpi.output, HasSubstr("1 kernel computations, 2 permutation blocks, 2 studies, then 2 studies whose kernels exceed one rank's budget"));
  EXPECT_THAT(mpi.output, HasSubstr("each loaded by the rank that holds it"));  // the second big study reads the first's entry
  std::size_t studies = 0;
  for (const auto& e : fs::directory_iterator(dir / "reference/b/studies")) {
    ++studies;
    const std::string name = e.path().filename().string();
    const auto record = nlohmann::json::parse(ReadFile(dir / ("results/b/studies/" + name + "/results.json")));
    EXPECT_EQ(record["kernels"].contains("distributed"), name.find("big") != std::string::npos) << name;
    ExpectSameResults(e.path().string(), dir / ("results/b/studies/" + name));
  }
  EXPECT_EQ(studies, 4u);
}

// A study of one kind rank 0 forms itself (precomputed: 5 kernels of 36 subjects, 0.049 MiB over a 0.03 MiB budget)
// hands its kernels out once formed, kernel k to rank k mod P: the single-process results, also from its cache entry.
TEST(MpiKernels, KernelsRankZeroFormsAreHandedToTheRanks) {
  const TempDir dir;
  auto json = MixedStudy(dir);
  const auto table = ReadTsv(dir / "cohort/participants.tsv");
  std::srand(5);
  json["kernels"] = {{"memory_budget_mb", 0.03}, {"cache", true}, {"source", "precomputed"}, {"precomputed", nlohmann::json::array()}};
  for (int k = 0; k < 5; ++k) {  // linear kernels of random features, the first two shifted by the group
    Eigen::MatrixXd X = Eigen::MatrixXd::Random(kSubjects, 4 + k);
    for (int i = 0; k < 2 && i < kSubjects; ++i) X(i, 0) += table[static_cast<std::size_t>(i) + 1][2] == "patient" ? 1.0 : -1.0;
    std::string name = "k";
    name += std::to_string(k);
    const std::string file = dir / (name + ".npy");
    neuromkl::WriteNpy(file, Eigen::MatrixXd(X * X.transpose()));
    json["kernels"]["precomputed"].push_back({{"name", name}, {"file", file}});
  }
  json["output"]["cache_dir"] = dir / "cache";
  const std::string study = dir / "fc.json";
  WriteFile(study, json.dump(2));
  const auto single = RunCli("run " + study + " --out " + dir / "single");
  ASSERT_EQ(single.exitCode, 0) << single.output;
  for (const std::string run : {"mpi", "mpi_hit"}) {
    const auto mpi = RunMpi(3, "run " + study + " --out " + dir / run);
    ASSERT_EQ(mpi.exitCode, 0) << mpi.output;
    EXPECT_THAT(mpi.output, HasSubstr("the study's 5 kernels (precomputed, 0.0494 MiB) exceed the per-rank budget of 0.03 MiB (kernels.memory_budget_mb): "
                                      "rank 0 hands each of the 3 ranks its share (kernel k on rank k mod 3)"));
    if (run == "mpi_hit") {
      EXPECT_THAT(mpi.output, HasSubstr("kernels: cache hit"));
    }
    const auto record = nlohmann::json::parse(ReadFile(dir / (run + "/results.json")));
    EXPECT_EQ(record["kernels"]["distributed"]["kernels_held_by_ranks"], true);
    EXPECT_THAT(record["kernels"]["distributed"]["note"].get<std::string>(), HasSubstr("rank 0 formed the kernels (or read them from the kernel cache)"));
    ExpectSameResults(dir / "single", dir / run);
  }
}

/// The last subject's image (read by rank 2 of 3), truncated mid-stream (the header still reads); returns its path.
std::string TruncateLastImage(const TempDir& dir) {
  const auto table = ReadTsv(dir / "cohort/participants.tsv");
  std::size_t imageColumn = 0;
  while (imageColumn < table[0].size() && table[0][imageColumn] != "image") ++imageColumn;
  EXPECT_LT(imageColumn, table[0].size());
  const std::string bad = dir / ("cohort/" + table.back().at(imageColumn));
  const std::string bytes = ReadFile(bad);
  std::ofstream(bad, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  return bad;
}

/// The error of the single-process run (file, what is wrong, code) is the one rank 0 prints under mpirun.
void ExpectTheSingleProcessError(const CliResult& single, const CliResult& mpi, const std::string& bad) {
  const std::size_t at = single.output.find("error ");
  ASSERT_NE(at, std::string::npos) << single.output;
  const std::string message = single.output.substr(at, single.output.find('\n', at) - at);
  EXPECT_THAT(message, HasSubstr(bad));
  EXPECT_THAT(mpi.output, HasSubstr("[rank 0] " + message));
}

// A source that fails after another source's kernels went to the ranks (a truncated image read by rank 2 of 3): the
// ranks drop what they hold, and the job ends with the single-process run's error and exit code, leaving no output.
TEST(MpiKernels, AFailingSourceOfAHeldStudyEndsTheJobWithItsError) {
  const TempDir dir;
  auto json = MixedStudy(dir);
  std::swap(json["kernels"]["sources"][0], json["kernels"]["sources"][1]);  // the tabular source first, then the images
  json["output"]["cache_dir"] = dir / "cache";
  const std::string study = dir / "mixed.json";
  WriteFile(study, json.dump(2));
  const std::string bad = TruncateLastImage(dir);
  const auto single = RunCli("run " + study + " --out " + dir / "single");
  ASSERT_NE(single.exitCode, 0);
  const auto mpi = RunMpi(3, "run " + study + " --out " + dir / "mpi");
  EXPECT_EQ(mpi.exitCode, single.exitCode) << mpi.output;
  EXPECT_THAT(mpi.output, HasSubstr("every source's kernels stay on the 3 ranks"));
  ExpectTheSingleProcessError(single, mpi, bad);
  EXPECT_FALSE(fs::exists(dir / "mpi"));
}

TEST(MpiKernels, BadImageOnAnotherRankEndsTheJobWithItsError) {
  const TempDir dir;
  const std::string study = WriteStudy(dir, dir / "cache");
  const std::string bad = TruncateLastImage(dir);

  const auto single = RunCli("run " + study + " --out " + dir / "single");
  ASSERT_NE(single.exitCode, 0);
  const auto mpi = RunMpi(3, "run " + study + " --out " + dir / "mpi");
  EXPECT_EQ(mpi.exitCode, single.exitCode) << mpi.output;
  EXPECT_THAT(mpi.output, HasSubstr("distributed over 3 ranks"));
  ExpectTheSingleProcessError(single, mpi, bad);
  EXPECT_FALSE(fs::exists(dir / "mpi"));  // no partial output
  EXPECT_FALSE(fs::exists(dir / "single"));
  EXPECT_TRUE(!fs::exists(dir / "cache") || fs::is_empty(dir / "cache"));
}
#endif

}  // namespace
