#pragma once
// Shared test helpers: data paths, temporary folders, running the CLI, matrix comparison.
#include <map>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

namespace neuromkl::testing {

/// ../shared/data/<relative>: the optional real cohorts beside the project (a user's clone has none). A test that
/// reads them starts with NEUROMKL_SKIP_WITHOUT_SHARED_DATA(relative), which skips it with a message when absent.
std::string SharedData(const std::string& relative);
/// <repo>/tests/data/<relative>: files only the tests read, shipped with their provenance.
std::string TestData(const std::string& relative);
bool SharedDataPresent(const std::string& relative);
std::string SourcePath(const std::string& relative);  ///< <repo>/<relative>

/// A fresh temporary folder, removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& Path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CliResult {
  int exitCode;
  std::string output;  ///< stdout and stderr together
};
/// Runs `neuromkl ARGS` and captures its output.
CliResult RunCli(const std::string& args);
/// Runs a shell command line and captures its standard output (redirect stderr in `command` to capture it too).
CliResult RunShell(const std::string& command);

/// A test suite over one cohort written by `neuromkl simulate` once for the suite, in a temporary folder
/// (Cohort()). Suite: the test class itself (each suite its own folder); it calls SimulateCohort from its
/// SetUpTestSuite with the simulate options it needs.
template <class Suite>
class SimulatedCohortSuite : public ::testing::Test {
 protected:
  static void SimulateCohort(const std::string& options) {
    dir_ = new TempDir();
    const auto r = RunCli("simulate --out " + Cohort() + " " + options + " -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Cohort() { return *dir_ / "cohort"; }
  static TempDir& Dir() { return *dir_; }

 private:
  static inline TempDir* dir_ = nullptr;
};

void WriteFile(const std::string& path, const std::string& text);
/// A tab-separated file as rows of cells (the header is row 0).
std::vector<std::vector<std::string>> ReadTsv(const std::string& path);
/// The same as one map per data row, column name -> cell, in file order.
std::vector<std::map<std::string, std::string>> ReadTsvByColumn(const std::string& path);
/// Each outer fold's exported model of a study (`results`/model/`folder`/folds/<k>), applied by `neuromkl predict` to
/// `table` (into `outPrefix`<k>): the decision values of that fold's held-out subjects in the study's predictions.tsv,
/// within `tolerance` x the fold's largest magnitude. The table must list `subjects` subjects. Returns the output folders
/// (by fold) and the held-out subjects checked.
struct FoldModelCheck {
  std::map<std::string, std::string> outputs;
  std::vector<std::string> checked;
};
FoldModelCheck ExpectFoldModelsGiveTheStudyDecisions(const std::string& results, const std::string& folder, const std::string& table,
                                                     const std::string& outPrefix, std::size_t subjects, double tolerance = 1e-6);

/// The flags for Debian's chromium, headless, as root, with no network chatter and its own profile.
std::string HeadlessChromium(const std::string& userDataDir);
std::string ReadFile(const std::string& path);

/// Max |a - b| <= atol + rtol |b| elementwise; on failure prints the worst entry.
::testing::AssertionResult MatrixNear(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b, double atol, double rtol = 0);

}  // namespace neuromkl::testing

/// Skips the current test, saying what is missing, when ../shared/data/<relative> does not exist.
#define NEUROMKL_SKIP_WITHOUT_SHARED_DATA(relative)                                                              \
  do {                                                                                                           \
    if (!::neuromkl::testing::SharedDataPresent(relative))                                                        \
      GTEST_SKIP() << "optional real data absent: " << ::neuromkl::testing::SharedData(relative)                 \
                   << " (../shared/data beside the clone; the default suite does not need it)";                  \
  } while (false)
