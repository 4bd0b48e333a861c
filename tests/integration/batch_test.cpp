// Batches: matrix expansion and validation, shared kernels, the summary, resuming after
// kill -9 (for real: the process is killed mid-run and the rerun must reproduce an uninterrupted
// run byte for byte, timings aside), permutation checkpoints, shards + merge, and MPI ranks.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

/// Two simulated cohorts with a classification target ("group") and a regression one ("score").
class Batch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    for (const char* c : {"c1", "c2"}) {
      const auto r = RunCli("simulate --out " + (*dir_ / c) + " --subjects 24 --downsample 3 --seed " + (c[1] == '1' ? "1" : "2") + " -q");
      ASSERT_EQ(r.exitCode, 0) << r.output;
      auto rows = ReadTsv(*dir_ / (std::string(c) + "/participants.tsv"));
      std::string text = "subject\timage\tgroup\tscore\n";
      for (std::size_t i = 1; i < rows.size(); ++i)
        text += rows[i][0] + "\t" + rows[i][1] + "\t" + rows[i][2] + "\t" + std::to_string((i * 7) % 11 + (rows[i][2] == "patient" ? 2 : 0)) + "\n";
      WriteFile(*dir_ / (std::string(c) + "/participants.tsv"), text);
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  /// A batch in its own folder (cohorts referenced by absolute path): 2 cohorts x 2 targets x 2 learners.
  static std::string WriteBatch(const std::string& folder, const std::string& name, int permutations, const std::string& learners) {
    const std::string path = *dir_ / (folder + "/batch.json");
    WriteFile(path, R"({"name": ")" + name + R"(", "overrides": {"cv": {"outer": {"k": 3}, "inner": {"k": 3}}, "permutations": {"count": )" +
                        std::to_string(permutations) + R"(}},
      "matrix": {"base": {"name": "b", "subjects": {"table": "x.tsv"}, "target": {"column": "group", "task": "classification"}, "learners": [{"name": "svm"}]},
        "cohorts": [{"name": "c1", "subjects": {"table": ")" + (*dir_ / "c1/participants.tsv") + R"("}},
                    {"name": "c2", "subjects": {"table": ")" + (*dir_ / "c2/participants.tsv") + R"("}}],
        "targets": [{"name": "dx", "column": "group", "task": "classification", "positive_class": "patient"}, {"column": "score", "task": "regression"}],
        "learners": )" + learners + "}}");
    return path;
  }
  static TempDir* dir_;
};
TempDir* Batch::dir_ = nullptr;

const char* kQuickLearners = R"([{"name": "kelm", "params": {"c": 1}}, {"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5}}])";
// Slow enough (hundreds of permutations, grids) that a kill lands mid-batch.
const char* kSlowLearners = R"([{"name": "krr", "grid": {"lambda": [0.1, 1, 10]}}, {"name": "enmkl_krr", "params": {"mu": 0.5}, "grid": {"lambda": [0.1, 1, 10]}}])";

/// Every file of `a` equals its twin in `b`, except the timings and dates of results.json and
/// report.html and the kernel cache's hit/miss note (provenance, not results).
void ExpectSameResults(const std::string& a, const std::string& b) {
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(a)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), a).string();
    ASSERT_TRUE(fs::exists(b + "/" + rel)) << rel;
    std::string x = ReadFile(e.path().string()), y = ReadFile(b + "/" + rel);
    if (e.path().filename() == "results.json") {
      auto strip = [](std::string text) {
        auto j = nlohmann::json::parse(text);
        j.erase("date");
        j.erase("seconds");
        j["kernels"].erase("cache");
        for (auto& l : j["learners"])
          for (auto& f : l["folds"])
            if (f.contains("fit")) f["fit"].erase("seconds");
        return j.dump();
      };
      x = strip(x), y = strip(y);
    } else if (e.path().filename() == "report.html") {
      const std::regex when(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|, [0-9.]+ s<)");
      x = std::regex_replace(x, when, ""), y = std::regex_replace(y, when, "");
    }
    EXPECT_TRUE(x == y) << rel << " differs";
    ++files;
  }
  EXPECT_GT(files, 50u);  // the comparison really covered the studies
}

std::string StudiesDir(const std::string& batchFile, const std::string& name) { return fs::path(batchFile).parent_path().string() + "/results/" + name; }

pid_t Spawn(const std::string& args) {
  const std::string cmd = "exec " + std::string(NEUROMKL_CLI) + " " + args + " >/dev/null 2>&1";  // built before fork: no allocation in the child
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

/// Waits until `ready()` (polling), then kill -9; false if the process ended first.
template <typename F>
bool KillWhen(pid_t pid, F ready, double timeoutSeconds = 120) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < timeoutSeconds) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return false;
    if (ready()) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return false;
}

TEST_F(Batch, MatrixExpandsIntoNamedStudiesAndValidateChecksEveryStudy) {
  const std::string batch = WriteBatch("validate", "v", 0, kQuickLearners);
  const auto ok = RunCli("validate " + batch);
  ASSERT_EQ(ok.exitCode, 0) << ok.output;
  for (const char* name : {"c1_dx_kelm", "c1_dx_enmkl_krr", "c1_score_kelm", "c2_score_enmkl_krr"}) EXPECT_THAT(ok.output, HasSubstr(std::string("[ok] ") + name));
  EXPECT_THAT(ok.output, HasSubstr("8 of 8 studies valid; 2 subjects tables"));

  // One bad learner entry and one bad cohort: every problem is listed, and `batch` runs nothing.
  std::string text = ReadFile(batch);
  auto replace = [&](const std::string& from, const std::string& to) {
    ASSERT_NE(text.find(from), std::string::npos) << from;
    text.replace(text.find(from), from.size(), to);
  };
  replace(R"("lambda": 1, "mu": 0.5)", R"("lambda": -1, "mu": 0.5)");
  replace(*dir_ / "c2/participants.tsv", *dir_ / "c2/missing.tsv");
  WriteFile(batch, text);
  const auto bad = RunCli("validate " + batch);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_THAT(bad.output, HasSubstr("[invalid] c1_dx_enmkl_krr"));
  EXPECT_THAT(bad.output, HasSubstr("/learners/0/params/lambda: expected a value in (0, inf), found -1"));
  EXPECT_THAT(bad.output, HasSubstr("[invalid] c2_dx_kelm"));
  EXPECT_THAT(bad.output, HasSubstr("missing.tsv"));
  EXPECT_THAT(bad.output, HasSubstr("[ok] c1_dx_kelm"));
  const auto refused = RunCli("batch " + batch);
  EXPECT_EQ(refused.exitCode, 2);
  // The studies of the missing table are refused too (an input error, not a configuration one): the six validate refuses.
  EXPECT_THAT(refused.output, HasSubstr("6 of 8 studies are invalid (as `neuromkl validate` says); nothing was run"));
  EXPECT_THAT(refused.output, HasSubstr("c2_dx_kelm: " + (*dir_ / "c2/missing.tsv") + ": cannot open the table"));
  EXPECT_THAT(refused.output, HasSubstr("[table:Unreadable]"));
  EXPECT_FALSE(fs::exists(StudiesDir(batch, "v") + "/studies"));

  // Duplicate names are refused with both origins.
  WriteFile(*dir_ / "validate/dup.json", R"({"name": "d", "studies": [")" + (*dir_ / "c1/study.json") + R"(", ")" + (*dir_ / "c2/study.json") + R"("]})");
  const auto dup = RunCli("validate " + (*dir_ / "validate/dup.json"));
  EXPECT_EQ(dup.exitCode, 2);
  EXPECT_THAT(dup.output, HasSubstr("two studies are named \"simulated_classification\" (studies[0]"));
}

TEST_F(Batch, SharesKernelsPerCohortWritesASummaryAndSkipsCompletedStudies) {
  const std::string batch = WriteBatch("shared", "s", 5, kQuickLearners);
  const auto r = RunCli("batch " + batch);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("8 completed, 0 skipped"));
  const std::string out = StudiesDir(batch, "s");
  int computed = 0, hits = 0;
  for (const auto& e : fs::directory_iterator(out + "/studies")) {
    const auto j = nlohmann::json::parse(ReadFile(e.path().string() + "/results.json"));
    (j["kernels"]["cache"] == "hit" ? hits : computed) += 1;
  }
  EXPECT_EQ(computed, 2);  // one kernel computation per cohort; the 6 other studies reuse it
  EXPECT_EQ(hits, 6);
  const auto rows = ReadTsv(out + "/batch_summary.tsv");
  ASSERT_EQ(rows.size(), 9u);
  EXPECT_EQ(rows[0][0], "study");
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][9], "completed") << rows[i][0];
    EXPECT_EQ(rows[i][10], rows[i][7] == "classification" ? "balanced_accuracy" : "pearson_r");
    EXPECT_FALSE(rows[i][18].empty());  // top regions
  }
  const std::string html = ReadFile(out + "/index.html");
  EXPECT_THAT(html, HasSubstr(R"(<a href="studies/c2_score_enmkl_krr/report.html">c2_score_enmkl_krr</a>)"));
  EXPECT_TRUE(fs::exists(out + "/batch_summary.json"));
  const auto again = RunCli("batch " + batch);
  EXPECT_EQ(again.exitCode, 0);
  EXPECT_THAT(again.output, HasSubstr("0 completed, 8 skipped"));
}

TEST_F(Batch, SurvivesKillNineAndResumesToIdenticalResults) {
  const std::string batch = WriteBatch("kill", "k", 150, kSlowLearners);
  const std::string out = StudiesDir(batch, "k");
  ASSERT_EQ(RunCli("batch " + batch + " -q").exitCode, 0);
  fs::rename(out, out + "_reference");

  const pid_t pid = Spawn("batch " + batch);
  const bool killed = KillWhen(pid, [&] { return fs::exists(out + "/studies/c1_dx_enmkl_krr/results.json"); });
  ASSERT_TRUE(killed) << "the batch finished before it could be killed; make its studies slower";
  int complete = 0;
  for (const auto& e : fs::directory_iterator(out + "/studies")) complete += fs::exists(e.path() / "results.json");
  EXPECT_GE(complete, 2);
  EXPECT_LT(complete, 8);  // killed mid-batch

  const auto resumed = RunCli("batch " + batch);
  ASSERT_EQ(resumed.exitCode, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr(std::to_string(complete) + " skipped"));
  for (const auto& e : fs::directory_iterator(out + "/studies"))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "stale " << e.path();
  ExpectSameResults(out + "_reference/studies", out + "/studies");
  ExpectSameResults(out + "/studies", out + "_reference/studies");
}

TEST_F(Batch, AnInterruptedPermutationTestLosesAtMostOneBlock) {
  const std::string study = *dir_ / "perm/study.json";
  WriteFile(study, R"({"name": "p", "subjects": {"table": ")" + (*dir_ / "c1/participants.tsv") +
                       R"("}, "target": {"column": "score", "task": "regression"}, "cv": {"outer": {"k": 3}, "inner": {"k": 3}},
      "learners": [{"name": "enmkl_krr", "params": {"mu": 0.5}, "grid": {"lambda": [0.1, 1, 10]}}], "permutations": {"count": 400}})");
  ASSERT_EQ(RunCli("run " + study + " --out " + (*dir_ / "perm/reference") + " -q").exitCode, 0);
  const std::string out = *dir_ / "perm/out", checkpoints = out + ".checkpoint";
  auto blocks = [&] {
    std::error_code ec;
    int count = 0;
    for (const auto& e : fs::directory_iterator(checkpoints, ec)) count += e.path().extension() == ".json";
    return count;
  };
  const pid_t pid = Spawn("run " + study + " --out " + out);
  ASSERT_TRUE(KillWhen(pid, [&] { return blocks() >= 5; })) << "the run finished before it could be killed";
  const int saved = blocks();
  EXPECT_LT(saved, 40);
  EXPECT_FALSE(fs::exists(out));
  const auto resumed = RunCli("run " + study + " --out " + out);
  ASSERT_EQ(resumed.exitCode, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("permutations: " + std::to_string(saved) + " of 40 blocks reused from the checkpoint"));
  EXPECT_FALSE(fs::exists(checkpoints));  // removed once the results hold everything
  EXPECT_EQ(ReadFile(out + "/null_distribution.tsv"), ReadFile(*dir_ / "perm/reference/null_distribution.tsv"));
  EXPECT_EQ(ReadFile(out + "/metrics.tsv"), ReadFile(*dir_ / "perm/reference/metrics.tsv"));
}

TEST_F(Batch, ShardsPlusMergeEqualOneRun) {
  const std::string batch = WriteBatch("shards", "h", 5, kQuickLearners);
  const std::string out = StudiesDir(batch, "h");
  ASSERT_EQ(RunCli("batch " + batch + " -q").exitCode, 0);
  fs::rename(out, out + "_reference");
  const auto first = RunCli("batch " + batch + " --shard 0/2");
  ASSERT_EQ(first.exitCode, 0) << first.output;
  EXPECT_THAT(first.output, HasSubstr("4 completed"));
  EXPECT_THAT(first.output, HasSubstr("neuromkl merge"));
  const auto early = RunCli("merge " + batch);
  EXPECT_EQ(early.exitCode, 1);  // half the studies are not run yet
  EXPECT_THAT(early.output, HasSubstr("4 completed, 0 failed, 4 not run"));
  ASSERT_EQ(RunCli("batch " + batch + " --shard 1/2 -q").exitCode, 0);
  const auto merged = RunCli("merge " + batch);
  EXPECT_EQ(merged.exitCode, 0) << merged.output;
  ExpectSameResults(out + "_reference/studies", out + "/studies");
  auto rows = ReadTsv(out + "/batch_summary.tsv"), ref = ReadTsv(out + "_reference/batch_summary.tsv");
  ASSERT_EQ(rows.size(), ref.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i][20] = ref[i][20] = "";  // seconds
    rows[i][21] = ref[i][21] = "";  // cache hit or computed
    EXPECT_EQ(rows[i], ref[i]);
  }
  EXPECT_THAT(RunCli("batch " + batch + " --shard 2/2").output, HasSubstr("expected i/N with 0 <= i < N"));
}

#ifdef NEUROMKL_MPIEXEC
TEST_F(Batch, MpiRanksGiveTheSingleProcessResults) {
  const std::string batch = WriteBatch("mpi", "m", 25, kSlowLearners);
  const std::string out = StudiesDir(batch, "m");
  ASSERT_EQ(RunCli("batch " + batch + " -q").exitCode, 0);
  fs::rename(out, out + "_reference");
  for (int ranks : {2, 3}) {
    const std::string cmd = std::string(NEUROMKL_MPIEXEC) + " --oversubscribe --allow-run-as-root -np " + std::to_string(ranks) + " " + NEUROMKL_CLI +
                            " batch " + batch + " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char buf[4096];
    while (fgets(buf, sizeof buf, pipe)) output += buf;
    const int status = pclose(pipe);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
    EXPECT_THAT(output, HasSubstr(std::to_string(ranks) + " ranks; 2 kernel computations, 24 permutation blocks, 8 studies"));
    EXPECT_THAT(output, HasSubstr("8 completed"));
    ExpectSameResults(out + "_reference/studies", out + "/studies");
    fs::rename(out, out + "_np" + std::to_string(ranks));
  }
}
#endif

}  // namespace
